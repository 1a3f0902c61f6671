package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// TestSubsetPlan: shard k ≥ 1 on factor of the peers sorted by id, from
// the (k−1)-th on, wrapping; shard 0 and a factor of all or more on all.
func TestSubsetPlan(t *testing.T) {
	peers := []raftstore.Peer{{ID: 3}, {ID: 1}, {ID: 4}, {ID: 2}}
	ids := func(ps []raftstore.Peer) []uint64 {
		var out []uint64
		for _, p := range ps {
			out = append(out, p.ID)
		}
		slices.Sort(out)
		return out
	}
	plan := subsetPlan(1, peers, 3)
	for k, want := range [][]uint64{{1, 2, 3, 4}, {1, 2, 3}, {2, 3, 4}, {1, 3, 4}, {1, 2, 4}} {
		if got := ids(plan.Peers(k, peers)); !slices.Equal(got, want) {
			t.Errorf("shard %d on %v, want %v", k, got, want)
		}
		if held := plan.Held(k); held != slices.Contains(want, 1) {
			t.Errorf("node 1 holds shard %d: %v", k, held)
		}
	}
	if got := ids(subsetPlan(1, peers, 5).Peers(2, peers)); len(got) != 4 {
		t.Errorf("a factor above the peers: shard 2 on %v, want every peer", got)
	}
}

// TestSubsetShardsServeThroughAnyNode (ADR 0016): three nodes, three
// shards, replication factor 2, placement "subset": shard 1 lives on nodes 1
// and 2 only, shard 2 on nodes 2 and 3, and no queue is placed by its
// name on shard 0 (every node's). Through every node — also one that
// holds no copy of the queue's shard — a client creates, sends to,
// receives from and deletes on queues of shards 1 and 2; a queue created
// with its dead-letter queue on shard 2 is found through node 1 at once;
// and ListQueues lists them all (the shards not held through shard 0's
// placements). A node holds no directory for a shard it does not hold.
func TestSubsetShardsServeThroughAnyNode(t *testing.T) {
	nodes := subsetNodes(t)
	holds := map[uint64][]int{1: {0, 1}, 2: {0, 1, 2}, 3: {0, 2}}
	for _, n := range nodes {
		id := n.opts.Cluster.NodeID
		for k := range 3 {
			if got := n.shards.Held(k); got != slices.Contains(holds[id], k) {
				t.Fatalf("node %d holds shard %d: %v", id, k, got)
			}
		}
	}
	for _, dir := range []string{raftstore.ShardDir(nodes[0].opts.DataDir, 2), raftstore.ShardDir(nodes[2].opts.DataDir, 1)} {
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("%s exists on a node that does not hold its shard", filepath.Base(dir))
		}
	}

	// Queues placed by their names go to shards 1 and 2, never to shard
	// 0, which every node holds.
	for i := range 100 {
		if k := nodes[0].nameShard(fmt.Sprint("q", i)); k < 1 || k > 2 {
			t.Fatalf("q%d is placed on shard %d", i, k)
		}
	}
	// A queue on each of shards 1 and 2, each created through a node that
	// does not hold it.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	clients := []*sqs.Client{shardClient(nodes[0]), shardClient(nodes[1]), shardClient(nodes[2])}
	through := map[int]int{1: 2, 2: 0} // shard → index of the node that creates its queue
	var names []string
	for k := 1; k <= 2; k++ {
		name := subsetName(nodes[0], fmt.Sprintf("subset-%d", k), k)
		if _, err := clients[through[k]].CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
			t.Fatalf("create %s (shard %d) through node %d: %v", name, k, through[k]+1, err)
		}
		names = append(names, name)
	}
	for i, c := range clients {
		for j, name := range names {
			k := j + 1
			url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if err != nil {
				t.Fatalf("GetQueueUrl %s (shard %d) through node %d: %v", name, k, i+1, err)
			}
			body := fmt.Sprintf("through node %d", i+1)
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String(body)}); err != nil {
				t.Fatalf("send to %s (shard %d) through node %d: %v", name, k, i+1, err)
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, WaitTimeSeconds: 5, MaxNumberOfMessages: 10})
			if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != body {
				t.Fatalf("receive from %s (shard %d) through node %d: %+v, %v", name, k, i+1, out, err)
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url.QueueUrl, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Fatalf("delete on %s (shard %d) through node %d: %v", name, k, i+1, err)
			}
		}
	}
	// A queue created with a dead-letter queue on shard 2 lives there,
	// whatever its name hashes to; created through any node, it is
	// found at once through node 1, which holds no copy of shard 2 (its
	// placement is written before the create is answered).
	dlqURL, err := clients[2].GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(names[1])})
	if err != nil {
		t.Fatal(err)
	}
	dlqAttrs, err := clients[2].GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlqURL.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"3"}`, dlqAttrs.Attributes["QueueArn"])
	l2 := slices.IndexFunc(nodes, func(n *Node) bool { return n.leadsShard(2) })
	if l2 < 0 {
		t.Fatal("no node leads shard 2")
	}
	// Through shard 2's leader (its own server answers the create) and
	// through node 1 (forwarded).
	for i, via := range []int{l2, 0} {
		var name string
		for j := 0; ; j++ {
			if name = fmt.Sprintf("tied-%d-%d", i, j); nodes[0].nameShard(name) != 2 {
				break
			}
		}
		if _, err := clients[via].CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
			Attributes: map[string]string{"RedrivePolicy": policy}}); err != nil {
			t.Fatalf("create %s through node %d: %v", name, via+1, err)
		}
		if _, err := clients[0].GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); err != nil {
			t.Fatalf("%s, created through node %d with its dead-letter queue on shard 2, through node 1 at once: %v", name, via+1, err)
		}
		if at, ok := nodes[1].findQueue(name); !ok || at != 2 {
			t.Fatalf("%s lives on shard %d (%v), want 2, its dead-letter queue's", name, at, ok)
		}
		names = append(names, name)
	}

	// The queues live where they hash, on their shard's members alone;
	// a node that holds no copy finds them by their placement, once the
	// shard's leader has written it (its keeper's next round).
	poll.CheckFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			for i, name := range names {
				k := min(i+1, 2) // subset-1-*, then subset-2-* and the tied queues on shard 2
				if at, ok := n.findQueue(name); !ok || at != k {
					return fmt.Errorf("node %d finds %s on shard %d (%v), want %d", n.opts.Cluster.NodeID, name, at, ok, k)
				}
			}
		}
		return nil
	})
	// ListQueues is served by shard 0's leader: on node 1, which holds
	// no copy of shard 2, it lists shard 2's queue from its placement.
	handOver(t, nodes, 0, 1)
	poll.CheckFor(t, 30*time.Second, func() error {
		if !nodes[0].leadsShard(0) {
			return fmt.Errorf("waiting for node 1 to lead shard 0")
		}
		for i, c := range clients {
			out, err := c.ListQueues(ctx, &sqs.ListQueuesInput{})
			if err != nil {
				return err
			}
			if len(out.QueueUrls) != len(names) {
				return fmt.Errorf("ListQueues through node %d: %v, want %d queues", i+1, out.QueueUrls, len(names))
			}
		}
		return nil
	})
	// A queue of shard 2 deleted (through node 2, which holds a copy) is
	// gone from ListQueues through every node as soon as the delete is
	// answered, also though its placement was written a moment ago: the
	// delete marks it gone in shard 0 before it is answered (the keeper
	// alone would wait for PlacementGrace, a minute).
	gone := names[len(names)-1]
	goneURL, err := clients[1].GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(gone)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clients[1].DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: goneURL.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	names = names[:len(names)-1]
	for i, c := range clients {
		out, err := c.ListQueues(ctx, &sqs.ListQueuesInput{})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.QueueUrls) != len(names) || slices.ContainsFunc(out.QueueUrls, func(u string) bool { return strings.HasSuffix(u, "/"+gone) }) {
			t.Fatalf("ListQueues through node %d right after %s (shard 2) was deleted: %v", i+1, gone, out.QueueUrls)
		}
	}

	// Each shard's view (the dashboard's queue page), through every node,
	// also one that holds no copy of the shard: its leader's, with the
	// shard's own members and their lag.
	for _, n := range nodes {
		for k := range 3 {
			poll.CheckFor(t, 10*time.Second, func() error {
				v, code := getShardView(t, n, strconv.Itoa(k))
				if code != http.StatusOK {
					return fmt.Errorf("node %d: shard %d's view answered %d", n.opts.Cluster.NodeID, k, code)
				}
				var want []uint64
				for id, held := range holds {
					if slices.Contains(held, k) {
						want = append(want, id)
					}
				}
				slices.Sort(want)
				var got []uint64
				for _, m := range v.Members {
					got = append(got, m.ID)
					// Shard 0 is on every node: two voters (the factor)
					// and a standby learner.
					if (m.Membership != "voter" && k > 0) || m.Raft == "" {
						return fmt.Errorf("node %d: shard %d's member %+v", n.opts.Cluster.NodeID, k, m)
					}
					if m.ID == v.Leader && (m.Applied == 0 || m.Role != "leader" || m.Lag != 0) {
						return fmt.Errorf("node %d: shard %d's leader in its view %+v", n.opts.Cluster.NodeID, k, m)
					}
				}
				leader := -1
				for i, o := range nodes {
					if o.leadsShard(k) {
						leader = i
					}
				}
				if !slices.Equal(got, want) || leader < 0 || v.Leader != nodes[leader].opts.Cluster.NodeID || v.LastIndex == 0 {
					return fmt.Errorf("node %d: shard %d's view %+v: want members %v, led by node %d", n.opts.Cluster.NodeID, k, v, want, leader+1)
				}
				return nil
			})
		}
		for _, bad := range []string{"3", "-1", "x"} {
			if _, code := getShardView(t, n, bad); code != http.StatusNotFound {
				t.Fatalf("node %d: the view of shard %q answered %d, want 404", n.opts.Cluster.NodeID, bad, code)
			}
		}
	}
}

// getShardView reads GET /sluice/v1/cluster/shards/{k} on node n.
func getShardView(t *testing.T, n *Node, k string) (ClusterView, int) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/sluice/v1/cluster/shards/" + k)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var v ClusterView
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return v, resp.StatusCode
}

// TestCheckPlacement: a new data directory is stamped "subset" (beside the
// shard count's stamp, in either order); one stamped refuses to start
// without it; one holding a node's state refuses "subset".
func TestCheckPlacement(t *testing.T) {
	dir := t.TempDir()
	if err := checkPlacement(dir, true); err != nil {
		t.Fatal(err)
	}
	if err := checkShardCount(dir, 3); err != nil {
		t.Fatalf("the shard count after the placement's stamp: %v", err)
	}
	if err := checkPlacement(dir, true); err != nil {
		t.Fatalf("started again: %v", err)
	}
	if err := checkPlacement(dir, false); err == nil {
		t.Fatal("a subset data_dir started without the setting")
	}
	other := t.TempDir()
	if err := checkShardCount(other, 3); err != nil {
		t.Fatal(err)
	}
	if err := checkPlacement(other, true); err != nil {
		t.Fatalf("the placement after the shard count's stamp: %v", err)
	}
	used := t.TempDir()
	if err := os.WriteFile(filepath.Join(used, "state"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkPlacement(used, false); err != nil {
		t.Fatalf("a used data_dir without the setting: %v", err)
	}
	if err := checkPlacement(used, true); err == nil {
		t.Fatal("a used data_dir stamped subset")
	}
}

// subsetNodes starts three nodes with three shards placed on subsets of
// two (node 1 holds shards 0 and 1, node 2 every shard, node 3 shards 0
// and 2) and waits until every node routes every shard.
func subsetNodes(t *testing.T) []*Node {
	t.Helper()
	nodes, _ := startThreeWith(t, func(o *server.Options) {
		o.Cluster.Shards = 3
		o.Cluster.ReplicationFactor = 2
		o.Cluster.Placement = server.PlacementSubset
	}, func(_ int, o *Options) {
		o.BalanceInterval = 100 * time.Millisecond
		o.PlacementInterval = 100 * time.Millisecond
	}, nil, 3)
	// And the balancer has no move left to make: until then it moves
	// leaderships (shard 0's among them, and AMQP's server with it), and
	// a test's AMQP consumer would see its acks refused and its
	// connection closed (TestShardsAMQPAckAfterTheQueuesLeaderMoved).
	poll.CheckFor(t, 30*time.Second, func() error { return balancerSettled(nodes, 3) })
	return nodes
}

// balancerSettled returns nil once every node routes each of the count
// shards to a leader and no voter of a shard leads two fewer shards than
// its leader: the rule by which raftstore's balancer moves a leadership
// (ownMove, mirrored here). Not "each node leads one": with subset
// placement a node that is a voter of no shard but 0 may lead nothing for
// good.
func balancerSettled(nodes []*Node, count int) error {
	leaders := make([]uint64, count)
	led := map[uint64]int{}
	for k := range count {
		for _, n := range nodes {
			if _, l, ok := n.target(k); !ok {
				return fmt.Errorf("node %d has no route to shard %d", n.opts.Cluster.NodeID, k)
			} else if n == nodes[0] {
				leaders[k] = l
				led[l]++
			}
		}
	}
	for k, l := range leaders {
		for _, id := range shardVoters(nodes, k) {
			if id != l && led[l]-led[id] >= 2 {
				return fmt.Errorf("leaders %v: the balancer will move shard %d's to node %d", leaders, k, id)
			}
		}
	}
	return nil
}

// shardVoters lists shard k's voters as the first of nodes holding a copy
// of it sees them.
func shardVoters(nodes []*Node, k int) []uint64 {
	for _, n := range nodes {
		if r := n.shards.Shard(k); r != nil {
			var out []uint64
			for _, m := range r.Members() {
				if m.Membership == raftstore.Voter {
					out = append(out, m.ID)
				}
			}
			return out
		}
	}
	return nil
}

// subsetName is prefix-N, the first that n places on shard k by its name.
func subsetName(n *Node, prefix string, k int) string {
	for i := 0; ; i++ {
		if name := fmt.Sprintf("%s-%d", prefix, i); n.nameShard(name) == k {
			return name
		}
	}
}
