package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// TestFixedAndAdvertisedInternalListeners: with [cluster]
// internal_http_listen / internal_amqp_listen on fixed ports and
// internal_*_advertise naming a proxy in front of each, the leader binds
// exactly those ports, advertises the proxies, and the followers' forwarded
// SQS requests and relayed AMQP connections go through them: cutting the
// leader's proxies fails requests through a follower (503) while the
// leader itself still serves. A node that leads again in a later term
// binds the same fixed ports again.
func TestFixedAndAdvertisedInternalListeners(t *testing.T) {
	ports := brokertest.ReservePorts(t, 6) // per node: internal HTTP, internal AMQP
	type proxies struct{ http, amqp *cuttableLink }
	links := make([]proxies, 3)
	for i := range links {
		links[i] = proxies{newCuttableLink(t, ports[2*i]), newCuttableLink(t, ports[2*i+1])}
	}
	secret := secretFile(t, strings.Repeat("k", 40))
	nodes := threeNodes(t, func(o *server.Options) {
		i := o.Cluster.NodeID - 1
		o.Cluster.SecretFile = secret
		o.Cluster.InternalHTTPListen, o.Cluster.InternalAMQPListen = ports[2*i], ports[2*i+1]
		o.Cluster.InternalHTTPAdvertise = links[i].http.ln.Addr().String()
		o.Cluster.InternalAMQPAdvertise = links[i].amqp.ln.Addr().String()
	})
	leader, follower := leaderAndFollower(t, nodes)
	li := leader.opts.Cluster.NodeID - 1

	ad, _, ok := follower.target(0)
	if !ok {
		t.Fatal("the follower has no route")
	}
	if ad.SQS != links[li].http.ln.Addr().String() || ad.AMQP != links[li].amqp.ln.Addr().String() {
		t.Fatalf("advertised %+v, want the leader's proxies %s and %s", ad, links[li].http.ln.Addr(), links[li].amqp.ln.Addr())
	}
	for _, p := range ports[2*li : 2*li+2] {
		c, err := net.Dial("tcp", p)
		if err != nil {
			t.Fatalf("the leader's fixed internal port %s: %v", p, err)
		}
		_ = c.Close() // only reachability is checked
	}

	ctx := context.Background()
	client := func(n *Node) *sqs.Client {
		return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
			Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
	}
	viaFollower, viaLeader := client(follower), client(leader)
	if _, err := viaFollower.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("fixed")}); err != nil {
		t.Fatalf("SQS through the follower and the proxy: %v", err)
	}
	conn, err := amqp.Dial("amqp://guest:guest@" + follower.AMQPAddr() + "/")
	if err != nil {
		t.Fatalf("AMQP through the follower and the proxy: %v", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare("fixed-amqp", true, false, false, false, nil)
	}
	_ = conn.Close() // the declare's outcome is what is checked
	if err != nil {
		t.Fatalf("AMQP declare through the follower: %v", err)
	}

	// Cut the leader's proxies: the follower can no longer reach the
	// leader's server (its Raft links are untouched, so the leader stays).
	links[li].http.sever()
	links[li].amqp.sever()
	follower.transport.CloseIdleConnections()
	if _, err := viaFollower.ListQueues(ctx, &sqs.ListQueuesInput{}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("through the follower with the leader's proxy cut: %v, want a 503", err)
	}
	if _, err := viaLeader.ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatalf("the leader itself: %v", err)
	}

	// Lead elsewhere and back: the same node binds its fixed ports again.
	first := leader
	for _, hop := range [][2]*Node{{first, follower}, {follower, first}} {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := hop[0].raft.TransferLeadershipTo(tctx, hop[1].opts.Cluster.NodeID)
		cancel()
		if err != nil {
			t.Fatalf("transfer from node %d to node %d: %v", hop[0].opts.Cluster.NodeID, hop[1].opts.Cluster.NodeID, err)
		}
		poll.CheckFor(t, 30*time.Second, routed(nodes))
	}
	poll.CheckFor(t, 30*time.Second, func() error {
		_, err := viaLeader.ListQueues(ctx, &sqs.ListQueuesInput{})
		if err != nil {
			return fmt.Errorf("node %d leading again on its fixed ports: %v", first.opts.Cluster.NodeID, err)
		}
		ad, _, _ := first.target(0)
		if ad.SQS != links[li].http.ln.Addr().String() {
			return fmt.Errorf("advertised %s", ad.SQS)
		}
		return nil
	})
	c, err := net.Dial("tcp", ports[2*li])
	if err != nil {
		t.Fatalf("the fixed internal HTTP port after leading again: %v", err)
	}
	_ = c.Close() // only reachability is checked
}

// TestLeaderThatCannotServeHandsOver: a leader whose server cannot start
// (here its fixed internal HTTP port is taken) hands its leadership to
// another voter after handOverAfter failed starts, instead of holding the
// cluster's writes for as long as Raft keeps it leading. Nodes 1 and 2
// cannot serve; node 3 can. Leadership is moved to node 1 by hand; it must
// come back to node 3 (through node 2, perhaps: the target is random among
// the most caught-up voters).
func TestLeaderThatCannotServeHandsOver(t *testing.T) {
	ports := brokertest.ReservePorts(t, 3)
	for _, p := range ports[:2] {
		ln, err := net.Listen("tcp", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() }) // held for the whole test
	}
	nodes, _ := startThree(t, func(o *server.Options) {
		o.Cluster.InternalHTTPListen = ports[o.Cluster.NodeID-1]
	}, nil, 0)
	serving := func(want uint64) func() error {
		return func() error {
			for _, n := range nodes {
				ad, leader, ok := n.target(0)
				if !ok || leader != want {
					return fmt.Errorf("node %d: route %+v to %d (%v), want node %d serving", n.opts.Cluster.NodeID, ad, leader, ok, want)
				}
			}
			return nil
		}
	}
	poll.CheckFor(t, 60*time.Second, serving(3))
	handOver(t, nodes, 0, 1)
	poll.CheckFor(t, 60*time.Second, serving(3))
}

// TestShardInternalAddr: shard k's internal HTTP address is the configured
// port plus k; an empty address or port 0 is every shard's as it is.
func TestShardInternalAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		k    int
		want string
	}{
		{"127.0.0.1:7201", 0, "127.0.0.1:7201"},
		{"127.0.0.1:7201", 2, "127.0.0.1:7203"},
		{"[::1]:9000", 1, "[::1]:9001"},
		{"10.0.0.5:0", 3, "10.0.0.5:0"},
		{"", 1, ""},
	} {
		if got := server.ShardInternalAddr(tc.addr, tc.k); got != tc.want {
			t.Errorf("ShardInternalAddr(%q, %d) = %q, want %q", tc.addr, tc.k, got, tc.want)
		}
	}
}

// TestShardsOnFixedInternalPorts: with three shards and
// internal_http_listen on a fixed port P, each shard a node leads
// listens on P plus the shard's number, its leadership advertises that,
// and SQS requests through every node reach a queue on every shard; a
// fixed internal AMQP port is shard 0's alone (the other shards' servers,
// which serve no AMQP, would refuse it).
// Before, a fixed internal address was refused with shards (every
// shard's server would have bound the same port).
func TestShardsOnFixedInternalPorts(t *testing.T) {
	ports := brokertest.NewPorts(t) // the Raft ports too: none inside these blocks
	bases := ports.Blocks(6, 3)     // per node: the shards' HTTP ports; the AMQP port (a block's first)
	nodes, _ := shardedNodesOn(t, ports, func(o *server.Options) {
		o.Cluster.InternalHTTPListen = bases[o.Cluster.NodeID-1]
		o.Cluster.InternalAMQPListen = bases[3+o.Cluster.NodeID-1] // shard 0's alone
	}, func(*Options) {})
	for k := range 3 {
		ad, leader, ok := nodes[0].target(k)
		if !ok {
			t.Fatalf("shard %d: no route", k)
		}
		if want := server.ShardInternalAddr(bases[leader-1], k); ad.SQS != want {
			t.Errorf("shard %d's leader (node %d) advertises %s, want %s", k, leader, ad.SQS, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for k := range 3 {
		name, url := queueOnShard(t, nodes, fmt.Sprintf("fixed-port-%d", k), k)
		for _, n := range nodes {
			c := shardClient(n)
			body := fmt.Sprintf("%s via node %d", name, n.opts.Cluster.NodeID)
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(body)}); err != nil {
				t.Fatalf("send to %s (shard %d) through node %d: %v", name, k, n.opts.Cluster.NodeID, err)
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5})
			if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != body {
				t.Fatalf("receive from %s through node %d: %v %v", name, n.opts.Cluster.NodeID, out, err)
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
