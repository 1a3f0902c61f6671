package sqs_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/testlog"
)

// Dead-letter practice contract over SQS, through aws-sdk-go-v2
// (docs/dlq-contract.md).

// TestSluiceCrashLoopPolicy: with SluiceCrashLoopPolicy, leases that run
// out without a verdict dead-letter the message as consumer_crash before
// maxReceiveCount is reached (DLQ-110), and the reason is exposed as a
// Sluice system attribute.
func TestSluiceCrashLoopPolicy(t *testing.T) {
	e := newEnv(t)
	dlq := e.create("crash-dlq")
	pol := `{"limit":2,"windowSeconds":60}`
	q := e.create("crash", "VisibilityTimeout", "5", "SluiceCrashLoopPolicy", pol,
		"RedrivePolicy", `{"deadLetterTargetArn":"`+e.arn("crash-dlq")+`","maxReceiveCount":10}`)
	if got := e.attr(q, "SluiceCrashLoopPolicy"); got != pol {
		t.Fatalf("policy %s", got)
	}
	e.send(q, "segfaults the worker")
	for i := 0; i < 2; i++ {
		if len(e.receive(q).Messages) != 1 {
			t.Fatalf("receive %d", i)
		}
		e.clk.Advance(6 * time.Second) // the lease runs out: a crash
	}
	if n := e.attr(q, "ApproximateNumberOfMessages"); n != "0" {
		t.Fatalf("still in the source: %s", n)
	}
	// The scheduler's tick made the move: the copy reaches the DLQ once
	// the source's write is durable, on that goroutine, which may come
	// after the count above.
	var m []types.Message
	poll.CheckFor(t, 10*time.Second, func() error {
		if m = e.receive(dlq, sysNames("SluiceDeadLetterReason", "ApproximateReceiveCount")).Messages; len(m) == 0 {
			return errors.New("the dead letter has not reached the DLQ")
		}
		return nil
	})
	if len(m) != 1 || m[0].Attributes["SluiceDeadLetterReason"] != "consumer_crash" || m[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("dead letter %+v", m)
	}

	_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceCrashLoopPolicy": `{"limit":0}`}})
	wantAPIError(t, err, "InvalidParameterValue", 400, "limit must be between 1 and 1000.")
	_, err = e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceCrashLoopPolicy": `{"lmit":3}`}})
	wantAPIError(t, err, "InvalidParameterValue", 400, "must be a JSON object")
	_, err = e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceCrashLoopPolicy": ""}})
	if err != nil || e.attr(q, "SluiceCrashLoopPolicy") != "" {
		t.Fatalf("not removed: %v", err)
	}
}

// TestSluiceRetentionAndRequeueAttributes: a DLQ keeps messages up to 30
// days through SluiceRetentionPeriod while MessageRetentionPeriod keeps
// AWS's 14-day range (DLQ-80); SluiceRequeuePolicy round-trips (DLQ-10).
func TestSluiceRetentionAndRequeueAttributes(t *testing.T) {
	e := newEnv(t)
	q := e.create("dlq", "SluiceRetentionPeriod", "2592000", "SluiceRequeuePolicy", "tail")
	if got := e.attr(q, "SluiceRetentionPeriod"); got != "2592000" {
		t.Fatalf("SluiceRetentionPeriod %s", got)
	}
	if got := e.attr(q, "MessageRetentionPeriod"); got != "1209600" {
		t.Fatalf("MessageRetentionPeriod %s", got)
	}
	if got := e.attr(q, "SluiceRequeuePolicy"); got != "tail" {
		t.Fatalf("SluiceRequeuePolicy %s", got)
	}
	e.send(q, "kept for triage")
	e.clk.Advance(20 * 24 * time.Hour)
	if n := e.attr(q, "ApproximateNumberOfMessages"); n != "1" {
		t.Fatalf("expired before 30 days: %s", n)
	}
	e.clk.Advance(11 * 24 * time.Hour)
	if n := e.attr(q, "ApproximateNumberOfMessages"); n != "0" {
		t.Fatalf("kept past 30 days: %s", n)
	}
	for attr, v := range map[string]string{"SluiceRetentionPeriod": "2592001", "MessageRetentionPeriod": "1209601", "SluiceRequeuePolicy": "sideways"} {
		_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{attr: v}})
		if err == nil {
			t.Fatalf("%s=%s accepted", attr, v)
		}
	}
}

// TestFIFORetryAndDeadLetterThroughSDK: on a FIFO queue a retry backoff
// keeps the failed message at the head of its group with the group
// locked, so order holds (DLQ-33, DLQ-132); dead-lettering the head
// releases the group and the DLQ copy keeps its group (DLQ-131).
func TestFIFORetryAndDeadLetterThroughSDK(t *testing.T) {
	e := newEnv(t)
	dlq := e.create("poison.fifo", "FifoQueue", "true")
	q := e.create("orders.fifo", "FifoQueue", "true", "ContentBasedDeduplication", "true", "VisibilityTimeout", "5",
		"SluiceRetryPolicy", `{"strategy":"fixed","baseSeconds":10,"capSeconds":10}`,
		"RedrivePolicy", `{"deadLetterTargetArn":"`+e.arn("poison.fifo")+`","maxReceiveCount":2}`)
	grp := func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("customer-1") }
	e.send(q, "first", grp)
	e.send(q, "second", grp)
	m := e.receive(q, func(in *sqs.ReceiveMessageInput) { in.MaxNumberOfMessages = 1 }).Messages
	if len(m) != 1 || *m[0].Body != "first" {
		t.Fatalf("first receive %+v", m)
	}
	e.clk.Advance(6 * time.Second) // lease over; the 10 s backoff runs
	if got := e.receive(q).Messages; len(got) != 0 {
		t.Fatalf("group not locked during the backoff: got %q", *got[0].Body)
	}
	e.clk.Advance(10 * time.Second)
	m = e.receive(q, func(in *sqs.ReceiveMessageInput) { in.MaxNumberOfMessages = 1 }).Messages
	if len(m) != 1 || *m[0].Body != "first" {
		t.Fatalf("after the backoff %+v", m)
	}
	e.clk.Advance(16 * time.Second)
	// Received twice: the next receive moves it to the DLQ and releases
	// the group.
	m = e.receive(q).Messages
	if len(m) != 1 || *m[0].Body != "second" {
		t.Fatalf("group not released: %+v", m)
	}
	d := e.receive(dlq, func(in *sqs.ReceiveMessageInput) {
		in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{"MessageGroupId", "SluiceDeadLetterReason"}
	}).Messages
	if len(d) != 1 || *d[0].Body != "first" || d[0].Attributes["MessageGroupId"] != "customer-1" || d[0].Attributes["SluiceDeadLetterReason"] != "max_receives" {
		t.Fatalf("dead letter %+v", d)
	}
}

// TestMoveTaskStopsWhenRefillExceedsDrain: a redrive pauses when, over its
// safety window, more messages are dead-lettered into the DLQ than it
// moves out, even though none of them are the redriven ones; the
// FailureReason names the rule (DLQ-93 b).
func TestMoveTaskStopsWhenRefillExceedsDrain(t *testing.T) {
	e := newEnv(t)
	e.withDLQ("dlq", "live")
	e.create("parking")
	e.deadLetter("live", "dlq", bodies("old", 60)...)
	e.startMove("dlq", "parking", 1)
	live := e.url("live")
	var refilled time.Time // the simulated second that has had its refill
	e.stepUntil("the refill rule to pause the task", time.Second, func() bool {
		// Each simulated second, two new poison messages land in the
		// DLQ: received once, released, and moved by the next receive.
		if now := e.clk.Now(); !now.Equal(refilled) {
			refilled = now
			e.send(live, "new")
			e.send(live, "new")
			for _, m := range e.receive(live).Messages {
				if _, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{
					QueueUrl: &live, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
					t.Fatal(err)
				}
			}
			e.receive(live)
		}
		return e.latest("dlq").Status != nil && *e.latest("dlq").Status == "PAUSED"
	})
	tk := e.latest("dlq")
	if tk.FailureReason == nil || !strings.HasPrefix(*tk.FailureReason, "Sluice.RefillExceedsDrain:") {
		t.Fatalf("FailureReason %v", aws.ToString(tk.FailureReason))
	}
	// The admin API and CLI show the rule by name.
	ts, err := e.eng.MoveTasks("dlq")
	if err != nil || len(ts) != 1 || ts[0].StopRule != engine.StopRefill || ts[0].Refilled < 3 {
		t.Fatalf("task %+v %v", ts, err)
	}
	// A paused task keeps the source's one task slot: a new start is
	// refused until the operator resumes or cancels it, and SQS's
	// CancelMessageMoveTask cancels it like a RUNNING one (the cluster
	// fault harness's redriver relies on both).
	// The refusal keeps AWS's text and adds that the task is paused, why,
	// and how to free the slot.
	_, err = e.cli.StartMessageMoveTask(e.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(e.arn("dlq"))})
	if err == nil {
		t.Fatal("a move task started while a PAUSED one holds the source")
	}
	if msg := err.Error(); !strings.Contains(msg, "There is already a task running.") ||
		!strings.Contains(msg, "The active task is PAUSED (Sluice.RefillExceedsDrain:") || !strings.Contains(msg, "sluice dlq resume "+ts[0].ID) {
		t.Fatalf("the refusal while the task is PAUSED: %v", err)
	}
	if _, err := e.cancelMove(aws.ToString(tk.TaskHandle)); err != nil {
		t.Fatalf("cancelling the PAUSED task: %v", err)
	}
	if st := aws.ToString(e.latest("dlq").Status); st != "CANCELLED" {
		t.Fatalf("after cancelling the PAUSED task: %s", st)
	}
	e.startMove("dlq", "parking", 0)
}

// TestCreationWarnings: SQS accepts a DLQ shared by unrelated sources and
// a maxReceiveCount outside 3–10, and logs a warning for each (DLQ-151,
// DLQ-60); a sound configuration logs nothing.
func TestCreationWarnings(t *testing.T) {
	var logs testlog.Buffer
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sluicesqs.New(eng, sluicesqs.Options{Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	t.Cleanup(func() { srv.Close(); eng.Close() })
	e := newEnv(t)
	e.srv, e.eng, e.clk = srv, eng, clk
	e.cli = sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDSLUICETEST", SecretAccessKey: "secret"}, nil
		})})
	e.create("dlq", "MessageRetentionPeriod", "1209600")
	redrive := func(n int) string {
		return `{"deadLetterTargetArn":"` + e.arn("dlq") + `","maxReceiveCount":` + strconv.Itoa(n) + `}`
	}
	e.create("billing", "RedrivePolicy", redrive(5))
	if s := logs.String(); strings.Contains(s, "WARN") {
		t.Fatalf("warnings for a sound configuration: %s", s)
	}
	e.create("emails", "RedrivePolicy", redrive(50))
	s := logs.String()
	if !strings.Contains(s, "check=dlq_shared") || !strings.Contains(s, "check=max_receive_count") {
		t.Fatalf("no warnings: %s", s)
	}
}

// TestSluiceRetryBudget: over SQS, leases that run out count as retries:
// with SluiceRetryBudget 20, when 100 first receives all fail, only 20
// come back at once and 80 wait a budget window (DLQ-40).
func TestSluiceRetryBudget(t *testing.T) {
	e := newEnv(t)
	q := e.create("budget", "VisibilityTimeout", "5", "SluiceRetryBudget", "20")
	if got := e.attr(q, "SluiceRetryBudget"); got != "20" {
		t.Fatalf("attribute %q", got)
	}
	for i := 0; i < 100; i++ {
		e.send(q, "m")
	}
	for got := 0; got < 100; {
		got += len(e.receive(q).Messages)
	}
	e.clk.Advance(6 * time.Second)
	if v, d := e.attr(q, "ApproximateNumberOfMessages"), e.attr(q, "ApproximateNumberOfMessagesDelayed"); v != "20" || d != "80" {
		t.Fatalf("visible %s delayed %s, want 20 and 80", v, d)
	}
	_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceRetryBudget": "101"}})
	wantAPIError(t, err, "InvalidParameterValue", 400, "percentage")
}

// TestSluiceUnknownFailureAttribute: the unknown-failure policy is an
// engine setting; the SQS attribute sets and reads it (DLQ-20).
func TestSluiceUnknownFailureAttribute(t *testing.T) {
	e := newEnv(t)
	q := e.create("u", "SluiceUnknownFailure", "deadletter")
	if got := e.attr(q, "SluiceUnknownFailure"); got != "deadletter" {
		t.Fatalf("attribute %q", got)
	}
	_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceUnknownFailure": "retry"}})
	if err != nil || e.attr(q, "SluiceUnknownFailure") != "" {
		t.Fatalf("retry is the default and is not reported: %v", err)
	}
	_, err = e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceUnknownFailure": "maybe"}})
	wantAPIError(t, err, "InvalidParameterValue", 400, "Use retry or deadletter.")
}
