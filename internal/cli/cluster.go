package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

const clusterUsage = `
Usage:
  sluice cluster status [--shard K] [--endpoint URL] [--json]
  sluice cluster add <node-id> <raft-host:port> [--wait] [--wait-timeout D] [--endpoint URL] [--json]
  sluice cluster remove <node-id> [--endpoint URL] [--json]
  sluice cluster check-stop <node-id> [--wait D] [--endpoint URL] [--json]

status prints what one cluster node (the one at --endpoint, any node's
public HTTP address) knows: its id, role, Raft term, the leader, its commit
and applied indexes, the replication factor (how many voters the leader keeps), each member's
membership (voter, or learner: added and not caught up yet, or a standby
copy beyond the replication factor), replication progress (MATCH, the last log index it
holds, LAG, the entries it lacks behind the leader's last index, and
IN-SYNC, whether the leader could promote it at once; from the leader's
view) and the internal addresses each node advertised when it
last led. The members are the replicated membership, not the
configuration. Ask every node to see the whole cluster. With --shard K
(a cluster with shards) it prints shard K's members instead, with their
MATCH, LAG and IN-SYNC as that shard's leader sees them (read from it
through the node asked, which need not hold the shard): how far a node
moved into a shard has caught up.

add makes a node a member: start it first with join = true (or --join) and
its own node id, then run add against any member; it receives the leader's
state (a snapshot) and the log after it. It joins as a learner, which
receives the log but neither votes nor counts in the commit quorum, so a
new node that is down or still copying cannot stop the cluster; the leader
promotes it to voter on its own once its log has caught up, if the cluster
has fewer voters than its replication factor ([cluster]
replication_factor, default 3). Otherwise it stays a learner: a full copy
that serves clients and replaces a voter that goes silent for
replace_after. add returns once the node is a learner; with --wait it
waits until it is a voter, or a caught-up learner when the cluster already
has its voters, and fails after --wait-timeout (the node stays a learner
and is promoted whenever it catches up and is needed); meanwhile it says
on stderr where the node stands in the leader's view (not heard from yet,
entries behind, in sync) when that changes, and every 15s. With [cluster]
shards above 1, add and remove change every shard, and --wait waits until
the node is a voter of every shard (a standby: caught up in shard 0 and a
member of every other); with placement "subset" they change shard 0 only,
--wait waits for shard 0, and the placement controller then moves shards
onto an added node and off a removed one (status shows each shard's
members, also of shards the node asked holds no copy of: not-held).
Node ids are never reused.

remove takes a member (voter or learner) out of the group (a dead one, or
one to retire); stop its process afterwards. Both wait until the leader
has applied the change and print the new membership.

check-stop says whether a node can be stopped now (a rolling restart)
without stopping the writes of a group it votes in: sluice cluster
check-stop --help.
`

// clusterReport mirrors the JSON of GET /sluice/v1/cluster
// (internal/cluster.Report; TestClusterStatusCommand in test/cluster
// prints a live one through this decoder).
type clusterReport struct {
	Node struct {
		ID      uint64            `json:"id"`
		Role    string            `json:"role"`
		Term    uint64            `json:"term"`
		Leader  uint64            `json:"leader"`
		Commit  uint64            `json:"commit"`
		Applied uint64            `json:"applied"`
		Match   map[string]uint64 `json:"match"`
		Joining bool              `json:"joining"`
		Stopped bool              `json:"stopped"`
	} `json:"node"`
	Public struct {
		HTTP  string `json:"http"`
		AMQP  string `json:"amqp"`
		AMQPS string `json:"amqps"`
		TLS   bool   `json:"tls"`
	} `json:"public"`
	Peers []struct {
		ID         uint64 `json:"id"`
		Raft       string `json:"raft"`
		Membership string `json:"membership"`
		Advertised *struct {
			Term uint64 `json:"term"`
			SQS  string `json:"sqs"`
			AMQP string `json:"amqp"`
		} `json:"advertised"`
	} `json:"peers"`
	View *viewReport `json:"view,omitempty"`
	// Shards mirrors internal/cluster.ShardStatus, with [cluster] shards
	// above 1.
	Shards []shardReport `json:"shards,omitempty"`
	// Placement mirrors internal/cluster.Report.Placement.
	Placement string `json:"placement,omitempty"`
	// Warnings mirrors internal/cluster.Report.Warnings.
	Warnings []struct {
		Kind    string   `json:"kind"`
		Nodes   []uint64 `json:"nodes"`
		Message string   `json:"message"`
	} `json:"warnings,omitempty"`
}

// shardReport is one shard of clusterReport.Shards.
type shardReport struct {
	Shard    int      `json:"shard"`
	Role     string   `json:"role"`
	Term     uint64   `json:"term"`
	Leader   uint64   `json:"leader"`
	Commit   uint64   `json:"commit"`
	Applied  uint64   `json:"applied"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners"`
	Stopped  bool     `json:"stopped"`
	NotHeld  bool     `json:"not_held"`
}

// viewReport mirrors the leader's view (internal/cluster.ClusterView),
// also one shard's (GET /sluice/v1/cluster/shards/{shard}).
type viewReport struct {
	Leader            uint64       `json:"leader"`
	Term              uint64       `json:"term"`
	LastIndex         uint64       `json:"last_index"`
	ReplicationFactor int          `json:"replication_factor"`
	Members           []viewMember `json:"members"`
}

// viewMember mirrors internal/cluster.MemberView.
type viewMember struct {
	ID         uint64 `json:"id"`
	Raft       string `json:"raft"`
	Membership string `json:"membership"`
	Match      uint64 `json:"match"`
	Lag        uint64 `json:"lag"`
	InSync     bool   `json:"in_sync"`
	// ReplicationFactor is the member's own setting, as it reported it.
	ReplicationFactor int `json:"replication_factor,omitempty"`
	// Links is how the member carries its links to the other nodes
	// ("plain", "tls", or a switch-over's "accept-both, dial …").
	Links string `json:"links,omitempty"`
	// ClockOffsetMs is the member's wall clock minus the cluster's (the
	// leader's engine clock), as it measured it; nil when it has not.
	ClockOffsetMs *float64 `json:"clock_offset_ms,omitempty"`
	// Stopped: one of the member's Raft nodes stopped on a failed write.
	Stopped bool `json:"stopped,omitempty"`
	// ReportedMsAgo is the age of the member's last status report to the
	// leader; nil when it never reported (not running, or unreachable).
	ReportedMsAgo *int64 `json:"reported_ms_ago,omitempty"`
}

// waitProgressEvery is how often `cluster add --wait` repeats where the
// node stands while that does not change.
const waitProgressEvery = 15 * time.Second

// waitProgress says where node id stands in the leader's view in rep, for
// an operator waiting on `cluster add --wait`: its phase ("unheard",
// "behind", "in sync"; "" when the view does not list it) and what it is
// or does, to follow "node <id> ".
func waitProgress(rep clusterReport, id uint64) (phase, what string) {
	if rep.View == nil {
		return "", ""
	}
	for _, m := range rep.View.Members {
		switch {
		case m.ID != id:
		case m.ReportedMsAgo == nil:
			return "unheard", "has not reported to the leader yet: is it running with join = true (--join), and can it reach the other members and they its raft address?"
		case m.InSync:
			return "in sync", fmt.Sprintf("is a %s in sync with the leader", m.Membership)
		default:
			return "behind", fmt.Sprintf("is a %s, %d log entries behind the leader (a new node first receives a snapshot of the leader's state)", m.Membership, m.Lag)
		}
	}
	return "", ""
}

// membersAnswer mirrors the JSON of POST/DELETE /sluice/v1/cluster/members
// (internal/cluster.MembersResponse).
type membersAnswer struct {
	Members []memberAnswer `json:"members"`
}

type memberAnswer struct {
	ID         uint64 `json:"id"`
	Raft       string `json:"raft"`
	Membership string `json:"membership"`
}

// DefaultWaitVoter is how long `sluice cluster add --wait` waits for the
// new node to be promoted to voter (or to catch up as a standby).
const DefaultWaitVoter = 5 * time.Minute

// Cluster runs `sluice cluster status|add|remove|check-stop`.
func Cluster(ctx context.Context, args []string, env *Env) int {
	if len(args) == 0 {
		return newCommand(env, "sluice cluster", clusterUsage).usageError("missing command (status, add, remove or check-stop)")
	}
	switch args[0] {
	case "status":
		return clusterStatus(ctx, args[1:], env)
	case "check-stop":
		return checkStop(ctx, args[1:], env)
	case "add":
		c := newCommand(env, "sluice cluster add", clusterUsage)
		wait := c.fs.Bool("wait", false, "wait until the new node has caught up (and is a voter, unless the cluster already has replication_factor voters)")
		waitTimeout := c.fs.Duration("wait-timeout", DefaultWaitVoter, "with --wait: give up after this long (the node stays a learner)")
		return c.run(args[1:], 2, 2, func(pos []string) int {
			id, err := parseNodeID(pos[0])
			if err != nil {
				return c.usageError("%v", err)
			}
			if *waitTimeout <= 0 {
				return c.usageError("--wait-timeout must be positive")
			}
			var out membersAnswer
			if err := c.client().call(ctx, "POST", "cluster/members", nil, map[string]any{"id": id, "raft": pos[1]}, &out); err != nil {
				return c.fail(err)
			}
			if !*wait {
				return c.printMembers(out, fmt.Sprintf("added node %d (raft %s) as a learner; the leader promotes it to voter once it has caught up, if the cluster has fewer voters than its replication factor", id, pos[1]))
			}
			if !c.json {
				as := "a member"
				for _, m := range out.Members {
					if m.ID == id {
						as = "a " + m.Membership
					}
				}
				fmt.Fprintf(c.env.Stderr, "added node %d (raft %s) as %s; waiting for it to catch up\n", id, pos[1], as)
			}
			out, standby, err := waitVoter(ctx, c, id, *waitTimeout)
			if err != nil {
				return c.fail(err)
			}
			if standby > 0 {
				return c.printMembers(out, fmt.Sprintf("node %d (raft %s) has caught up and stays a learner: the cluster already has its %d voters (replication_factor); it replaces a voter that goes silent", id, pos[1], standby))
			}
			return c.printMembers(out, fmt.Sprintf("node %d (raft %s) is a voter", id, pos[1]))
		})
	case "remove":
		c := newCommand(env, "sluice cluster remove", clusterUsage)
		return c.run(args[1:], 1, 1, func(pos []string) int {
			id, err := parseNodeID(pos[0])
			if err != nil {
				return c.usageError("%v", err)
			}
			var out membersAnswer
			if err := c.client().call(ctx, "DELETE", "cluster/members/"+strconv.FormatUint(id, 10), nil, nil, &out); err != nil {
				return c.fail(err)
			}
			return c.printMembers(out, fmt.Sprintf("removed node %d", id))
		})
	}
	return newCommand(env, "sluice cluster", clusterUsage).usageError("unknown command %q", args[0])
}

// parseNodeID parses a node id argument (1 or more).
func parseNodeID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("node id %q is not a number of 1 or more", s)
	}
	return id, nil
}

// printMembers prints a membership change's answer.
func (c *command) printMembers(out membersAnswer, what string) int {
	if c.json {
		return c.printJSON(out)
	}
	fmt.Fprintf(c.env.Stdout, "%s; members:\n", what)
	t := newTable(c.env.Stdout, "ID", "RAFT", "MEMBERSHIP")
	for _, m := range out.Members {
		t.row(strconv.FormatUint(m.ID, 10), m.Raft, dash(m.Membership))
	}
	t.flush()
	return ExitOK
}

// waitVoter polls GET /sluice/v1/cluster at the command's endpoint until
// it lists node id as a voter, or as a learner in sync with the leader
// while the cluster already has replication_factor voters (a standby:
// standby is then that factor), and returns that membership. Errors while
// polling (a leader change, say) are retried; it fails once timeout has
// passed or ctx ends, saying what the node was last seen as.
func waitVoter(ctx context.Context, c *command, id uint64, timeout time.Duration) (out membersAnswer, standby int, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl := c.client()
	timer := time.NewTimer(c.env.PollInterval)
	defer timer.Stop()
	seen := "not listed by the node at " + c.endpoint
	var lastErr error
	var phase, progress string // the latest in the leader's view (waitProgress)
	var told time.Time         // when phase was last printed
	for {
		var rep clusterReport
		if err := cl.call(ctx, "GET", "cluster", nil, nil, &rep); err != nil {
			lastErr = err
		} else {
			lastErr = nil
			if p, what := waitProgress(rep, id); p != "" {
				if now := c.env.Now(); !c.json && (p != phase || now.Sub(told) >= waitProgressEvery) {
					fmt.Fprintf(c.env.Stderr, "node %d %s\n", id, what)
					told = now
				}
				phase, progress = p, what
			}
			seen = "not listed by the node at " + c.endpoint
			out = membersAnswer{}
			for _, p := range rep.Peers {
				out.Members = append(out.Members, memberAnswer{ID: p.ID, Raft: p.Raft, Membership: p.Membership})
				if p.ID == id {
					seen = "a " + p.Membership
				}
			}
			slices.SortFunc(out.Members, func(a, b memberAnswer) int { return cmp.Compare(a.ID, b.ID) })
			if seen == "a voter" {
				if seen = shardsLag(rep, id, false); seen == "" {
					return out, 0, nil
				}
			} else if f := standbyFactor(rep, id); f > 0 {
				if seen = shardsLag(rep, id, true); seen == "" {
					return out, f, nil
				}
			}
		}
		timer.Reset(c.env.PollInterval)
		select {
		case <-ctx.Done():
			why := "it has not caught up with the leader (is it running with join = true, and can the leader reach its raft address?)"
			if progress != "" {
				why = "it " + progress
			}
			msg := fmt.Sprintf("node %d is still %s after waiting %s: %s; see sluice cluster status", id, seen, timeout, why)
			if lastErr != nil {
				msg += fmt.Sprintf(" (last error: %v)", lastErr)
			}
			return membersAnswer{}, 0, errors.New(msg)
		case <-timer.C:
		}
	}
}

// shardsLag, with [cluster] shards above 1 (rep lists the shards), names
// the first shard of which node id is not yet a voter (or, for a standby,
// not a member at all) as the asked node has applied it: "a learner in
// shard 2", say. It is "" when there is no such shard. With placement
// "subset" a node is a member of the shards the placement controller
// gives it, not of every shard: only shard 0 counts. Shard 0 is the one
// waitVoter reads from rep's peers; a standby's catching up is checked on
// shard 0 only (the leader's view), the other shards' only by membership.
func shardsLag(rep clusterReport, id uint64, standby bool) string {
	for _, sh := range rep.Shards {
		switch {
		case rep.Placement == "subset" && sh.Shard > 0:
		case slices.Contains(sh.Voters, id):
		case slices.Contains(sh.Learners, id):
			if !standby {
				return fmt.Sprintf("a learner in shard %d", sh.Shard)
			}
		default:
			return fmt.Sprintf("not a member of shard %d", sh.Shard)
		}
	}
	return ""
}

// standbyFactor returns the replication factor when the leader's view in
// rep shows node id as a learner in sync while the voters already number
// that factor (the leader keeps it a learner), else 0.
func standbyFactor(rep clusterReport, id uint64) int {
	if rep.View == nil || rep.View.ReplicationFactor <= 0 {
		return 0
	}
	voters, ok := 0, false
	for _, m := range rep.View.Members {
		if m.Membership == "voter" {
			voters++
		}
		if m.ID == id && m.Membership == "learner" && m.InSync {
			ok = true
		}
	}
	if !ok || voters < rep.View.ReplicationFactor {
		return 0
	}
	return rep.View.ReplicationFactor
}

// clusterStatus runs `sluice cluster status`.
func clusterStatus(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice cluster status", clusterUsage)
	shard := c.fs.Int("shard", -1, "print this shard's members and their replication progress, from its leader")
	return c.run(args, 0, 0, func([]string) int {
		if *shard >= 0 {
			return shardStatus(ctx, c, *shard)
		}
		var raw json.RawMessage
		if err := c.client().call(ctx, "GET", "cluster", nil, nil, &raw); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(raw) // the node's whole answer, the leader's view included
		}
		var rep clusterReport
		if err := json.Unmarshal(raw, &rep); err != nil {
			return c.fail(fmt.Errorf("unreadable answer from %s: %w", c.endpoint, err))
		}
		w := c.env.Stdout
		n := rep.Node
		leader := "none"
		if n.Leader != 0 {
			leader = strconv.FormatUint(n.Leader, 10)
		}
		fmt.Fprintf(w, "node %d: %s, term %d, leader %s, commit %d, applied %d\n", n.ID, n.Role, n.Term, leader, n.Commit, n.Applied)
		if n.Joining {
			fmt.Fprintf(w, "joining: waiting to be added (sluice cluster add %d <its raft address>, run against a member)\n", n.ID)
		}
		if n.Stopped {
			fmt.Fprintln(w, "stopped: a write of this node's Raft log or state store failed, so it takes no part in the cluster (see its /health); after a full disk it restarts itself in place once space is back, after any other failure restart it by hand once the disk is sound")
		}
		for _, p := range rep.Peers {
			if p.ID == n.ID && p.Membership == "learner" {
				fmt.Fprintln(w, "learner: receives every write but does not vote; the leader promotes it to voter once it has caught up and a voter is needed")
			}
		}
		if rep.View != nil && rep.View.ReplicationFactor > 0 {
			fmt.Fprintf(w, "replication factor: %d voters\n", rep.View.ReplicationFactor)
		}
		if rep.View != nil {
			printLinks(w, rep.View.Members)
		}
		// The node's own warnings (internal/cluster warnings.go); a node of
		// a release before them sends none. This node stopped is said above.
		for _, warn := range rep.Warnings {
			if warn.Kind == "stopped" && n.Stopped && slices.Contains(warn.Nodes, n.ID) {
				continue
			}
			fmt.Fprintf(w, "warning: %s\n", warn.Message)
		}
		scheme := "http"
		if rep.Public.TLS {
			scheme = "https"
		}
		fmt.Fprintf(w, "public: %s %s, amqp %s", scheme, rep.Public.HTTP, dash(rep.Public.AMQP))
		if rep.Public.AMQPS != "" {
			fmt.Fprintf(w, ", amqps %s", rep.Public.AMQPS)
		}
		fmt.Fprint(w, "\n\n")
		sort.Slice(rep.Peers, func(i, j int) bool { return rep.Peers[i].ID < rep.Peers[j].ID })
		t := newTable(w, "ID", "RAFT", "MEMBERSHIP", "LEADER", "MATCH", "LAG", "IN-SYNC", "CLOCK", "ADVERTISED-TERM", "INTERNAL-HTTP", "INTERNAL-AMQP")
		for _, p := range rep.Peers {
			role := "-"
			if p.ID == n.Leader {
				role = "yes"
			}
			// Progress from the leader's view (this node's own when it leads).
			match, lagging, insync, clk := "-", "-", "-", "-"
			if m, ok := n.Match[strconv.FormatUint(p.ID, 10)]; ok {
				match = strconv.FormatUint(m, 10)
			}
			if rep.View != nil {
				for _, m := range rep.View.Members {
					if m.ID == p.ID {
						match, lagging = strconv.FormatUint(m.Match, 10), strconv.FormatUint(m.Lag, 10)
						insync = map[bool]string{true: "yes", false: "no"}[m.InSync]
						if m.ClockOffsetMs != nil {
							clk = strconv.FormatFloat(*m.ClockOffsetMs, 'f', 1, 64) + "ms"
						}
					}
				}
			}
			term, h, a := "-", "-", "-"
			if ad := p.Advertised; ad != nil {
				term, h, a = strconv.FormatUint(ad.Term, 10), dash(ad.SQS), dash(ad.AMQP)
			}
			t.row(strconv.FormatUint(p.ID, 10), p.Raft, dash(p.Membership), role, match, lagging, insync, clk, term, h, a)
		}
		t.flush()
		if len(rep.Shards) > 0 {
			// The table above is shard 0's group; each shard's leader,
			// as this node knows it.
			fmt.Fprintln(w)
			t := newTable(w, "SHARD", "LEADER", "TERM", "THIS-NODE", "COMMIT", "APPLIED", "VOTERS", "LEARNERS")
			for _, sh := range rep.Shards {
				leader := "none"
				if sh.Leader != 0 {
					leader = strconv.FormatUint(sh.Leader, 10)
				}
				role := sh.Role
				if sh.Stopped {
					role = "stopped"
				}
				commit, applied := strconv.FormatUint(sh.Commit, 10), strconv.FormatUint(sh.Applied, 10)
				if sh.NotHeld {
					// No copy here: the leader and members its leader
					// recorded in shard 0.
					commit, applied = "-", "-"
				}
				t.row(strconv.Itoa(sh.Shard), leader, strconv.FormatUint(sh.Term, 10), role, commit, applied, ids(sh.Voters), ids(sh.Learners))
			}
			t.flush()
		}
		return ExitOK
	})
}

// shardStatus prints shard k's view (GET /sluice/v1/cluster/shards/{k}):
// its leader, and each member's membership and replication progress as
// its leader sees them.
func shardStatus(ctx context.Context, c *command, k int) int {
	var raw json.RawMessage
	if err := c.client().call(ctx, "GET", "cluster/shards/"+strconv.Itoa(k), nil, nil, &raw); err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(raw)
	}
	var v viewReport
	if err := json.Unmarshal(raw, &v); err != nil {
		return c.fail(fmt.Errorf("unreadable answer from %s: %w", c.endpoint, err))
	}
	w := c.env.Stdout
	fmt.Fprintf(w, "shard %d: leader %d, term %d, last index %d, replication factor %d\n\n", k, v.Leader, v.Term, v.LastIndex, v.ReplicationFactor)
	t := newTable(w, "ID", "RAFT", "MEMBERSHIP", "LEADER", "MATCH", "LAG", "IN-SYNC")
	for _, m := range v.Members {
		leader := "-"
		if m.ID == v.Leader {
			leader = "yes"
		}
		t.row(strconv.FormatUint(m.ID, 10), m.Raft, dash(m.Membership), leader, strconv.FormatUint(m.Match, 10), strconv.FormatUint(m.Lag, 10),
			map[bool]string{true: "yes", false: "no"}[m.InSync])
	}
	t.flush()
	return ExitOK
}

// printLinks prints how the members carry their links to each other, as
// they reported it: one word when they agree, each member's while they do
// not (a switch-over of [cluster] encrypt in progress, or a
// misconfiguration). Members that never reported are left out.
func printLinks(w io.Writer, members []viewMember) {
	var parts []string
	same := ""
	for _, m := range members {
		if m.Links == "" {
			continue
		}
		if len(parts) == 0 {
			same = m.Links
		} else if m.Links != same {
			same = ""
		}
		parts = append(parts, fmt.Sprintf("node %d %s", m.ID, m.Links))
	}
	switch {
	case len(parts) == 0:
	case same != "" && !strings.HasPrefix(same, "accept-both"):
		fmt.Fprintf(w, "links between nodes: %s\n", same)
	default:
		fmt.Fprintf(w, "links between nodes: %s (a switch-over of [cluster] encrypt: finish each round of restarts on every node before the next, docs/operations.md)\n", strings.Join(parts, "; "))
	}
}
