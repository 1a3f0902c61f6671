package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
)

const clusterUsage = `
Usage: sluice cluster status [--endpoint URL] [--json]

Print what one cluster node (the one at --endpoint, any node's public HTTP
address) knows: its id, role, Raft term, the leader, its commit and applied
indexes, each peer's replication progress (MATCH, the last log index it
holds; shown by the leader only), and the internal addresses each node
advertised when it last led. Ask every node to see the whole cluster.
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

// Cluster runs `sluice cluster status`.
func Cluster(ctx context.Context, args []string, env *Env) int {
	if len(args) == 0 || args[0] != "status" {
		c := newCommand(env, "sluice cluster", clusterUsage)
		if len(args) == 0 {
			return c.usageError("missing command (status)")
		}
		return c.usageError("unknown command %q", args[0])
	}
	c := newCommand(env, "sluice cluster status", clusterUsage)
	return c.run(args[1:], 0, 0, func([]string) int {
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
