package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// TestShardsAMQPPublishesThroughLeaderMoves: confirmed AMQP publishes to
// a queue of another shard than AMQP's go on being confirmed while that
// shard's leadership moves, again and again: a send that met the move and
// certainly stored nothing (the old leader refused it or Raft dropped its
// proposal) is sent again to the new leader, and its confirm waits for
// it, as RabbitMQ's for a quorum queue whose leader changed. Until then
// each such publish was nacked (TestShardsAMQPDeclaresSpread failed so in
// CI, when the balancer moved a leadership under it). Every confirmed
// message is then in the queue. And a call that could not connect to a
// leader is one the remote engine may make again.
func TestShardsAMQPPublishesThroughLeaderMoves(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const k = 1
	name, url := queueOnShard(t, nodes, "publish-through-moves", k)
	_, amqpLeader, ok := nodes[0].target(0)
	if !ok {
		t.Fatal("shard 0 has no route")
	}
	// Through the node that leads no shard but 0 — any node would do: the
	// connection is relayed to shard 0's leader.
	ch := amqpChannel(t, nodes[amqpLeader-1], true)
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		published int
		failed    error
		nacked    []int // publishes nacked: each must be one that was stored (below)
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			dc, err := ch.PublishWithDeferredConfirmWithContext(pctx, "", name, true, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(i))})
			nack := false
			if err == nil {
				var acked bool
				acked, err = dc.WaitContext(pctx)
				nack = err == nil && !acked
			}
			pcancel()
			mu.Lock()
			if nack {
				// A send whose write may have been stored (in the old
				// leader's log when its leadership ended) is nacked, as
				// documented, stored or not; one certainly not stored
				// is sent again, not nacked. The first kind's window is
				// narrow: at most two in six moves (CI saw one, stored
				// once and once not); without the retry nearly every
				// move nacks one.
				nacked = append(nacked, i)
			}
			if err != nil {
				failed = err
				mu.Unlock()
				return
			}
			published = i + 1
			mu.Unlock()
		}
	}()
	count := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return published, failed
	}

	// Move shard k's leadership back and forth between the two nodes that
	// do not lead shard 0, with publishes under way each time. The
	// balancer, evening out each move, moves shard k or the third shard
	// too — never shard 0, whose leader leads one shard throughout.
	const moves = 6
	for m := range moves {
		before, err := count()
		if err != nil {
			break
		}
		poll.CheckFor(t, 20*time.Second, poll.True("publishes under way", func() bool {
			n, err := count()
			return err != nil || n >= before+20
		}))
		_, from, ok := nodes[0].target(k)
		if !ok {
			t.Fatalf("shard %d has no route", k)
		}
		to := uint64(6) - amqpLeader - from // the third node
		if from == amqpLeader {
			to = amqpLeader%3 + 1
		}
		handOver(t, nodes, k, to)
		poll.CheckFor(t, 20*time.Second, poll.True(fmt.Sprintf("move %d: every node routes the shard to its new leader", m), func() bool {
			for _, n := range nodes {
				if _, l, ok := n.target(k); !ok || l == from {
					return false
				}
			}
			return true
		}))
	}
	after, err := count()
	if err == nil {
		poll.CheckFor(t, 20*time.Second, poll.True("publishes after the last move", func() bool {
			n, err := count()
			return err != nil || n >= after+20
		}))
	}
	close(stop)
	<-done
	n, err := count()
	if _, l, _ := nodes[0].target(0); l != amqpLeader {
		// Its AMQP server stopped, and the connection with it.
		t.Fatalf("shard 0's leadership moved (node %d to %d), against the test's premise; publishing: %v", amqpLeader, l, err)
	}
	if err != nil {
		t.Fatalf("after %d confirmed publishes: %v", n, err)
	}

	// Every confirmed message is in the queue.
	seen := make(map[string]bool)
	client := shardClient(nodes[1])
	poll.CheckFor(t, 60*time.Second, func() error {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return err
		}
		for _, m := range out.Messages {
			seen[aws.ToString(m.Body)] = true
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
		for i := range n {
			if !seen[strconv.Itoa(i)] && !slices.Contains(nacked, i) {
				return fmt.Errorf("message %d of %d confirmed is not in the queue (%d distinct seen)", i, n, len(seen))
			}
		}
		return nil
	})
	if len(nacked) > 2 {
		t.Fatalf("publishes %v nacked in %d moves: sends that stored nothing were not sent again", nacked, moves)
	}
	t.Logf("%d publishes through %d moves of shard %d's leadership, %d of them nacked (their write in the old leader's log when its leadership ended)", n, moves, k, len(nacked))

	// A call to a leader no connection can be made to (one that stopped)
	// sent nothing: its error says so, and the remote engine makes it
	// again (server.ErrShardUnreachable).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	_ = l.Close() // a port nothing listens on
	_, err = (&http.Client{Transport: nodes[0].transport}).Post("http://"+gone+server.ShardEnginePath, "application/octet-stream", nil)
	if !errors.Is(err, server.ErrShardUnreachable) {
		t.Fatalf("a call to a closed port: %v, want server.ErrShardUnreachable", err)
	}
}

// handOver moves shard k's leadership to node to: it has whichever of
// nodes leads the shard (of the highest term: a stopped node's status
// may still say it leads) transfer it, and asks again every 2 s until to
// leads it, within 30 s. Raft abandons a transfer that its target did not
// complete within an election timeout, and the leader goes on leading (a
// loaded CI machine saw a single request never complete); a transfer may
// also end with a third node elected, which is then the one asked.
func handOver(t *testing.T, nodes []*Node, k int, to uint64) {
	t.Helper()
	poll.CheckFor(t, 30*time.Second, func() error {
		var leader *Node
		var term uint64
		for _, n := range nodes {
			if n == nil || !n.leadsShard(k) {
				continue
			}
			if st := n.shards.Shard(k).Status(); leader == nil || st.Term > term {
				leader, term = n, st.Term
			}
		}
		switch {
		case leader == nil:
			return fmt.Errorf("no node leads shard %d", k)
		case leader.opts.Cluster.NodeID == to:
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := leader.shards.Shard(k).TransferLeadershipTo(ctx, to)
		cancel()
		if st := leader.shards.Shard(k).Status(); err == nil && st.Leader == to {
			return nil
		}
		return fmt.Errorf("shard %d's leadership is not on node %d yet (%v)", k, to, err)
	})
}
