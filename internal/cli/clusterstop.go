package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// `sluice cluster check-stop <node-id>`: may this node be stopped now (a
// rolling restart, an upgrade, a host's maintenance) without stopping the
// writes of any Raft group it votes in? RabbitMQ answers the same question
// for its quorum queues with `rabbitmq-queues check_if_node_is_quorum_critical`.

const checkStopUsage = `
Usage:
  sluice cluster check-stop <node-id> [--wait D] [--endpoint URL] [--json]

check-stop says whether node-id can be stopped now without stopping the
writes of any Raft group it votes in: in every group (the cluster's, or
each shard with [cluster] shards), the voters in sync with the group's
leader other than node-id must still be a majority of its voters. It asks
the node at --endpoint (any member, the one to stop included) for each
group's view, as its leader sees it (IN-SYNC of sluice cluster status).
Exit 0: safe to stop; 1: not safe now (the groups that would stop are
named), or a group's view could not be read (no leader). With --wait it
asks again every half second until it is safe or D has passed: run it
before stopping each node of a rolling restart, so that the next node
stops only once the one restarted before it has caught up.
`

// stopGroup is one Raft group's verdict in check-stop.
type stopGroup struct {
	// Shard is the group's shard (0: the cluster's one group without
	// shards).
	Shard int `json:"shard"`
	// Voters and InSync are the group's voters and those in sync with its
	// leader; Majority is how many voters a write needs.
	Voters   []uint64 `json:"voters"`
	InSync   []uint64 `json:"in_sync"`
	Majority int      `json:"majority"`
	// Safe: stopping the node leaves a majority in sync (or it does not
	// vote in the group). Reason says why not, or why it does not count.
	Safe   bool   `json:"safe"`
	Reason string `json:"reason,omitempty"`
}

// stopVerdict is check-stop's answer (its --json output).
type stopVerdict struct {
	Node   uint64      `json:"node"`
	Safe   bool        `json:"safe"`
	Groups []stopGroup `json:"groups"`
}

// checkStop runs `sluice cluster check-stop`.
func checkStop(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice cluster check-stop", checkStopUsage)
	wait := c.fs.Duration("wait", 0, "ask again until it is safe, for at most this long (0: ask once)")
	return c.run(args, 1, 1, func(pos []string) int {
		id, err := parseNodeID(pos[0])
		if err != nil {
			return c.usageError("%v", err)
		}
		if *wait < 0 {
			return c.usageError("--wait must not be negative")
		}
		wctx := ctx
		if *wait > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, *wait)
			defer cancel()
		}
		var last stopVerdict
		lastErr := fmt.Errorf("no answer from %s within --wait %v", c.endpoint, *wait)
		told := ""
		for {
			v, err := stopVerdictOf(wctx, c, id)
			if *wait == 0 || wctx.Err() == nil { // an answer cut by the deadline says nothing
				last, lastErr = v, err
			}
			if err == nil && v.Safe || *wait == 0 || wctx.Err() != nil {
				break
			}
			// Say once per change what is waited for.
			now := unsafeGroups(v)
			if err != nil {
				now = err.Error()
			}
			if now != told && !c.json {
				fmt.Fprintf(c.env.Stderr, "waiting: %s\n", now)
				told = now
			}
			t := time.NewTimer(c.env.PollInterval) // 500 ms unless set (newCommand)
			select {
			case <-wctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if lastErr != nil {
			return c.fail(lastErr)
		}
		return printStopVerdict(c, last)
	})
}

// stopVerdictOf reads every group's view through the node at c's endpoint
// and judges stopping node id in each.
func stopVerdictOf(ctx context.Context, c *command, id uint64) (stopVerdict, error) {
	cl := c.client()
	var rep clusterReport
	if err := cl.call(ctx, "GET", "cluster", nil, nil, &rep); err != nil {
		return stopVerdict{}, err
	}
	v := stopVerdict{Node: id, Safe: true}
	views := map[int]*viewReport{0: rep.View}
	shards := []int{0}
	for _, sh := range rep.Shards {
		if sh.Shard == 0 {
			continue
		}
		shards = append(shards, sh.Shard)
		var sv viewReport
		if err := cl.call(ctx, "GET", "cluster/shards/"+strconv.Itoa(sh.Shard), nil, nil, &sv); err == nil {
			views[sh.Shard] = &sv
		}
	}
	for _, k := range shards {
		g := judgeStop(k, views[k], id)
		v.Safe = v.Safe && g.Safe
		v.Groups = append(v.Groups, g)
	}
	return v, nil
}

// judgeStop is the verdict on stopping node id for shard k's view (nil: no
// leader serves it, which is not safe: the group may already be down to a
// bare majority, and nobody can tell).
func judgeStop(k int, view *viewReport, id uint64) stopGroup {
	g := stopGroup{Shard: k}
	if view == nil {
		g.Reason = "no leader serves its view (an election, or a majority down): cannot tell"
		return g
	}
	for _, m := range view.Members {
		if m.Membership != "voter" {
			continue
		}
		g.Voters = append(g.Voters, m.ID)
		if m.InSync {
			g.InSync = append(g.InSync, m.ID)
		}
	}
	g.Majority = len(g.Voters)/2 + 1
	if !slices.Contains(g.Voters, id) {
		g.Safe, g.Reason = true, fmt.Sprintf("node %d is not one of its voters", id)
		return g
	}
	left := len(g.InSync)
	if slices.Contains(g.InSync, id) {
		left--
	}
	g.Safe = left >= g.Majority
	switch {
	case len(g.Voters) == 1:
		g.Reason = fmt.Sprintf("node %d is its only voter (replication factor 1)", id)
	case !g.Safe:
		g.Reason = fmt.Sprintf("%d of its %d voters would be left in sync, below the majority of %d", left, len(g.Voters), g.Majority)
	default:
		g.Reason = fmt.Sprintf("%d of its %d voters would be left in sync, a majority of %d needed", left, len(g.Voters), g.Majority)
	}
	return g
}

// unsafeGroups names the groups of v that stopping would stop.
func unsafeGroups(v stopVerdict) string {
	var out []string
	for _, g := range v.Groups {
		if !g.Safe {
			out = append(out, fmt.Sprintf("%s: %s", groupName(v, g), g.Reason))
		}
	}
	return strings.Join(out, "; ")
}

// groupName is "the cluster" without shards, else "shard K".
func groupName(v stopVerdict, g stopGroup) string {
	if len(v.Groups) == 1 {
		return "the cluster"
	}
	return "shard " + strconv.Itoa(g.Shard)
}

// printStopVerdict prints v (JSON with --json) and returns its exit code.
func printStopVerdict(c *command, v stopVerdict) int {
	code := ExitOK
	if !v.Safe {
		code = ExitFail
	}
	if c.json {
		if rc := c.printJSON(v); rc != ExitOK {
			return rc
		}
		return code
	}
	w := c.env.Stdout
	for _, g := range v.Groups {
		mark := "ok"
		if !g.Safe {
			mark = "WOULD STOP"
		}
		fmt.Fprintf(w, "%s: %s: voters %s, in sync %s: %s\n", groupName(v, g), mark, ids(g.Voters), ids(g.InSync), g.Reason)
	}
	if v.Safe {
		fmt.Fprintf(w, "safe to stop node %d\n", v.Node)
	} else {
		fmt.Fprintf(w, "not safe to stop node %d now: %s\n", v.Node, unsafeGroups(v))
	}
	return code
}

// ids joins node ids with commas ("-" for none).
func ids(v []uint64) string {
	if len(v) == 0 {
		return "-"
	}
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}
