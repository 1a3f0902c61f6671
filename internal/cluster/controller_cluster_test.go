package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// TestControllerMovesShards (ADR 0016 step 3): three nodes, three
// shards, replication factor 2, placement "subset" (shard 1 on nodes 1
// and 2, shard 2 on nodes 2 and 3). A fourth node added with `cluster
// add` takes its share: shard 1 moves from node 2, the busiest, to it —
// node 4 joins the group, catches up, and node 2 leaves it, its copy
// deleted — and every message of shard 1's queue is there, through
// every node. Node 4 restarted holds shard 1 again. Node 3, removed
// with `cluster remove`, is moved out of shard 2 once another node has
// caught up in its place, and shard 2's messages stay.
func TestControllerMovesShards(t *testing.T) {
	edit := func(o *server.Options) {
		o.Cluster.Shards = 3
		o.Cluster.ReplicationFactor = 2
		o.Cluster.Placement = server.PlacementSubset
	}
	fast := func(_ int, o *Options) {
		o.BalanceInterval = 100 * time.Millisecond
		o.PlacementInterval = 100 * time.Millisecond
	}
	nodes, _ := startThreeWith(t, edit, fast, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// A queue on each of shards 1 and 2, with messages.
	c0 := shardClient(nodes[0])
	urls := map[int]string{}
	for k := 1; k <= 2; k++ {
		var name string
		for i := 0; ; i++ {
			if name = fmt.Sprintf("moving-%d-%d", k, i); nodes[0].nameShard(name) == k {
				break
			}
		}
		out, err := c0.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		urls[k] = aws.ToString(out.QueueUrl)
		for i := range 20 {
			if _, err := c0.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String(fmt.Sprint(k, "-", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Node 4 joins the cluster.
	raft4 := brokertest.ReservePorts(t, 1)[0]
	o := server.DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	o.Cluster = server.ClusterConfig{NodeID: 4, Join: true, Peers: append(slices.Clone(nodes[0].opts.Cluster.Peers), server.ClusterPeer{ID: 4, Raft: raft4})}
	edit(&o)
	start4 := func() (*Node, func() error) {
		no := Options{Server: o, TickInterval: 10 * time.Millisecond, Logger: brokertest.FailureLog(t, "node 4")}
		fast(3, &no)
		n, err := New(no)
		if err != nil {
			t.Fatal(err)
		}
		return n, runNode(t, n, "node 4")
	}
	n4, stop4 := start4()
	if n4.shards.Held(1) || n4.shards.Held(2) {
		t.Fatal("a node joining the cluster opened a shard above 0")
	}
	if status, code := memberCall(t, nodes[1], http.MethodPost, "/sluice/v1/cluster/members", `{"id": 4, "raft": "`+raft4+`"}`, ""); status != http.StatusOK {
		t.Fatalf("add node 4: %d %s", status, code)
	}
	all := append(slices.Clone(nodes), n4)
	// placed waits until every live node's copy of shard 0 records shard
	// k on want, and exactly those nodes hold its group.
	placed := func(k int, want []uint64, among []*Node) {
		t.Helper()
		poll.CheckFor(t, 60*time.Second, func() error {
			for _, n := range among {
				rec, _, ok := n.shardRecordOf(k)
				if !ok {
					return fmt.Errorf("node %d has no record of shard %d", n.opts.Cluster.NodeID, k)
				}
				got := slices.Sorted(slices.Values(rec.members()))
				if !slices.Equal(got, want) || len(rec.Learners) > 0 {
					return fmt.Errorf("node %d records shard %d on voters %v, learners %v; want voters %v", n.opts.Cluster.NodeID, k, rec.Voters, rec.Learners, want)
				}
				if held := n.shards.Held(k); held != slices.Contains(want, n.opts.Cluster.NodeID) {
					return fmt.Errorf("node %d holds shard %d: %v", n.opts.Cluster.NodeID, k, held)
				}
			}
			return nil
		})
	}
	placed(1, []uint64{1, 4}, all)
	placed(2, []uint64{2, 3}, all)
	// Leave stops holding the group before it deletes its directory (the
	// stat could run between the two), so the deletion is waited for.
	poll.CheckFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(raftstore.ShardDir(nodes[1].opts.DataDir, 1)); !os.IsNotExist(err) {
			return fmt.Errorf("node 2 left shard 1 but its directory is there: %v", err)
		}
		return nil
	})
	// Node 3, without a copy of shard 1, reports it as recorded.
	for _, sh := range nodes[2].Status().Shards {
		if sh.Shard == 1 && (!sh.NotHeld || sh.Role != "not-held" || !slices.Equal(sh.Voters, []uint64{1, 4}) || sh.Leader == 0) {
			t.Fatalf("node 3's status of shard 1: %+v", sh)
		}
	}
	if installed := n4.shards.Shard(1).Status().Applied; installed == 0 {
		t.Fatal("node 4 holds shard 1 with nothing applied")
	}
	// receiveAll reads every message of shard k's queue through n, and
	// makes them visible again.
	receiveAll := func(n *Node, k int) {
		t.Helper()
		c := shardClient(n)
		got := map[string]bool{}
		for len(got) < 20 {
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[k]), MaxNumberOfMessages: 10, VisibilityTimeout: 30, WaitTimeSeconds: 1})
			if err != nil {
				t.Fatalf("receive from shard %d through node %d: %v", k, n.opts.Cluster.NodeID, err)
			}
			if len(out.Messages) == 0 {
				t.Fatalf("shard %d through node %d: %d of 20 messages", k, n.opts.Cluster.NodeID, len(got))
			}
			for _, m := range out.Messages {
				got[aws.ToString(m.Body)] = true
				if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(urls[k]), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	receiveAll(n4, 1)
	receiveAll(nodes[1], 1)

	// Node 4 restarts: it opens shard 1 again, as a member that joined.
	if err := stop4(); err != nil {
		t.Fatal(err)
	}
	n4, _ = start4()
	if !n4.shards.Held(1) || n4.shards.Held(2) {
		t.Fatalf("node 4 restarted holding shard 1: %v, shard 2: %v", n4.shards.Held(1), n4.shards.Held(2))
	}
	all[3] = n4
	placed(1, []uint64{1, 4}, all)
	receiveAll(nodes[2], 1)

	// Node 3 is removed from the cluster: shard 2 moves off it, to the
	// idlest of the others (node 1 or node 4, one shard each: node 1).
	if status, code := memberCall(t, nodes[0], http.MethodDelete, "/sluice/v1/cluster/members/3", "", ""); status != http.StatusOK {
		t.Fatalf("remove node 3: %d %s", status, code)
	}
	rest := []*Node{nodes[0], nodes[1], n4}
	placed(2, []uint64{1, 2}, rest)
	placed(1, []uint64{1, 4}, rest)
	receiveAll(n4, 2)
	receiveAll(nodes[0], 2)
}

// TestSubsetDeadLetterSourcesOnAShardNotHeld: with placement "subset", a
// dead-letter queue whose shard's leader holds no copy of its source's
// shard still knows that source (from that shard's leader,
// server.ShardDLSourcesPath): ListDeadLetterSourceQueues lists it and a
// redrive (StartMessageMoveTask) starts; and the task is found by its id
// (the admin API) through a node without a copy of its shard. Both
// mutation-checked.
func TestSubsetDeadLetterSourcesOnAShardNotHeld(t *testing.T) {
	nodes, _ := startThreeWith(t, func(o *server.Options) {
		o.Cluster.Shards = 3
		o.Cluster.ReplicationFactor = 2
		o.Cluster.Placement = server.PlacementSubset
	}, nil, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Shard 1 (nodes 1 and 2) led by node 1, which holds no copy of
	// shard 2 (nodes 2 and 3).
	poll.CheckFor(t, 30*time.Second, func() error {
		if nodes[0].leadsShard(1) {
			nodes[0].mu.Lock()
			defer nodes[0].mu.Unlock()
			if nodes[0].serving[1] == nil {
				return fmt.Errorf("node 1 leads shard 1 but does not serve it yet")
			}
			return nil
		}
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		defer tcancel()
		_ = nodes[1].shards.Shard(1).TransferLeadershipTo(tctx, 1) // retried by the poll
		return fmt.Errorf("node 1 does not lead shard 1 yet")
	})
	if nodes[0].shards.Held(2) {
		t.Fatal("node 1 holds shard 2")
	}
	name := func(format string, k int) string {
		for i := 0; ; i++ {
			if n := fmt.Sprintf(format, i); nodes[0].nameShard(n) == k {
				return n
			}
		}
	}
	src, dlq := name("source-%d", 2), name("graves-%d", 1)
	c := shardClient(nodes[2])
	s, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(src)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlq)})
	if err != nil {
		t.Fatal(err)
	}
	arn, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, arn.Attributes["QueueArn"])
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: s.QueueUrl, Attributes: map[string]string{"RedrivePolicy": policy}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		srcs, err := shardClient(n).ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: d.QueueUrl})
		if err != nil || len(srcs.QueueUrls) != 1 || !strings.HasSuffix(srcs.QueueUrls[0], "/"+src) {
			t.Fatalf("sources of %s through node %d: %v, %v; want %s", dlq, n.opts.Cluster.NodeID, srcs.QueueUrls, err, src)
		}
	}
	if _, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn.Attributes["QueueArn"])}); err != nil {
		t.Fatalf("a redrive of %s, whose source is on a shard its leader holds no copy of: %v", dlq, err)
	}
	// The task, by its id, through node 3, which holds no copy of
	// shard 1: found by asking that shard's leader.
	var list struct {
		Tasks []struct {
			ID     string `json:"id"`
			Source string `json:"source"`
		} `json:"tasks"`
	}
	get := func(path string, out any) int {
		t.Helper()
		resp, err := http.Get("http://" + nodes[2].HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if out != nil {
			_ = json.NewDecoder(resp.Body).Decode(out) // a status other than 200 fails below
		}
		return resp.StatusCode
	}
	if code := get("/sluice/v1/tasks?source="+dlq, &list); code != http.StatusOK || len(list.Tasks) != 1 {
		t.Fatalf("tasks of %s: %d, %+v", dlq, code, list)
	}
	if nodes[2].shards.Held(1) {
		t.Fatal("node 3 holds shard 1")
	}
	if code := get("/sluice/v1/tasks/"+list.Tasks[0].ID, nil); code != http.StatusOK {
		t.Fatalf("task %s through node 3, without a copy of its shard: %d", list.Tasks[0].ID, code)
	}
}
