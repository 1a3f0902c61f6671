package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestShardsDeadLetterToAnotherShard (ADR 0015 step 5, dead letters): a
// RedrivePolicy set on a queue after both it and its dead-letter queue
// exist, on two different shards, is taken (it was refused before), and
// the source's dead letters arrive in the dead-letter queue, each once,
// with their MessageId, body, attributes and dead-letter context, through
// any node; the dead-letter queue lists its source, and a redrive
// (StartMessageMoveTask) moves them back, each once. A FIFO pair too. It
// fails without the mover (the dead letters stay in transfer), without the
// RedrivePolicy check that asks the other shard (the policy is refused),
// and without the other shards' sources (the redrive is refused: not a
// dead-letter queue).
func TestShardsDeadLetterToAnotherShard(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), transferTestBudget)
	defer cancel()
	pair := func(src, dlq string) (string, string) {
		for i := 0; ; i++ {
			s, d := fmt.Sprintf(src, i), fmt.Sprintf(dlq, i)
			if hashShard(s, 3) != hashShard(d, 3) {
				return s, d
			}
		}
	}
	for _, fifo := range []bool{false, true} {
		src, dlq := pair("work-%d", "graveyard-%d")
		attrs := map[string]string{"VisibilityTimeout": "0"}
		dlqAttrs := map[string]string{}
		if fifo {
			src, dlq = pair("work-%d.fifo", "graveyard-%d.fifo")
			attrs["FifoQueue"], dlqAttrs["FifoQueue"] = "true", "true"
			attrs["ContentBasedDeduplication"] = "true"
		}
		c0, c1, c2 := shardClient(nodes[0]), shardClient(nodes[1]), shardClient(nodes[2])
		s, err := c0.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(src), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		d, err := c1.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlq), Attributes: dlqAttrs})
		if err != nil {
			t.Fatal(err)
		}
		_ = nodes[0].catchUp(ctx)
		ks, oks := nodes[0].findQueue(src)
		kd, okd := nodes[0].findQueue(dlq)
		if !oks || !okd || ks == kd {
			t.Fatalf("%s on shard %d (%v), %s on %d (%v): want two shards", src, ks, oks, dlq, kd, okd)
		}
		arn, err := c2.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, arn.Attributes["QueueArn"])
		if _, err := c2.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: s.QueueUrl, Attributes: map[string]string{"RedrivePolicy": policy}}); err != nil {
			t.Fatalf("a RedrivePolicy on %s (shard %d) naming %s (shard %d): %v", src, ks, dlq, kd, err)
		}
		const n = 30
		sent := map[string]string{} // MessageId → body
		for i := range n {
			in := &sqs.SendMessageInput{QueueUrl: s.QueueUrl, MessageBody: aws.String(fmt.Sprintf("poison %d", i)),
				MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}}
			if fifo {
				in.MessageGroupId = aws.String(fmt.Sprintf("g%d", i%3))
			}
			out, err := c0.SendMessage(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			sent[aws.ToString(out.MessageId)] = fmt.Sprintf("poison %d", i)
		}
		// Each message received once, then over its limit: dead-lettered.
		poll.CheckFor(t, 30*time.Second, poll.True("the source empty", func() bool {
			out, err := c1.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: s.QueueUrl, MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) > 0 {
				return false
			}
			a, err := c1.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: s.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			return a.Attributes["ApproximateNumberOfMessages"] == "0" && a.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
		}))
		// All of them in the dead-letter queue before the first receive:
		// a FIFO group's messages that arrive after one of its messages
		// was received (and held, for 600 s) would wait behind it, as they
		// do on SQS. A slow machine's mover can be mid-way when the
		// source is empty.
		poll.CheckFor(t, transferWait, func() error {
			a, err := c2.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
			if err != nil {
				t.Fatal(err)
			}
			if v := a.Attributes["ApproximateNumberOfMessages"]; v != fmt.Sprint(n) {
				return fmt.Errorf("%s of %d dead letters arrived in %s", v, n, dlq)
			}
			return nil
		})
		got := map[string]bool{}
		var handles []string
		poll.CheckFor(t, transferWait, func() error {
			out, err := c2.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: d.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 600,
				MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				id := aws.ToString(m.MessageId)
				if got[id] {
					t.Fatalf("%s received twice from %s", id, dlq)
				}
				got[id] = true
				handles = append(handles, aws.ToString(m.ReceiptHandle))
				if want, ok := sent[id]; !ok || aws.ToString(m.Body) != want {
					t.Fatalf("%s in %s: body %q, sent %q (%v)", id, dlq, aws.ToString(m.Body), want, ok)
				}
				if v := m.MessageAttributes["tenant"]; aws.ToString(v.StringValue) != "acme" {
					t.Fatalf("%s lost its attributes: %+v", id, m.MessageAttributes)
				}
				if rc := m.Attributes["ApproximateReceiveCount"]; rc != "2" {
					t.Fatalf("%s: receive count %s in the dead-letter queue, want 2 (one in the source)", id, rc)
				}
				if fifo && m.Attributes["MessageGroupId"] == "" {
					t.Fatalf("%s lost its group: %+v", id, m.Attributes)
				}
			}
			if len(got) < n {
				return fmt.Errorf("%d of %d dead letters in %s", len(got), n, dlq)
			}
			return nil
		})

		// The other half of the workflow: the dead-letter queue lists
		// its source on the other shard, and a redrive moves its
		// messages back there.
		srcs, err := c0.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: d.QueueUrl})
		if err != nil || len(srcs.QueueUrls) != 1 || srcs.QueueUrls[0] != aws.ToString(s.QueueUrl) {
			t.Fatalf("sources of %s: %+v, %v; want %s", dlq, srcs, err, aws.ToString(s.QueueUrl))
		}
		// It is a dead-letter queue to the operator surfaces too (the
		// admin API here; the alerts, metrics and advisor read the same
		// list), with its source on the other shard.
		resp, err := http.Get("http://" + nodes[0].HTTPAddr() + "/sluice/v1/queues/" + dlq)
		if err != nil {
			t.Fatal(err)
		}
		var aq api.Queue
		err = json.NewDecoder(resp.Body).Decode(&aq)
		_ = resp.Body.Close()
		if err != nil || !aq.IsDeadLetterQueue || len(aq.Sources) != 1 || aq.Sources[0] != src {
			t.Fatalf("admin API on %s: dead-letter queue %v, sources %v (%v); want one source, %s", dlq, aq.IsDeadLetterQueue, aq.Sources, err, src)
		}
		for _, h := range handles {
			if _, err := c2.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: d.QueueUrl, ReceiptHandle: aws.String(h)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c0.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn.Attributes["QueueArn"])}); err != nil {
			t.Fatalf("redrive of %s back to %s on another shard: %v", dlq, src, err)
		}
		back := map[string]bool{}
		poll.CheckFor(t, transferWait, func() error {
			out, err := c1.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: s.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				b := aws.ToString(m.Body)
				if back[b] {
					t.Fatalf("%q redriven twice into %s", b, src)
				}
				back[b] = true
				// A FIFO group's next message comes once this one is gone.
				if _, err := c1.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: s.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
			}
			if len(back) < n {
				return fmt.Errorf("%d of %d redriven into %s", len(back), n, src)
			}
			return nil
		})
		a, err := c2.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil || a.Attributes["ApproximateNumberOfMessages"] != "0" || a.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" {
			t.Fatalf("%s after the redrive: %v, %v", dlq, a, err)
		}
	}
}

// TestShardsAMQPBindAndDeadLetterElsewhere (ADR 0015 step 5, AMQP): an
// exchange on shard 0's AMQP server binds an SQS queue of another shard,
// publishes routed through it reach that queue (confirmed once stored
// there), and an AMQP queue's dead letters routed by its
// x-dead-letter-exchange to that queue move there as transfers. After the
// node leading shard 0 stops, the new leader restores the binding (its
// queue looked up on its shard) and routes through it again. Before, such
// a bind was refused (406), and a routed dead letter to a queue of another
// shard was dropped.
func TestShardsAMQPBindAndDeadLetterElsewhere(t *testing.T) {
	nodes, stop := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), transferTestBudget)
	defer cancel()
	remote := "paid-0"
	for i := 0; hashShard(remote, 3) == 0; i++ {
		remote = fmt.Sprintf("paid-%d", i)
	}
	c := shardClient(nodes[0])
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(remote)})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n *Node, exchange, key string, bodies ...string) {
		t.Helper()
		conn, err := amqp.Dial("amqp://guest:guest@" + n.AMQPAddr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		for _, b := range bodies {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(b)})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				t.Fatalf("publish %q to %s/%s: acked %v, %v", b, exchange, key, ok, err)
			}
		}
	}
	conn, err := amqp.Dial("amqp://guest:guest@" + nodes[1].AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("billing", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(remote, "paid", "billing", false, nil); err != nil {
		t.Fatalf("bind of %s (shard %d) to an exchange: %v", remote, hashShard(remote, 3), err)
	}
	if _, err := ch.QueueDeclare("invoices", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "billing", "x-dead-letter-routing-key": "paid"}); err != nil {
		t.Fatal(err)
	}
	publish(nodes[2], "billing", "paid", "routed-1", "routed-2")
	publish(nodes[0], "", "invoices", "rejected-1", "rejected-2")
	deliveries, err := ch.Consume("invoices", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case d := <-deliveries:
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no delivery from invoices")
		}
	}
	_ = conn.Close()

	receiveAll := func(n *Node, want ...string) {
		t.Helper()
		got := map[string]bool{}
		poll.CheckFor(t, transferWait, func() error {
			out, err := shardClient(n).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				b := aws.ToString(m.Body)
				if got[b] || !slices.Contains(want, b) {
					t.Fatalf("%s: %q unexpected (want %q once each, have %v)", remote, b, want, got)
				}
				got[b] = true
				if _, err := shardClient(n).DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) < len(want) {
				return fmt.Errorf("%d of %d in %s: %v", len(got), len(want), remote, got)
			}
			return nil
		})
	}
	receiveAll(nodes[2], "routed-1", "routed-2", "rejected-1", "rejected-2")

	// Shard 0's leader stops; the next one loads the topology and
	// restores the binding to the queue of the other shard.
	_, leader, _ := nodes[0].target(0)
	if err := stop(int(leader) - 1); err != nil {
		t.Fatalf("stopping node %d: %v", leader, err)
	}
	survivor := nodes[int(leader)%3]
	poll.CheckFor(t, 20*time.Second, poll.True("another node leads shard 0 and serves AMQP", func() bool {
		_, now, ok := survivor.target(0)
		return ok && now != leader && survivor.health().Status == "ok"
	}))
	publish(survivor, "billing", "paid", "after-failover")
	receiveAll(survivor, "after-failover")
}

// TestShardsDeadLettersWaitForARefusingQueue: dead letters bound for a
// dead-letter queue on another shard that refuses them (its
// RedriveAllowPolicy changed to denyAll after the source's RedrivePolicy
// was set) leave the source and wait, counted, on the source's shard —
// none lost, none in the dead-letter queue — and arrive once the queue
// allows the source again.
func TestShardsDeadLettersWaitForARefusingQueue(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), transferTestBudget)
	defer cancel()
	src, dlq := "", ""
	for i := 0; src == ""; i++ {
		s, d := fmt.Sprintf("jobs-%d", i), fmt.Sprintf("refusing-%d", i)
		if hashShard(s, 3) != hashShard(d, 3) {
			src, dlq = s, d
		}
	}
	c := shardClient(nodes[0])
	s, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(src), Attributes: map[string]string{"VisibilityTimeout": "0"}})
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
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: s.QueueUrl, Attributes: map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, arn.Attributes["QueueArn"])}}); err != nil {
		t.Fatal(err)
	}
	allow := func(policy string) {
		t.Helper()
		if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: d.QueueUrl, Attributes: map[string]string{"RedriveAllowPolicy": policy}}); err != nil {
			t.Fatal(err)
		}
	}
	allow(`{"redrivePermission":"denyAll"}`)
	poison := func(body string) {
		t.Helper()
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: s.QueueUrl, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	counts := func(url *string) (visible, inflight string) {
		t.Helper()
		a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		return a.Attributes["ApproximateNumberOfMessages"], a.Attributes["ApproximateNumberOfMessagesNotVisible"]
	}
	for i := range 5 {
		poison(fmt.Sprintf("refused-%d", i))
	}
	poll.CheckFor(t, 30*time.Second, poll.True("the source emptied into transfers", func() bool {
		if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: s.QueueUrl, MaxNumberOfMessages: 10}); err != nil {
			t.Fatal(err)
		}
		v, f := counts(s.QueueUrl)
		return v == "0" && f == "0"
	}))
	// Refused: in neither queue, counted as waiting on the source's shard.
	kSrc, _ := nodes[0].findQueue(src)
	_, leader, _ := nodes[0].target(kSrc)
	pending := func() int64 {
		for _, n := range nodes {
			if n.opts.Cluster.NodeID == leader {
				return n.transfersPending(kSrc)
			}
		}
		return -1
	}
	if v, f := counts(d.QueueUrl); v != "0" || f != "0" {
		t.Fatalf("%s refuses %s yet holds %s visible, %s in flight", dlq, src, v, f)
	}
	if n := pending(); n != 5 {
		t.Fatalf("%d transfers waiting on shard %d, want 5", n, kSrc)
	}
	// Allowed again, and one more dead letter: all six arrive, once each.
	allow(`{"redrivePermission":"allowAll"}`)
	poison("refused-5")
	got := map[string]bool{}
	poll.CheckFor(t, transferWait, func() error {
		_, _ = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: s.QueueUrl, MaxNumberOfMessages: 10})
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: d.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			b := aws.ToString(m.Body)
			if got[b] {
				t.Fatalf("%q twice in %s", b, dlq)
			}
			got[b] = true
		}
		if len(got) < 6 {
			return fmt.Errorf("%d of 6 dead letters in %s", len(got), dlq)
		}
		return nil
	})
	// The copies are receivable once imported; the transfers end just
	// after.
	poll.CheckFor(t, 10*time.Second, poll.True("no transfer waiting", func() bool { return pending() == 0 }))
}

// transfersPending is the transfer count of n's server for shard k (-1: n
// does not serve it).
func (n *Node) transfersPending(k int) int64 {
	n.mu.Lock()
	s := n.serving[k]
	n.mu.Unlock()
	if s == nil {
		return -1
	}
	return s.srv.Engine().TransfersPending()
}

// transferWait bounds a wait for transfers to arrive: beyond the mover's
// retries after failed imports (a target shard's leader moving, as the
// balancer moves leaderships right after a start: waits of 2, 4, 8 and
// 16 s, then 30 s), so that a slow machine (CI under -race) does not fail
// a test the mover would pass a few seconds later. Found in CI: 4 of 30
// dead letters after 30 s, then (with this wait) 21 of 30 after 90 s —
// most likely both a FIFO group held by a message the test had received
// before the rest of its group arrived (a mover slowed by hand reproduces
// that failure every time); TestShardsDeadLetterToAnotherShard now waits
// for all of them before receiving.
const transferWait = 90 * time.Second

// transferTestBudget bounds a whole transfer test's requests: above the
// sum of its polls (one of them may take transferWait), so a slow machine
// (the race detector on two loaded cores: a CI run ran out of the 90 s it
// had) fails on a poll that names what it waited for, not on a request's
// context deadline.
const transferTestBudget = 5 * time.Minute
