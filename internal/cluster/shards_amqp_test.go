package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// TestShardsAMQPOverShards (ADR 0015 step 4): AMQP lives on shard 0's leader, yet a publish through the default
// exchange to an SQS queue on another shard reaches that queue, confirmed
// only once it is stored there, with its headers as message attributes —
// through every node, for queues on both other shards. A mandatory publish
// to a name no shard holds is still returned. An AMQP consumer through
// any node consumes such a queue (its deliveries leased by that shard's
// leader), with nacks, requeues on close and acks as on shard 0 (binds to
// it: TestShardsAMQPBindAndDeadLetterElsewhere).
func TestShardsAMQPOverShards(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(*server.Options) {})
	ctx := context.Background()
	queueOn := func(k int) string {
		name := fmt.Sprintf("orders-%d", k)
		for i := 0; hashShard(name, 3) != k; i++ {
			name = fmt.Sprintf("orders-%d-%d", k, i)
		}
		if _, err := shardClient(nodes[0]).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		if at, ok := nodes[0].findQueue(name); !ok || at != k {
			t.Fatalf("%s is on shard %d (%v), want %d", name, at, ok, k)
		}
		return name
	}
	queues := []string{queueOn(1), queueOn(2)}

	const each = 5
	for i, n := range nodes {
		conn, err := amqp.Dial("amqp://guest:guest@" + n.AMQPAddr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		returns := ch.NotifyReturn(make(chan amqp.Return, 64))
		for _, q := range queues {
			// A publisher's usual first step: declare, then publish. The
			// declare-ok counts are the queue's shard's: what the nodes
			// before this one published, no consumer.
			dq, err := ch.QueueDeclare(q, true, false, false, false, nil)
			if err != nil {
				t.Fatalf("declare %s through node %d: %v", q, i+1, err)
			}
			if dq.Messages != each*i || dq.Consumers != 0 {
				t.Fatalf("declare-ok of %s through node %d: %d messages, %d consumers; want %d and 0", q, i+1, dq.Messages, dq.Consumers, each*i)
			}
			for j := range each {
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
					DeliveryMode: amqp.Persistent, Headers: amqp.Table{"origin": fmt.Sprintf("node-%d", i+1)},
					Body: []byte(fmt.Sprintf("%s/%d/%d", q, i, j))})
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				ok, err := dc.WaitContext(wctx)
				cancel()
				if err != nil || !ok {
					t.Fatalf("publish to %s through node %d: acked %v, %v", q, i+1, ok, err)
				}
			}
		}
		// A name no shard holds: still unroutable, returned.
		if err := ch.PublishWithContext(ctx, "", "no-such-queue", true, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-returns:
			if r.RoutingKey != "no-such-queue" {
				t.Fatalf("returned a publish to %q through node %d", r.RoutingKey, i+1)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no basic.return for an unroutable mandatory publish through node %d", i+1)
		}
		select {
		case r := <-returns:
			t.Fatalf("returned a publish to %q through node %d", r.RoutingKey, i+1)
		default:
		}
		_ = conn.Close() // done with this node
	}

	// An AMQP consumer, through a node that leads neither shard 1 nor
	// shard 0 when it can, takes queues[0]'s messages from its shard's
	// leader: a nack with requeue comes back redelivered, a channel
	// closed with a delivery unacknowledged gives it back, and the acks
	// delete (the queue is empty after).
	consumeRemote(t, nodes, queues[0], each*len(nodes))

	// Every confirmed publish is in queues[1], with its header.
	for qi, q := range queues[1:] {
		qi++
		client := shardClient(nodes[(qi+1)%3])
		url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		deadline := time.Now().Add(30 * time.Second)
		for len(seen) < each*len(nodes) && time.Now().Before(deadline) {
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				body := aws.ToString(m.Body)
				if !strings.HasPrefix(body, q+"/") {
					t.Fatalf("%s holds %q", q, body)
				}
				if a, ok := m.MessageAttributes["origin"]; !ok || !strings.HasPrefix(aws.ToString(a.StringValue), "node-") {
					t.Fatalf("%q arrived without its header as an attribute: %v", body, m.MessageAttributes)
				}
				seen[body] = true
			}
		}
		if len(seen) != each*len(nodes) {
			t.Fatalf("%s holds %d of the %d confirmed publishes", q, len(seen), each*len(nodes))
		}
	}
}

// consumeRemote consumes the n messages of queue (on a shard other than
// 0) over AMQP through node 3, checking a nack's redelivery, a closed
// channel's requeue and, at the end, through SQS, that the acks deleted
// every message.
func consumeRemote(t *testing.T, nodes []*Node, queue string, n int) {
	t.Helper()
	ctx := context.Background()
	conn, err := amqp.Dial("amqp://guest:guest@" + nodes[2].AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // the test is over
	next := func(ds <-chan amqp.Delivery) amqp.Delivery {
		t.Helper()
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatal("the consumer's deliveries ended")
			}
			return d
		case <-time.After(30 * time.Second):
			t.Fatalf("no delivery from %s in 30 s", queue)
		}
		return amqp.Delivery{}
	}
	// A delivery left unacknowledged when its channel closes comes back.
	ch1, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch1.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds1, err := ch1.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	held := next(ds1)
	if err := ch1.Close(); err != nil {
		t.Fatal(err)
	}

	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	seen := map[string]bool{}
	nacked := ""
	heldBack := false
	for len(seen) < n {
		d := next(ds)
		body := string(d.Body)
		if !strings.HasPrefix(body, queue+"/") {
			t.Fatalf("%s delivered %q", queue, body)
		}
		if body == string(held.Body) && d.Redelivered {
			heldBack = true
		}
		if nacked == "" && !d.Redelivered {
			nacked = body
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if body == nacked && !d.Redelivered {
			t.Fatalf("%q came back after its nack without redelivered", body)
		}
		if seen[body] && !d.Redelivered {
			t.Fatalf("%q delivered twice, the second time without redelivered", body)
		}
		seen[body] = true
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if !heldBack {
		t.Errorf("%q, unacknowledged when its channel closed, did not come back redelivered", held.Body)
	}
	if !seen[nacked] {
		t.Errorf("%q, nacked with requeue, did not come back", nacked)
	}
	// The acks deleted on the queue's shard: nothing is left, in flight
	// or visible (an ack is settled by the next method on its channel).
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	client := shardClient(nodes[0])
	url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, poll.True(queue+" is empty after the acks", func() bool {
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			t.Logf("%s: %v", queue, err)
			return false
		}
		t.Logf("%s: %v", queue, out.Attributes)
		return out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	}))
}

// TestShardsAMQPRemoteFullQueueNacks: a publish to an SQS queue on
// another shard that its shard's engine refuses (the queue is at
// max_queue_messages) is nacked, not confirmed, and the publishes it
// stored are confirmed and there; through node 3 (each node leads one
// shard).
func TestShardsAMQPRemoteFullQueueNacks(t *testing.T) {
	const limit = 3
	nodes, _ := shardedNodesWith(t, func(o *server.Options) { o.MaxQueueMessages = limit })
	ctx := context.Background()
	name, url := queueOnShard(t, nodes, "full-1", 1)
	ch := amqpChannel(t, nodes[2], true)
	var acked, nacked int
	for j := range limit + 2 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(fmt.Sprintf("m%d", j))})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ok, err := dc.WaitContext(wctx)
		cancel()
		if err != nil {
			t.Fatalf("publish %d: %v", j, err)
		}
		if ok {
			acked++
		} else {
			nacked++
		}
	}
	if acked != limit || nacked != 2 {
		t.Fatalf("%d publishes to a queue of at most %d on shard 1: %d acked, %d nacked; want %d and 2", limit+2, limit, acked, nacked, limit)
	}
	if ch.IsClosed() {
		t.Fatal("a nacked publish closed the channel")
	}
	attrs, err := shardClient(nodes[2]).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatal(err)
	}
	if got := attrs.Attributes["ApproximateNumberOfMessages"]; got != fmt.Sprint(limit) {
		t.Fatalf("%s holds %s messages, want the %d confirmed", name, got, limit)
	}
}

// TestShardsAMQPFlowControlsARemoteQueue: AMQP publisher flow control
// covers a queue on another shard. Its one consumer holds its prefetch
// without acking while a confirming publisher floods it through shard 0's
// router: the publisher's connection is paused (shard 0's leader reports
// it) and the queue stops near its high-water mark; once the consumer
// acks again everything is delivered and confirmed. Without a backlog
// hint for remote queues nothing is ever paused.
func TestShardsAMQPFlowControlsARemoteQueue(t *testing.T) {
	const (
		total      = 1500
		window     = 20
		prefetch   = 5
		minBacklog = 100
	)
	nodes, _ := shardedNodesWith(t, func(o *server.Options) {
		o.AMQPFlowMinBacklog, o.AMQPFlowCreditFactor = minBacklog, 1
		o.AMQPFlowMaxWait = 60_000_000_000 // a minute (the option's type is the server's own duration)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, url := queueOnShard(t, nodes, "flow-1", 1)
	// Shard 0's leader runs the AMQP server (and its router).
	var lead0 *Node
	poll.CheckFor(t, 10*time.Second, poll.True("shard 0 led by one of the nodes", func() bool {
		_, l, ok := nodes[0].target(0)
		for _, n := range nodes {
			if ok && n.opts.Cluster.NodeID == l {
				lead0 = n
			}
		}
		return lead0 != nil
	}))

	cch := amqpChannel(t, nodes[2], false)
	if err := cch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cch.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	pch := amqpChannel(t, nodes[2], true)
	published := make(chan error, 1)
	go func() {
		var inflight []*amqp.DeferredConfirmation
		wait := func() error {
			ok, err := inflight[0].WaitContext(ctx)
			inflight = inflight[1:]
			if err == nil && !ok {
				err = errors.New("a publish was nacked")
			}
			return err
		}
		for i := range total {
			for len(inflight) >= window {
				if err := wait(); err != nil {
					published <- err
					return
				}
			}
			dc, err := pch.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(fmt.Sprintf("m%d", i))})
			if err != nil {
				published <- err
				return
			}
			inflight = append(inflight, dc)
		}
		for len(inflight) > 0 {
			if err := wait(); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()

	poll.CheckFor(t, 30*time.Second, poll.True("the publisher paused by flow control on shard 0's leader", func() bool {
		v, _ := scrape(t, lead0)
		return v["sluice_amqp_flow_paused_connections"] >= 1 && v["sluice_amqp_flow_throttling_queues"] == 1
	}))
	attrs, err := shardClient(nodes[0]).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatal(err)
	}
	ready := attrs.Attributes["ApproximateNumberOfMessages"]
	var n int
	if _, err := fmt.Sscan(ready, &n); err != nil || n <= minBacklog || n > minBacklog+2*window {
		t.Fatalf("ready while paused: %s, want over the mark %d and at most %d", ready, minBacklog, minBacklog+2*window)
	}
	select {
	case err := <-published:
		t.Fatalf("the publisher finished while the consumer was stalled: %v", err)
	default:
	}

	for got := 0; got < total; got++ {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatal("deliveries closed")
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("received %d of %d", got, total)
		}
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
}

// nameOnShard is prefix, or prefix-N, the first that hashes to shard k
// of three.
func nameOnShard(prefix string, k int) string {
	name := prefix
	for i := 0; hashShard(name, 3) != k; i++ {
		name = fmt.Sprintf("%s-%d", prefix, i)
	}
	return name
}

// queueOnShard creates, through node 1, an SQS queue whose name
// (nameOnShard) hashes to shard k of three, and returns its name and URL.
func queueOnShard(t *testing.T, nodes []*Node, prefix string, k int) (string, *string) {
	t.Helper()
	name := nameOnShard(prefix, k)
	out, err := shardClient(nodes[0]).CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return name, out.QueueUrl
}

// amqpChannel opens a channel on a new AMQP connection through node n
// (closed when the test ends), in confirm mode when confirm is set.
func amqpChannel(t *testing.T, n *Node, confirm bool) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@" + n.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() }) // the test is over
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if confirm {
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
	}
	return ch
}

// awaitMessages waits up to within until a passive declare of queue
// through ch counts want messages.
func awaitMessages(t *testing.T, ch *amqp.Channel, queue string, want int, within time.Duration) {
	t.Helper()
	poll.CheckFor(t, within, func() error {
		dq, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return err
		}
		if dq.Messages != want {
			return fmt.Errorf("%s holds %d messages, want %d", queue, dq.Messages, want)
		}
		return nil
	})
}

// publishConfirmed publishes body to queue through the default exchange
// on ch (in confirm mode), persistent and mandatory, and fails t unless
// the broker confirms it within 30 s.
func publishConfirmed(t *testing.T, ch *amqp.Channel, queue, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish to %s: acked %v, %v", queue, ok, err)
	}
}

// TestShardsAMQPAckAfterTheQueuesLeaderMoved: a delivery from an SQS
// queue on another shard than AMQP's is a lease in the memory of that
// shard's leader; when that leadership moves before the consumer acks,
// the lease is gone and the message is back in the queue. The ack must
// then not be taken for applied: the connection closes (the basic.qos
// sent after the ack fails instead of proving it), and the message is
// received again. Until the queue's new leader refused such an ack, it
// answered success without deleting anything, basic.qos proved the ack,
// and the message came back anyway (the fault harness's finding).
func TestShardsAMQPAckAfterTheQueuesLeaderMoved(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const k = 1
	name, url := queueOnShard(t, nodes, "ack-after-move", k)
	if _, err := shardClient(nodes[1]).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("once")}); err != nil {
		t.Fatal(err)
	}
	ch := amqpChannel(t, nodes[2], false)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var d amqp.Delivery
	select {
	case d = <-ds:
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	// Move shard k's leadership to another node.
	_, from, ok := nodes[0].target(k)
	if !ok {
		t.Fatalf("shard %d has no route", k)
	}
	to := from%3 + 1
	handOver(t, nodes, k, to)
	poll.CheckFor(t, 20*time.Second, poll.True("every node routes the shard to a new leader", func() bool {
		for _, n := range nodes {
			if _, l, ok := n.target(k); !ok || l == from {
				return false
			}
		}
		return true
	}))
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err == nil {
		t.Fatal("basic.qos after an ack of a delivery whose leader is gone answered: the ack would pass for applied")
	}
	// Closed: 541 from shard 0's leader for the refused ack, or 320 when
	// the balancer, evening out the moved leadership, moved shard 0's
	// too (its relays close); either way after no reply to the qos.
	select {
	case e := <-closed:
		if e == nil {
			t.Fatal("the channel closed without an error")
		}
		t.Logf("closed: %v", e)
	case <-ctx.Done():
		t.Fatal("the channel did not close")
	}
	// The message is in the queue again.
	poll.CheckFor(t, 20*time.Second, func() error {
		out, err := shardClient(nodes[0]).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 1})
		if err != nil {
			return err
		}
		if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "once" {
			return fmt.Errorf("received %d messages", len(out.Messages))
		}
		return nil
	})
}
