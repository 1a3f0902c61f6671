package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/dashboard"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/test/crash"
)

// shardedNodes starts three nodes with [cluster] shards = 3 and a short
// balancer interval, and waits until every node routes every shard to a
// serving leader and each node leads one shard.
func shardedNodes(t *testing.T) ([]*Node, func(i int) error) {
	t.Helper()
	return shardedNodesWith(t, func(*server.Options) {})
}

// shardedNodesWith is shardedNodes with edit applied to every node's
// options.
func shardedNodesWith(t *testing.T, edit func(*server.Options)) ([]*Node, func(i int) error) {
	t.Helper()
	return shardedNodesOpts(t, edit, func(*Options) {})
}

// shardedNodesOpts is shardedNodesWith with opt applied to every node's
// cluster options too.
func shardedNodesOpts(t *testing.T, edit func(*server.Options), opt func(*Options)) ([]*Node, func(i int) error) {
	t.Helper()
	return shardedNodesOn(t, brokertest.NewPorts(t), edit, opt)
}

// shardedNodesOn is shardedNodesOpts with the Raft ports reserved from
// ports (startThreeOn).
func shardedNodesOn(t *testing.T, ports *brokertest.Ports, edit func(*server.Options), opt func(*Options)) ([]*Node, func(i int) error) {
	t.Helper()
	nodes, stop := startThreeOn(t, ports, func(o *server.Options) { o.Cluster.Shards = 3; edit(o) },
		func(_ int, o *Options) { o.BalanceInterval = 100 * time.Millisecond; opt(o) }, nil, 3)
	poll.CheckFor(t, 30*time.Second, poll.True("every node routes every shard, and each node leads one", func() bool {
		led := map[uint64]int{}
		for _, n := range nodes {
			for k := range 3 {
				_, leader, ok := n.target(k)
				if !ok {
					return false
				}
				if n == nodes[0] {
					led[leader]++
				}
			}
		}
		return len(led) == 3
	}))
	return nodes, stop
}

// shardClient is an aws-sdk-go-v2 client of node n that retries (a
// leadership may move while the test runs).
func shardClient(n *Node) *sqs.Client {
	return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 10,
		Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
}

// TestShardsPlaceSQSQueues (ADR 0015 step 3): with three shards, SQS queues
// created through any node are spread over the shards, and each queue is
// served by its own shard's leader — so the three nodes run engines that
// each hold a part of the queues. Through every node a client sends,
// receives and deletes on every queue, ListQueues lists them all, a queue
// created with a RedrivePolicy lives with its dead-letter queue and
// dead-letters into it, and a shard whose leader stops is served by
// another node, its messages kept.
func TestShardsPlaceSQSQueues(t *testing.T) {
	nodes, stop := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := []*sqs.Client{shardClient(nodes[0]), shardClient(nodes[1]), shardClient(nodes[2])}
	for _, n := range nodes {
		if h := n.health(); h.Status != "ok" {
			t.Fatalf("node %d: %+v", n.opts.Cluster.NodeID, h)
		}
	}

	const queues = 12
	urls := make([]string, queues)
	for i := range queues {
		out, err := clients[i%3].CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("orders-%d", i))})
		if err != nil {
			t.Fatalf("create orders-%d through node %d: %v", i, i%3+1, err)
		}
		urls[i] = aws.ToString(out.QueueUrl)
		// Read-your-writes through the node that created it.
		if _, err := clients[i%3].GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(fmt.Sprintf("orders-%d", i))}); err != nil {
			t.Fatalf("GetQueueUrl orders-%d right after its create through the same node: %v", i, err)
		}
	}
	// Where each queue lives: exactly one shard's copy holds it, on every
	// node; and the queues are on more than one shard.
	shardOf := map[string]int{}
	poll.CheckFor(t, 10*time.Second, poll.True("every node's copies hold every queue", func() bool {
		for _, n := range nodes {
			for i := range queues {
				name := fmt.Sprintf("orders-%d", i)
				k, ok := n.findQueue(name)
				if !ok {
					return false
				}
				shardOf[name] = k
			}
		}
		return true
	}))
	used := map[int]bool{}
	for name, k := range shardOf {
		used[k] = true
		for j := range 3 {
			if j == k {
				continue
			}
			st := nodes[0].shards.Shard(j).Store()
			held, err := server.StoredQueue(st, name)
			_ = st.Close()
			if err != nil || held {
				t.Fatalf("%s is on shard %d and also on shard %d (%v)", name, k, j, err)
			}
		}
	}
	if len(used) < 2 {
		t.Fatalf("12 queues all on shard(s) %v: not spread", used)
	}

	// Every queue through every node: a send through one, a receive and
	// delete through the next.
	for i, u := range urls {
		body := fmt.Sprintf("m-%d", i)
		if _, err := clients[i%3].SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(body)}); err != nil {
			t.Fatalf("send to %s: %v", u, err)
		}
		out, err := clients[(i+1)%3].ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(u), WaitTimeSeconds: 1})
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != body {
			t.Fatalf("receive from %s through node %d: %+v, %v; want %q", u, (i+1)%3+1, out, err, body)
		}
		if _, err := clients[(i+2)%3].DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(u), ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
			t.Fatalf("delete from %s through node %d: %v", u, (i+2)%3+1, err)
		}
	}

	// A dead-letter queue and its source, created through different
	// nodes: the source lives with its DLQ, and a message that fails
	// moves there.
	dlq, err := clients[1].CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("failed")})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := clients[2].GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	// A source name that does not hash to the DLQ's shard: only placement
	// by the dead-letter target puts it there.
	work := "work"
	for i := 0; hashShard(work, 3) == hashShard("failed", 3); i++ {
		work = fmt.Sprintf("work-%d", i)
	}
	src, err := clients[0].CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(work), Attributes: map[string]string{
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, attrs.Attributes["QueueArn"]),
		"VisibilityTimeout": "0",
	}})
	if err != nil {
		t.Fatalf("create the source queue through node 1: %v", err)
	}
	kd, _ := nodes[0].findQueue("failed")
	if ks, ok := nodes[0].findQueue(work); !ok || ks != kd {
		t.Fatalf("%s is on shard %d (found %v), its DLQ on %d", work, ks, ok, kd)
	}
	if _, err := clients[2].SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageBody: aws.String("poison")}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // received once; the second receive dead-letters it
		if _, err := clients[1].ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: src.QueueUrl}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := clients[0].ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 2})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "poison" {
		t.Fatalf("the DLQ holds %+v, %v; want the poison message", out, err)
	}

	// A RedrivePolicy set later that names a dead-letter queue on another
	// shard is taken (its dead letters move there as transfers:
	// TestShardsDeadLetterToAnotherShard).
	for i := range queues {
		if shardOf[fmt.Sprintf("orders-%d", i)] == kd {
			continue
		}
		_, err := clients[i%3].SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(urls[i]), Attributes: map[string]string{
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, attrs.Attributes["QueueArn"]),
		}})
		if err != nil {
			t.Fatalf("a RedrivePolicy on orders-%d naming a DLQ on another shard: %v", i, err)
		}
		break
	}

	// ListQueues through any node names every queue of every shard.
	want := []string{"failed", work}
	for i := range queues {
		want = append(want, fmt.Sprintf("orders-%d", i))
	}
	slices.Sort(want)
	for i, c := range clients {
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("ListQueues through node %d lists every shard's queues", i+1), func() bool {
			lo, err := c.ListQueues(ctx, &sqs.ListQueuesInput{})
			if err != nil {
				return false
			}
			var got []string
			for _, u := range lo.QueueUrls {
				got = append(got, u[strings.LastIndex(u, "/")+1:])
			}
			return slices.Equal(got, want)
		}))
	}

	// The operator's listings through any node name every queue of every
	// shard, with the counters its own shard's engine keeps; and each
	// queue's dashboard page is served by its shard.
	for _, n := range nodes {
		poll.CheckFor(t, 10*time.Second, func() error {
			var l api.QueueList
			if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+n.HTTPAddr()+"/sluice/v1/queues", &l); err != nil {
				return err
			}
			var ov dashboard.Overview
			if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+n.HTTPAddr()+"/sluice/v1/dashboard/overview", &ov); err != nil {
				return err
			}
			var names, dash []string
			for _, q := range l.Queues {
				names = append(names, q.Name)
				if strings.HasPrefix(q.Name, "orders-") && q.Counters.Sent != 1 {
					return fmt.Errorf("node %d lists %s with %d sent, want 1", n.opts.Cluster.NodeID, q.Name, q.Counters.Sent)
				}
			}
			for _, q := range ov.Queues {
				dash = append(dash, q.Name)
				// Each row names its queue's shard and that shard's leader.
				k, _ := n.findQueue(q.Name)
				if _, leader, _ := n.target(k); q.Shard == nil || *q.Shard != k || q.Leader != leader {
					return fmt.Errorf("node %d's overview places %s on shard %v led by %d; it is on %d led by %d", n.opts.Cluster.NodeID, q.Name, q.Shard, q.Leader, k, leader)
				}
			}
			if !slices.Equal(names, want) || !slices.Equal(dash, want) || len(ov.Missing) > 0 {
				return fmt.Errorf("through node %d: GET /sluice/v1/queues lists %v, the overview %v (missing %v); want %v", n.opts.Cluster.NodeID, names, dash, ov.Missing, want)
			}
			return nil
		})
		for _, name := range want {
			var q dashboard.QueueDetail
			if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+n.HTTPAddr()+"/sluice/v1/dashboard/queues/"+name, &q); err != nil || q.Name != name {
				t.Fatalf("the dashboard page of %s through node %d: %+v, %v", name, n.opts.Cluster.NodeID, q.Name, err)
			}
		}
	}

	// Every queue's series are exported, once, by the node leading its
	// shard, and a node's metrics gather without a clash between its
	// shards' engines.
	// The requests each shard's server answered are counted once, on
	// the node whose server answered: summed over the nodes, the
	// SendMessage calls made so far (one per orders-i, the poison one).
	exported := map[string]uint64{}
	var sends float64
	for _, n := range nodes {
		mfs, err := n.gatherers().Gather()
		if err != nil {
			t.Fatalf("node %d's metrics: %v", n.opts.Cluster.NodeID, err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "sluice_http_requests_total" {
				for _, m := range mf.GetMetric() {
					if labelSignature(m) == "action\x00SendMessage\xffapi\x00sqs\xffcode\x00200\xff" {
						sends += m.GetCounter().GetValue()
					}
				}
			}
			if mf.GetName() != "sluice_queue_visible_messages" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "queue" {
						if was, ok := exported[l.GetValue()]; ok && was != n.opts.Cluster.NodeID {
							t.Errorf("queue %s exported by nodes %d and %d", l.GetValue(), was, n.opts.Cluster.NodeID)
						}
						exported[l.GetValue()] = n.opts.Cluster.NodeID
					}
				}
			}
		}
	}
	if len(exported) != len(want) {
		t.Errorf("sluice_queue_visible_messages for %d queues (%v), want %d", len(exported), exported, len(want))
	}
	if sends != queues+1 {
		t.Errorf("the nodes count %v SendMessage requests answered 200, summed; %d were made", sends, queues+1)
	}

	// Each node's status lists every shard with the leader it routes to.
	for _, n := range nodes {
		rep := n.Status()
		if len(rep.Shards) != 3 {
			t.Fatalf("node %d's status lists %d shards, want 3", rep.Node.ID, len(rep.Shards))
		}
		for k, sh := range rep.Shards {
			if _, leader, _ := n.target(k); sh.Shard != k || sh.Leader != leader {
				t.Errorf("node %d's status: shard %d %+v; it routes to %d", rep.Node.ID, k, sh, leader)
			}
		}
	}

	// The node leading orders-0's shard stops: another node leads that
	// shard and serves the queue, with the message sent before the stop.
	name := "orders-0"
	k := shardOf[name]
	if _, err := clients[0].SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls[0]), MessageBody: aws.String("kept")}); err != nil {
		t.Fatal(err)
	}
	_, leader, _ := nodes[0].target(k)
	if err := stop(int(leader) - 1); err != nil {
		t.Fatalf("stopping node %d: %v", leader, err)
	}
	survivor := nodes[int(leader)%3]
	poll.CheckFor(t, 10*time.Second, poll.True("another node leads the stopped node's shard", func() bool {
		_, now, ok := survivor.target(k)
		return ok && now != leader
	}))
	// The survivors are healthy again: every shard routes to a serving
	// leader.
	for _, n := range nodes {
		if n.opts.Cluster.NodeID == leader {
			continue
		}
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("node %d healthy after the failover", n.opts.Cluster.NodeID), func() bool { return n.health().Status == "ok" }))
	}
	got, err := shardClient(survivor).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[0]), WaitTimeSeconds: 2})
	if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].Body) != "kept" {
		t.Fatalf("after its leader stopped, %s through node %d gave %+v, %v; want the message sent before", name, survivor.opts.Cluster.NodeID, got, err)
	}
}

// TestShardCountIsFixed: a data directory remembers the shard count it was
// first started with, and a node refuses another one; a data directory
// that holds a node from before the setting counts as one shard.
func TestShardCountIsFixed(t *testing.T) {
	dir := t.TempDir()
	if err := checkShardCount(dir, 3); err != nil {
		t.Fatal(err)
	}
	if err := checkShardCount(dir, 3); err != nil {
		t.Fatalf("the same count again: %v", err)
	}
	if err := checkShardCount(dir, 1); err == nil || !strings.Contains(err.Error(), "started with 3 shards") {
		t.Fatalf("another count: %v; want a refusal naming 3", err)
	}
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "raft-state"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkShardCount(old, 3); err == nil {
		t.Fatal("3 shards on a data dir of a node from before the setting: accepted")
	}
	if err := checkShardCount(old, 1); err != nil {
		t.Fatalf("1 shard on it: %v", err)
	}
	if err := checkShardCount(old, 3); err == nil {
		t.Fatal("3 shards after it was stamped with 1: accepted")
	}
}

// TestShardedConfigRefused: with several shards, fixed internal listeners
// (one port cannot serve several shards) and too many shards are refused
// with a clear error.
func TestShardedConfigRefused(t *testing.T) {
	o := server.DefaultOptions()
	o.DataDir = t.TempDir()
	o.Cluster = server.ClusterConfig{NodeID: 1, Peers: []server.ClusterPeer{{ID: 1, Raft: "127.0.0.1:7101"}, {ID: 2, Raft: "127.0.0.1:7102"}}, Shards: 3, InternalHTTPListen: "127.0.0.1:65534"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.internal_http_listen: shard 2's port would be 65536, past 65535") {
		t.Fatalf("a fixed internal listener whose third shard's port is past 65535: %v", err)
	}
	o.Cluster.InternalHTTPListen = "127.0.0.1:7201" // shards 0, 1, 2 on 7201, 7202, 7203
	if err := o.Validate(); err != nil {
		t.Fatalf("a fixed internal listener with 3 shards: %v", err)
	}
	o.Cluster.InternalAMQPListen = "127.0.0.1:7203"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.internal_http_listen: the shards' ports 7201-7203 include the internal AMQP port 7203") {
		t.Fatalf("an internal AMQP port among the shards' HTTP ports: %v", err)
	}
	o.Cluster.InternalAMQPListen = ""
	o.Cluster.InternalHTTPListen, o.Cluster.Shards = "", server.MaxShards+1
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.shards") {
		t.Fatalf("%d shards: %v", server.MaxShards+1, err)
	}
	o.Cluster.Shards, o.Cluster.Join = 3, true
	if err := o.Validate(); err != nil {
		t.Fatalf("a node joining a cluster of 3 shards: %v", err)
	}
}

// TestShardedMembership: with three shards, adding a node through any
// node adds it to every shard's group (as a learner: it is not running),
// adding it again is 409 MemberExists, and removing it through another
// node removes it from every shard; every node's copy of every shard
// agrees. A bad address is refused as with one shard. The changes of the
// shards another node leads go to its internal listener, never its public
// one.
func TestShardedMembership(t *testing.T) {
	nodes, _ := shardedNodes(t)
	var dialled atomic.Int64
	for _, n := range nodes {
		noPublicForwards(n, &dialled) // before any membership request uses the transport
	}
	defer func() {
		if n := dialled.Load(); n != 0 {
			t.Errorf("%d membership changes went to a leader's public listener", n)
		}
	}()
	spare := brokertest.ReservePorts(t, 1)[0]
	do := func(n *Node, method, path, body string) (int, string) {
		t.Helper()
		return memberCall(t, n, method, path, body, "")
	}
	has := func(want bool) func() error {
		return func() error {
			for _, n := range nodes {
				for k := range 3 {
					found := slices.ContainsFunc(n.shards.Shard(k).Members(), func(m raftstore.Member) bool { return m.ID == 4 })
					if found != want {
						return fmt.Errorf("node %d, shard %d: node 4 a member: %v", n.opts.Cluster.NodeID, k, found)
					}
				}
			}
			return nil
		}
	}
	if status, code := do(nodes[0], "POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "127.0.0.1:0"}`); status != http.StatusBadRequest || code != "InvalidAddress" {
		t.Fatalf("a bad address: %d %q", status, code)
	}
	if status, code := do(nodes[1], "POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "`+spare+`"}`); status != http.StatusOK {
		t.Fatalf("add through node 2: %d %q", status, code)
	}
	poll.CheckFor(t, 10*time.Second, has(true))
	if status, code := do(nodes[2], "POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "`+spare+`"}`); status != http.StatusConflict || code != "MemberExists" {
		t.Fatalf("add again: %d %q, want 409 MemberExists", status, code)
	}
	if status, code := do(nodes[2], "DELETE", "/sluice/v1/cluster/members/4", ""); status != http.StatusOK {
		t.Fatalf("remove through node 3: %d %q", status, code)
	}
	poll.CheckFor(t, 10*time.Second, has(false))
	if status, code := do(nodes[0], "DELETE", "/sluice/v1/cluster/members/4", ""); status != http.StatusNotFound || code != "MemberNotFound" {
		t.Fatalf("remove again: %d %q, want 404 MemberNotFound", status, code)
	}
	if status, code := do(nodes[0], "POST", "/sluice/v1/cluster/members?shard=7", `{"id": 5, "raft": "`+spare+`"}`); status != http.StatusBadRequest || code != "InvalidRequest" {
		t.Fatalf("an unknown shard: %d %q", status, code)
	}
}

// TestShardsKeepOneQueuePerName: a name lives on one shard only. The
// config's [[queues]] are declared by shard 0's server alone (not once per
// shard); an SQS create routed to another shard than the one holding the
// name is refused rather than duplicated; and an AMQP declare of an SQS
// queue on another shard than AMQP's is answered without making a second
// queue on shard 0 (declare-ok for a plain durable declare, 406 for one
// with arguments, which could not be applied there).
func TestShardsKeepOneQueuePerName(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(o *server.Options) {
		o.Queues = []server.QueueDeclaration{{Name: "configured"}}
	})
	held := func(name string) []int { return heldBy(t, nodes[0], name) }
	poll.CheckFor(t, 10*time.Second, poll.True("the configured queue is on shard 0", func() bool { return slices.Equal(held("configured"), []int{0}) }))

	// An SQS queue on a shard other than 0.
	name := "elsewhere"
	for i := 0; hashShard(name, 3) == 0; i++ {
		name = fmt.Sprintf("elsewhere-%d", i)
	}
	ctx := context.Background()
	if _, err := shardClient(nodes[0]).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	at := held(name)
	if len(at) != 1 || at[0] == 0 {
		t.Fatalf("%s is on shards %v", name, at)
	}
	// Its engine-level guard: shard 0's engine refuses the name.
	if !nodes[0].queueElsewhere(0, name) || nodes[0].queueElsewhere(at[0], name) {
		t.Fatalf("queueElsewhere(0, %s) = %v, (%d) = %v", name, nodes[0].queueElsewhere(0, name), at[0], nodes[0].queueElsewhere(at[0], name))
	}

	conn, err := amqp.Dial("amqp://guest:guest@" + nodes[1].AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // the test is over
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-message-ttl": int32(1000)})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || !strings.Contains(ae.Reason, "another shard") {
		t.Fatalf("AMQP declare of %s with arguments: %v, want 406 naming another shard", name, err)
	}
	if ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err = ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatalf("AMQP declare of %s: %v, want declare-ok", name, err)
	}
	if at := held(name); len(at) != 1 {
		t.Fatalf("after the AMQP declares %s is on shards %v", name, at)
	}
}

// TestShardsAdminCreatePlaces: the admin API's create (POST
// /sluice/v1/queues, the dashboard's form) places its queue as an SQS
// CreateQueue does: with the existing dead-letter queue the form names,
// whatever shard that is on, else by the name's hash (through nodes 3
// and 1; each node leads one shard); a body over the admin API's limit
// gets the admin API's 413. Sent to shard 0 as before, the first was refused (its
// dead-letter queue on another shard) and the second landed on shard 0.
func TestShardsAdminCreatePlaces(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(*server.Options) {})
	dlq, _ := queueOnShard(t, nodes, "failures-1", 1)
	post := func(via *Node, body string) {
		t.Helper()
		resp, err := http.Post("http://"+via.HTTPAddr()+"/sluice/v1/queues", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body) // for the message only
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /sluice/v1/queues %s through node %d: %d %s", body, via.opts.Cluster.NodeID, resp.StatusCode, b)
		}
	}
	nameOn := func(prefix string, k int) string {
		name := prefix
		for i := 0; hashShard(name, 3) != k; i++ {
			name = fmt.Sprintf("%s-%d", prefix, i)
		}
		return name
	}
	// A source whose name hashes to shard 2, with the dead-letter queue on
	// shard 1: it lives on shard 1.
	src := nameOn("billing", 2)
	post(nodes[2], fmt.Sprintf(`{"name":%q,"deadLetterQueue":%q,"maxReceiveCount":3}`, src, dlq))
	// A queue without one: by its name, shard 2.
	plain := nameOn("reports", 2)
	post(nodes[0], fmt.Sprintf(`{"name":%q}`, plain))
	// A body over the admin API's limit is refused as the admin API
	// refuses it, by the node that would place it.
	big := fmt.Sprintf(`{"name":"huge","pad":%q}`, strings.Repeat("x", server.MaxAdminRequestBody))
	resp, err := http.Post("http://"+nodes[1].HTTPAddr()+"/sluice/v1/queues", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body) // for the check only
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"RequestTooLarge"`) {
		t.Fatalf("a body over %d bytes: %d %s, want 413 RequestTooLarge", server.MaxAdminRequestBody, resp.StatusCode, b)
	}
	// Through every node (each caught up with every shard first).
	ctx := context.Background()
	for _, n := range nodes {
		if k, ok, err := n.locateQueue(ctx, src); !ok || k != 1 {
			t.Fatalf("node %d: %s on shard %d (%v, %v), want 1, with its dead-letter queue", n.opts.Cluster.NodeID, src, k, ok, err)
		}
		if k, ok, err := n.locateQueue(ctx, plain); !ok || k != 2 {
			t.Fatalf("node %d: %s on shard %d (%v, %v), want 2, where its name hashes", n.opts.Cluster.NodeID, plain, k, ok, err)
		}
	}
}

// heldBy returns the shards whose copy on node n holds queue name.
func heldBy(t *testing.T, n *Node, name string) []int {
	t.Helper()
	var at []int
	for k := range n.shards.Len() {
		st := n.shards.Shard(k).Store()
		ok, err := server.StoredQueue(st, name)
		_ = st.Close() // a view: closing it ends nothing beneath
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			at = append(at, k)
		}
	}
	return at
}

// TestSnapshotRateFloorAgrees: the configuration's floor for [cluster]
// snapshot_rate is raftstore's, so a rate the server accepts opens.
func TestSnapshotRateFloorAgrees(t *testing.T) {
	if server.MinSnapshotRate != raftstore.MinSnapshotRate {
		t.Fatalf("server.MinSnapshotRate %d, raftstore.MinSnapshotRate %d", server.MinSnapshotRate, raftstore.MinSnapshotRate)
	}
}
