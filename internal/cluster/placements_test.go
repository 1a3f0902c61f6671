package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// placementsAgree reports whether node n's copy of shard 0 holds a live
// placement for each of names naming the shard whose copy on n holds the
// queue.
func placementsAgree(n *Node, names []string) (bool, string) {
	st := n.shards.Shard(0).Store()
	ps, err := server.StoredPlacements(st, -1)
	_ = st.Close()
	if err != nil {
		return false, err.Error()
	}
	at := map[string]server.QueuePlacement{}
	for _, p := range ps {
		at[p.Name] = p
	}
	for _, name := range names {
		k, ok := n.findQueue(name)
		if !ok {
			return false, name + " is in no copy"
		}
		p, ok := at[name]
		if !ok || p.Shard != k || !p.Gone.IsZero() {
			return false, fmt.Sprintf("%s lives on shard %d, its placement: %+v (found %v)", name, k, p, ok)
		}
	}
	return true, ""
}

// TestPlacementsFollowQueues (ADR 0016 step 1): with three shards, shard
// 0 comes to hold a live placement for every queue created through any
// node, naming the shard the queue lives on, in every node's copy; and
// it still does for queues created after shard 0's leader was stopped
// (the keepers send to the new leader).
func TestPlacementsFollowQueues(t *testing.T) {
	nodes, stop := shardedNodesOpts(t, func(*server.Options) {}, func(o *Options) { o.PlacementInterval = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	clients := []*sqs.Client{shardClient(nodes[0]), shardClient(nodes[1]), shardClient(nodes[2])}
	var names []string
	create := func(c *sqs.Client, name string) {
		t.Helper()
		if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		names = append(names, name)
	}
	for i := range 9 {
		create(clients[i%3], fmt.Sprintf("placed-%d", i))
	}
	agree := func(on []*Node) func() error {
		return func() error {
			for _, n := range on {
				if ok, why := placementsAgree(n, names); !ok {
					return fmt.Errorf("waiting for every node's copy of shard 0 to place every queue on its shard: node %d: %s", n.opts.Cluster.NodeID, why)
				}
			}
			return nil
		}
	}
	poll.CheckFor(t, 30*time.Second, agree(nodes))
	shards := map[int]bool{}
	for _, name := range names {
		k, _ := nodes[0].findQueue(name)
		shards[k] = true
	}
	if len(shards) < 2 {
		t.Fatalf("the queues all live on shard(s) %v: the test needs placements on several", shards)
	}

	// Stop shard 0's leader; the others elect one and the keepers send
	// the new queues' placements to it.
	i0 := slices.IndexFunc(nodes, func(n *Node) bool { return n.leadsShard(0) })
	if i0 < 0 {
		t.Fatal("no node leads shard 0")
	}
	if err := stop(i0); err != nil {
		t.Fatal(err)
	}
	rest := slices.Delete(slices.Clone(nodes), i0, i0+1)
	for i := range 3 {
		create(shardClient(rest[i%2]), fmt.Sprintf("after-%d", i))
	}
	poll.CheckFor(t, 30*time.Second, agree(rest))
}

// TestPlacementDiff: the names to add are a shard's queues without a live
// entry (none, or one marked gone); the names gone are live entries whose
// queue the shard lacks.
func TestPlacementDiff(t *testing.T) {
	now := time.Now()
	ps := []server.QueuePlacement{
		{Name: "a", Shard: 1, Placed: now},
		{Name: "b", Shard: 1, Placed: now, Gone: now},
		{Name: "c", Shard: 1, Placed: now},
		{Name: "d", Shard: 1, Placed: now, Gone: now},
	}
	add, gone := placementDiff([]string{"a", "b", "e"}, ps)
	if !slices.Equal(add, []string{"b", "e"}) || !slices.Equal(gone, []string{"c"}) {
		t.Fatalf("add %v, gone %v; want [b e], [c]", add, gone)
	}
	if add, gone = placementDiff(nil, nil); add != nil || gone != nil {
		t.Fatalf("nothing held, no entries: add %v, gone %v", add, gone)
	}
}

// TestLeaderRecordsFollowLeaders (ADR 0016): with three shards, every
// node's copy of shard 0 comes to record each shard's leader as its own
// copy of that shard knows it (node, term and advertisement), also after
// a shard's leader is stopped and another takes over.
func TestLeaderRecordsFollowLeaders(t *testing.T) {
	nodes, stop := shardedNodes(t)
	agree := func(on []*Node) func() error {
		return func() error {
			for _, n := range on {
				for k := range n.shards.Len() {
					want, wl, ok := n.target(k)
					if !ok {
						return fmt.Errorf("node %d: shard %d has no serving leader", n.opts.Cluster.NodeID, k)
					}
					got, gl, ok := n.recordedTarget(k)
					if !ok || gl != wl || got != want {
						return fmt.Errorf("waiting for node %d's copy of shard 0 to record shard %d's leader %d %+v: it has %d %+v (%v)", n.opts.Cluster.NodeID, k, wl, want, gl, got, ok)
					}
				}
			}
			return nil
		}
	}
	poll.CheckFor(t, 30*time.Second, agree(nodes))
	i1 := slices.IndexFunc(nodes, func(n *Node) bool { return n.leadsShard(1) })
	if i1 < 0 {
		t.Fatal("no node leads shard 1")
	}
	_, before, _ := nodes[i1].target(1)
	if err := stop(i1); err != nil {
		t.Fatal(err)
	}
	rest := slices.Delete(slices.Clone(nodes), i1, i1+1)
	poll.CheckFor(t, 30*time.Second, agree(rest))
	if _, after, _ := rest[0].recordedTarget(1); after == before {
		t.Fatalf("shard 1's record still names node %d, which was stopped", before)
	}
}
