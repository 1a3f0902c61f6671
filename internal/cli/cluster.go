package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
)

const clusterUsage = `
Usage:
  sluice cluster status [--endpoint URL] [--json]
  sluice cluster add <node-id> <raft-host:port> [--endpoint URL] [--json]
  sluice cluster remove <node-id> [--endpoint URL] [--json]

status prints what one cluster node (the one at --endpoint, any node's
public HTTP address) knows: its id, role, Raft term, the leader, its commit
and applied indexes, each member's replication progress (MATCH, the last
log index it holds; shown by the leader only), and the internal addresses
each node advertised when it last led. The members are the replicated
membership, not the configuration. Ask every node to see the whole cluster.

add makes a node a voting member: start it first with join = true (or
--join) and its own node id, then run add against any member; it receives
the leader's state (a snapshot) and the log after it. Node ids are never
reused.

remove takes a member out of the group (a dead one, or one to retire); stop
its process afterwards. Both wait until the leader has applied the change
and print the new membership.
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
	} `json:"node"`
	Public struct {
		HTTP string `json:"http"`
		AMQP string `json:"amqp"`
	} `json:"public"`
	Peers []struct {
		ID         uint64 `json:"id"`
		Raft       string `json:"raft"`
		Advertised *struct {
			Term uint64 `json:"term"`
			SQS  string `json:"sqs"`
			AMQP string `json:"amqp"`
		} `json:"advertised"`
	} `json:"peers"`
}

// membersAnswer mirrors the JSON of POST/DELETE /sluice/v1/cluster/members
// (internal/cluster.MembersResponse).
type membersAnswer struct {
	Members []struct {
		ID   uint64 `json:"id"`
		Raft string `json:"raft"`
	} `json:"members"`
}

// Cluster runs `sluice cluster status|add|remove`.
func Cluster(ctx context.Context, args []string, env *Env) int {
	if len(args) == 0 {
		return newCommand(env, "sluice cluster", clusterUsage).usageError("missing command (status, add or remove)")
	}
	switch args[0] {
	case "status":
		return clusterStatus(ctx, args[1:], env)
	case "add":
		c := newCommand(env, "sluice cluster add", clusterUsage)
		return c.run(args[1:], 2, 2, func(pos []string) int {
			id, err := parseNodeID(pos[0])
			if err != nil {
				return c.usageError("%v", err)
			}
			var out membersAnswer
			if err := c.client().call(ctx, "POST", "cluster/members", nil, map[string]any{"id": id, "raft": pos[1]}, &out); err != nil {
				return c.fail(err)
			}
			return c.printMembers(out, fmt.Sprintf("added node %d (raft %s)", id, pos[1]))
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
	t := newTable(c.env.Stdout, "ID", "RAFT")
	for _, m := range out.Members {
		t.row(strconv.FormatUint(m.ID, 10), m.Raft)
	}
	t.flush()
	return ExitOK
}

// clusterStatus runs `sluice cluster status`.
func clusterStatus(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice cluster status", clusterUsage)
	return c.run(args, 0, 0, func([]string) int {
		var rep clusterReport
		if err := c.client().call(ctx, "GET", "cluster", nil, nil, &rep); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(rep)
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
		fmt.Fprintf(w, "public: http %s, amqp %s\n\n", rep.Public.HTTP, dash(rep.Public.AMQP))
		sort.Slice(rep.Peers, func(i, j int) bool { return rep.Peers[i].ID < rep.Peers[j].ID })
		t := newTable(w, "ID", "RAFT", "LEADER", "MATCH", "ADVERTISED-TERM", "INTERNAL-HTTP", "INTERNAL-AMQP")
		for _, p := range rep.Peers {
			role := "-"
			if p.ID == n.Leader {
				role = "yes"
			}
			match := "-"
			if m, ok := n.Match[strconv.FormatUint(p.ID, 10)]; ok {
				match = strconv.FormatUint(m, 10)
			}
			term, h, a := "-", "-", "-"
			if ad := p.Advertised; ad != nil {
				term, h, a = strconv.FormatUint(ad.Term, 10), dash(ad.SQS), dash(ad.AMQP)
			}
			t.row(strconv.FormatUint(p.ID, 10), p.Raft, role, match, term, h, a)
		}
		t.flush()
		return ExitOK
	})
}
