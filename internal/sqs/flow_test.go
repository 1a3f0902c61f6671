package sqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
)

// sendBatch sends n messages to url in one SendMessageBatch and fails
// the test unless every one is stored.
func sendBatch(t *testing.T, e *env, url *string, n int) {
	t.Helper()
	entries := make([]types.SendMessageBatchRequestEntry, n)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String("m")}
	}
	res, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: url, Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) != 0 || len(res.Successful) != n {
		t.Fatalf("batch: %d ok, %d failed", len(res.Successful), len(res.Failed))
	}
}

// Send back-pressure: sends to a queue nobody receives from are never
// slowed however deep it gets; once a receiver polls it, the backlog it
// found is the floor, and sends that take the backlog past the floor plus
// half the mark wait (and, with nobody draining, wait the whole bound), yet
// every one is stored and answered with success.
func TestSendBackpressureOnlyWithReceivers(t *testing.T) {
	e := newEnvWith(t, sluicesqs.Options{SendFlowBacklog: 20, SendFlowMaxWait: 10 * time.Millisecond})
	clk, eng, h, cli, ctx := e.clk, e.eng, e.h, e.cli, e.ctx
	out, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("pressed")})
	if err != nil {
		t.Fatal(err)
	}
	url := out.QueueUrl
	sendBatches := func(batches int) {
		t.Helper()
		for b := 0; b < batches; b++ {
			sendBatch(t, e, url, 10)
		}
		if _, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("one")}); err != nil {
			t.Fatal(err)
		}
	}

	// No receiver yet: 61 messages, three times the mark, unslowed.
	sendBatches(6)
	if st := h.SendFlowStats(); st != (sluicesqs.SendFlowStats{}) {
		t.Fatalf("stats %+v before any receive, want none", st)
	}

	// A receiver polls (and takes one message): the queue has active
	// receivers and a floor of 60. Sends that find at most 60 + 10
	// (half the mark) go on; the next two find 80 and 90 and wait; nobody
	// drains it, so each waits the whole bound, and still succeeds.
	if _, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, VisibilityTimeout: 600}); err != nil {
		t.Fatal(err)
	}
	sendBatches(3)
	st := h.SendFlowStats()
	if st.Throttled != 2 || st.TimedOut != 2 || st.ThrottledSeconds <= 0 {
		t.Fatalf("stats %+v, want the two sends past the floor plus half the mark slowed to the bound", st)
	}
	if n, _ := eng.VisibleHint("pressed"); n != 61+31-1 {
		t.Fatalf("visible = %d, want %d: every send stored", n, 61+31-1)
	}

	// Receivers gone quiet (a second on the clock without a receive):
	// sends are no longer slowed.
	clk.Advance(2 * time.Second)
	sendBatches(1)
	if got := h.SendFlowStats().Throttled; got != 2 {
		t.Fatalf("throttled = %d after the receivers went quiet, want still 2", got)
	}
}

// A send held by back-pressure goes on as soon as the receivers make the
// backlog smaller than it found it, well before the bound: a queue whose
// backlog is already shrinking (consumers back after an outage) slows
// its senders only to the receivers' pace.
func TestSendBackpressureReleasedByShrinkingBacklog(t *testing.T) {
	e := newEnvWith(t, sluicesqs.Options{SendFlowBacklog: 20, SendFlowMaxWait: sluicesqs.MaxSendFlowMaxWait})
	h, cli, ctx := e.h, e.cli, e.ctx
	out, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("draining")})
	if err != nil {
		t.Fatal(err)
	}
	url := out.QueueUrl
	// A backlog of 100 (five times the mark), then a receiver.
	for b := 0; b < 10; b++ {
		sendBatch(t, e, url, 10)
	}
	receive := func() {
		t.Helper()
		if _, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, VisibilityTimeout: 600}); err != nil {
			t.Fatal(err)
		}
	}
	receive()                // 90: the floor
	for b := 0; b < 2; b++ { // 110, not held: growth up to the floor + half the mark is
		sendBatch(t, e, url, 10)
	}
	if st := h.SendFlowStats(); st.Throttled != 0 {
		t.Fatalf("stats %+v: a send within half a mark of the floor was held", st)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("held")})
		sent <- err
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("the send to wait", func() bool { return h.SendFlowStats().Waiting == 1 }))
	receive() // 110 → 100: smaller than the send found it, far above the relief mark
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if st := h.SendFlowStats(); st.Throttled != 1 || st.TimedOut != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v: want one send held and released by the receive, not by the bound", st)
	}
}

// Receivers back after an outage find an old backlog (ten times the mark):
// while they shrink it, sends to the queue are never held, though the
// backlog stays far over the mark (a depth-only rule would hold each one
// here until the next receive or the bound).
func TestSendBackpressureSparesSendersWhileAnOldBacklogDrains(t *testing.T) {
	e := newEnvWith(t, sluicesqs.Options{SendFlowBacklog: 20, SendFlowMaxWait: sluicesqs.MaxSendFlowMaxWait})
	h, eng, cli, ctx := e.h, e.eng, e.cli, e.ctx
	out, err := cli.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("outage")})
	if err != nil {
		t.Fatal(err)
	}
	url := out.QueueUrl
	send := func(n int) { t.Helper(); sendBatch(t, e, url, n) }
	for b := 0; b < 20; b++ {
		send(10)
	}
	for round := 0; round < 15; round++ { // 200 → 125: receive 10, send 5
		r, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		if err != nil || len(r.Messages) != 10 {
			t.Fatalf("receive: %d messages, %v", len(r.Messages), err)
		}
		send(5)
	}
	if n, _ := eng.VisibleHint("outage"); n != 125 {
		t.Fatalf("visible = %d, want 125", n)
	}
	if st := h.SendFlowStats(); st.Throttled != 0 {
		t.Fatalf("stats %+v: sends held while the receivers shrank an old backlog", st)
	}
}
