package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
)

// Workload shape, shared by the single-node harness (this package's tests)
// and the cluster harness (test/clusterfaults).
const (
	Producers       = 3
	Consumers       = 3
	LeaseTime       = 2 * time.Second // VisibilityTimeout of every receive
	MaxReceiveCount = 3
	BodyPad         = 160
	Groups          = 8 // FIFO message groups per producer
)

// Target is where one request goes: a client, the queue's URL through it,
// and the harness's own handle of the broker behind it (an incarnation, a
// cluster member).
type Target[N any] struct {
	Client *sqs.Client
	URL    string
	Node   N
}

// Hooks are what the harnesses do differently: where a request goes, what
// an error is worth, and how a delivery's epoch is decided.
type Hooks[N any] struct {
	// Pick returns where the next request on queue goes. It fails only
	// when ctx has ended, which ends the worker.
	Pick func(ctx context.Context, rng *rand.Rand, queue string) (Target[N], error)
	// Note records an error of op ("send", "receive", "release",
	// "delete") on a request made through t.
	Note func(t Target[N], op string, err error)
	// Pause waits after a failed request through t before the next one.
	Pause func(ctx context.Context, t Target[N])
	// Refused reports whether the message of a failed release (op
	// "release") or of a failed delete entry (op "delete") is an expected
	// refusal, which is not noted. Nil: every failure is noted.
	Refused func(op, msg string) bool
	// Epoch is the epoch (Receipt.Epoch, Lease.Epoch) of one delivery
	// received through t, whose receive response's metadata is meta; it
	// is asked once per delivery.
	Epoch func(t Target[N], meta middleware.Metadata) int
	// DeleteAcked records a delete acknowledged through t, of the
	// delivery received by the receive begun at receiveBegin; meta is the
	// delete response's metadata.
	DeleteAcked func(t Target[N], id string, l Lease, receiveBegin, at time.Time, meta middleware.Metadata)
}

// Workload drives producers and consumers against a broker and records
// everything in a Checker. The source queue has a DLQ with
// MaxReceiveCount; about 3% of messages are poison (never deleted, so they
// must reach the DLQ), 3% are released early with
// ChangeMessageVisibility(0), and on standard queues 5% are delayed 1 s.
// Set the exported fields, then Start.
type Workload[N any] struct {
	FIFO      bool
	Run       string // names the message ids of this run
	Main, DLQ string // queue names
	Backlog   int    // producers pause while the Checker's backlog exceeds it
	Ck        *Checker
	Hooks     Hooks[N]
	// PolicyLater creates the source queue without its RedrivePolicy and
	// sets it afterwards, so that a cluster with shards places each queue
	// by its own name (a source created with the policy is placed with
	// its DLQ) and the dead letters cross shards.
	PolicyLater bool
	// MaxReceives is the RedrivePolicy's maxReceiveCount CreateQueues
	// sets (0: MaxReceiveCount, which the Checker assumes).
	MaxReceives int
	// DLQARN is the DLQ's QueueArn, set by CreateQueues.
	DLQARN string

	Sends atomic.Int64 // acknowledged sends
	Ops   atomic.Int64 // requests made
	// Receives answered, how many of them empty, the messages they
	// delivered and the time they took (the drain's progress lines).
	Receives, EmptyReceives, Delivered, ReceiveNanos atomic.Int64

	stopProduce, stopConsume context.CancelFunc
	pwg, cwg                 sync.WaitGroup
}

// CreateQueues makes the DLQ and the source queue (with its redrive
// policy) through client.
func (w *Workload[N]) CreateQueues(ctx context.Context, client *sqs.Client) error {
	attrs := map[string]string{}
	if w.FIFO {
		attrs["FifoQueue"] = "true"
	}
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(w.DLQ), Attributes: attrs})
	if err != nil {
		return fmt.Errorf("create %s: %w", w.DLQ, err)
	}
	ga, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	w.DLQARN = ga.Attributes["QueueArn"]
	policy, err := json.Marshal(map[string]any{"deadLetterTargetArn": w.DLQARN, "maxReceiveCount": cmp.Or(w.MaxReceives, MaxReceiveCount)})
	if err != nil {
		return err
	}
	if w.PolicyLater {
		src, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(w.Main), Attributes: attrs})
		if err != nil {
			return fmt.Errorf("create %s: %w", w.Main, err)
		}
		if _, err := client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl,
			Attributes: map[string]string{"RedrivePolicy": string(policy)}}); err != nil {
			return fmt.Errorf("redrive policy of %s: %w", w.Main, err)
		}
		return nil
	}
	attrs["RedrivePolicy"] = string(policy)
	if _, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(w.Main), Attributes: attrs}); err != nil {
		return fmt.Errorf("create %s: %w", w.Main, err)
	}
	return nil
}

// Start starts the producers, the consumers of the source queue and the
// consumer of the DLQ, each with its own random source drawn from rng.
func (w *Workload[N]) Start(ctx context.Context, rng *rand.Rand) {
	pctx, stopP := context.WithCancel(ctx)
	cctx, stopC := context.WithCancel(ctx)
	w.stopProduce, w.stopConsume = stopP, stopC
	for p := range Producers {
		w.pwg.Add(1)
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(p)))
		go func() { defer w.pwg.Done(); w.produce(pctx, p, r) }()
	}
	for c := range Consumers {
		w.cwg.Add(1)
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(100+c)))
		go func() { defer w.cwg.Done(); w.consume(cctx, w.Main, false, r) }()
	}
	w.cwg.Add(1)
	r := rand.New(rand.NewPCG(rng.Uint64(), 999))
	go func() { defer w.cwg.Done(); w.consume(cctx, w.DLQ, true, r) }()
}

// StopProducers stops the producers and waits for them.
func (w *Workload[N]) StopProducers() {
	w.stopProduce()
	w.pwg.Wait()
}

// StopConsumers stops the consumers and waits for them.
func (w *Workload[N]) StopConsumers() {
	w.stopConsume()
	w.cwg.Wait()
}

// Body is a message body: "id|flags|padding" of BodyPad bytes; flags P
// marks a poison message.
func Body(id string, poison bool) string {
	flags := "-"
	if poison {
		flags = "P"
	}
	return id + "|" + flags + "|" + strings.Repeat(".", BodyPad-len(id)-3)
}

// ParseBody returns the id of a Body and whether it is poison.
func ParseBody(body string) (id string, poison bool) {
	id, rest, _ := strings.Cut(body, "|")
	return id, strings.HasPrefix(rest, "P")
}

// produce sends batches of 10 unique bodies until ctx ends. FIFO: each
// goes to one of the producer's Groups, deduplicated by its id.
func (w *Workload[N]) produce(ctx context.Context, p int, rng *rand.Rand) {
	seq := 0
	groupSeq := make([]int, Groups)
	for ctx.Err() == nil {
		if w.Ck.Backlog() > w.Backlog {
			SleepCtx(ctx, 5*time.Millisecond) // pacing, not synchronisation
			continue
		}
		t, err := w.Hooks.Pick(ctx, rng, w.Main)
		if err != nil {
			return
		}
		sends := make([]Send, 10)
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			seq++
			id := fmt.Sprintf("m-%s-%d-%07d", w.Run, p, seq)
			s := Send{ID: id, Poison: rng.IntN(100) < 3}
			s.Body = Body(id, s.Poison)
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(s.Body)}
			if w.FIFO {
				g := rng.IntN(Groups)
				groupSeq[g]++
				s.Group, s.Seq = fmt.Sprintf("g%d-%d", p, g), groupSeq[g]
				e.MessageGroupId = aws.String(s.Group)
				e.MessageDeduplicationId = aws.String(id)
			} else if rng.IntN(100) < 5 {
				s.Delay = time.Second
				e.DelaySeconds = 1
			}
			sends[i], entries[i] = s, e
		}
		now := time.Now()
		for _, s := range sends {
			w.Ck.Attempt(s, now)
		}
		w.Ops.Add(1)
		out, err := t.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(t.URL), Entries: entries})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.Hooks.Note(t, "send", err)
			w.Hooks.Pause(ctx, t)
			continue
		}
		done := time.Now()
		for _, s := range out.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(sends) {
				w.Hooks.Note(t, "send", fmt.Errorf("bad Successful Id %q", aws.ToString(s.Id)))
				continue
			}
			w.Ck.Acked(sends[i].ID, aws.ToString(s.MessageId), done)
			w.Sends.Add(1)
		}
		for _, f := range out.Failed {
			w.Hooks.Note(t, "send", fmt.Errorf("entry failed: %s", aws.ToString(f.Code)))
		}
	}
}

// refused reports whether Hooks.Refused excuses msg.
func (w *Workload[N]) refused(op, msg string) bool {
	return w.Hooks.Refused != nil && w.Hooks.Refused(op, msg)
}

// consume receives from queue, records each delivery and settles it:
// deletes it, or releases it with ChangeMessageVisibility(0) (3% of
// messages, and half the receives of poison ones), or leaves a poison
// message to its lease. In the DLQ everything is deleted.
func (w *Workload[N]) consume(ctx context.Context, queue string, dlq bool, rng *rand.Rand) {
	for ctx.Err() == nil {
		t, err := w.Hooks.Pick(ctx, rng, queue)
		if err != nil {
			return
		}
		begin := time.Now()
		w.Ops.Add(1)
		attrs := []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}
		if w.Ck.ClockSlack > 0 { // only a checker that judges it needs it
			attrs = append(attrs, types.MessageSystemAttributeNameSentTimestamp)
		}
		out, err := t.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(t.URL),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(LeaseTime / time.Second),
			MessageSystemAttributeNames: attrs,
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.Hooks.Note(t, "receive", err)
			w.Hooks.Pause(ctx, t)
			continue
		}
		end := time.Now()
		w.Receives.Add(1)
		w.ReceiveNanos.Add(int64(end.Sub(begin)))
		if len(out.Messages) == 0 {
			w.EmptyReceives.Add(1)
		}
		w.Delivered.Add(int64(len(out.Messages)))
		var dels []types.DeleteMessageBatchRequestEntry
		var delIDs []string
		var delLeases []Lease
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			id, poison := ParseBody(body)
			count, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			epoch := w.Hooks.Epoch(t, out.ResultMetadata)
			lease := Lease{Count: count, Epoch: epoch}
			var sent time.Time
			if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
				sent = time.UnixMilli(ms)
			}
			w.Ck.Received(Receipt{ID: id, Body: body, MessageID: aws.ToString(m.MessageId), Queue: queue, DLQ: dlq,
				Begin: begin, End: end, Count: count, Visibility: LeaseTime, Epoch: epoch, Sent: sent})
			switch {
			case !dlq && poison && rng.IntN(2) == 0:
				continue // let the lease run out
			case !dlq && (poison || rng.IntN(100) < 3):
				w.Ck.Released(id, lease, time.Now())
				w.Ops.Add(1)
				_, err := t.Client.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(t.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				if err != nil && !w.refused("release", err.Error()) {
					w.Hooks.Note(t, "release", err)
				}
				continue
			}
			dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(dels))), ReceiptHandle: m.ReceiptHandle})
			delIDs = append(delIDs, id)
			delLeases = append(delLeases, lease)
		}
		if len(dels) == 0 {
			continue
		}
		now := time.Now()
		for i, id := range delIDs {
			w.Ck.DeleteAttempted(id, delLeases[i], now)
		}
		// Not canceled with ctx: a received batch is deleted even while
		// the test stops, so the drain ends clean.
		w.Ops.Add(1)
		dout, err := t.Client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(t.URL), Entries: dels})
		// A delete settles its message only when answered (Checker:
		// settled), so a delete the broker did not answer is sent again,
		// with the same handles, as an SDK retries it: wherever Pick
		// sends it next. It gives up only when the test stops.
		for err != nil {
			w.Hooks.Note(t, "delete", err)
			w.Hooks.Pause(ctx, t)
			if ctx.Err() != nil {
				return
			}
			if t, err = w.Hooks.Pick(ctx, rng, queue); err != nil {
				return
			}
			w.Ops.Add(1)
			dout, err = t.Client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(t.URL), Entries: dels})
		}
		done := time.Now()
		for _, s := range dout.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(delIDs) {
				continue
			}
			w.Hooks.DeleteAcked(t, delIDs[i], delLeases[i], begin, done, dout.ResultMetadata)
		}
		for _, f := range dout.Failed {
			// The delete settles nothing: the message must come back.
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(delIDs) {
				w.Ck.DeleteFailed(delIDs[i], delLeases[i])
			}
			if msg := aws.ToString(f.Message); !w.refused("delete", msg) {
				w.Hooks.Note(t, "delete", fmt.Errorf("entry failed: %s %s", aws.ToString(f.Code), msg))
			}
		}
	}
}

// QueueCounts asks the broker, through client, for the counts of queue
// name at url: empty is true when it has no visible, in-flight or delayed
// message, and desc names the three counts.
func QueueCounts(ctx context.Context, client *sqs.Client, url, name string) (empty bool, desc string, err error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return false, "", err
	}
	a := out.Attributes
	desc = fmt.Sprintf("%s visible=%s inflight=%s delayed=%s", name, a["ApproximateNumberOfMessages"],
		a["ApproximateNumberOfMessagesNotVisible"], a["ApproximateNumberOfMessagesDelayed"])
	empty = true
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		if a[k] != "0" {
			empty = false
		}
	}
	return empty, desc, nil
}

// Drain stops the producers, lets the consumers settle every acknowledged
// message (poison ones through the DLQ) until the Checker has nothing
// unsettled and queuesEmpty reports both queues empty, then stops the
// consumers. It polls every 100 ms, or less often when the Checker is
// large (see below); past limit it logs what is left and stops waiting
// (the verdict then judges it). If the broker then still holds messages
// (held reports it; nil: it cannot be told), the Checker is told
// (DrainIncomplete: what is not settled is reported as lost or
// undrained); if the broker holds none, what is not settled is lost, and
// reported so. It reports whether the drain ended with messages still
// held.
func (w *Workload[N]) Drain(t testing.TB, ctx context.Context, limit time.Duration, queuesEmpty func() (bool, string), held func() bool) (stillHeld bool) {
	t.Helper()
	w.StopProducers()
	start := time.Now()
	deadline := start.Add(limit)
	// Progress every 10 s, so that a drain that runs out of time shows
	// whether the consumers were slow, stuck or making no requests.
	type progress struct{ ops, receives, empty, delivered, nanos int64 }
	sample := func() progress {
		return progress{w.Ops.Load(), w.Receives.Load(), w.EmptyReceives.Load(), w.Delivered.Load(), w.ReceiveNanos.Load()}
	}
	nextReport, last := start.Add(10*time.Second), sample()
	for {
		t0 := time.Now()
		pending := w.Ck.Unsettled()
		// Unsettled walks every message of the run under the Checker's
		// lock: 77 ms at 525,000 messages on the 2-core machine. Polled
		// every 100 ms it held that lock (which every consumer takes
		// for each delivery) and a CPU most of the time, and an 8-minute
		// cluster run drained at a tenth of its speed under faults and
		// ran out of its drain time (2026-11-29). So it takes at most
		// about 5 % of the time.
		pause := max(100*time.Millisecond, 20*time.Since(t0))
		var desc string
		if pending == 0 {
			var empty bool
			empty, desc = queuesEmpty()
			if empty {
				break
			}
		}
		if now := time.Now(); now.After(nextReport) {
			if desc == "" {
				_, desc = queuesEmpty()
			}
			p := sample()
			var mean time.Duration
			if n := p.receives - last.receives; n > 0 {
				mean = time.Duration((p.nanos - last.nanos) / n)
			}
			t.Logf("drain at %v: %d acknowledged messages unsettled; in the last 10 s %d requests, %d receives (%d empty, mean %v) delivering %d; %s",
				now.Sub(start).Round(time.Second), pending, p.ops-last.ops, p.receives-last.receives, p.empty-last.empty,
				mean.Round(time.Millisecond), p.delivered-last.delivered, desc)
			nextReport, last = now.Add(10*time.Second), p
		}
		if time.Now().After(deadline) {
			if desc == "" {
				_, desc = queuesEmpty()
			}
			t.Logf("drain deadline passed: %d acknowledged messages unsettled; %s\n%s", pending, desc,
				strings.Join(w.Ck.UnsettledDetails(10), "\n"))
			if stillHeld = held == nil || held(); stillHeld {
				w.Ck.DrainIncomplete()
			}
			break
		}
		if SleepCtx(ctx, pause); ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
	w.StopConsumers()
	return stillHeld
}

// ErrorKind is the key under which like errors are counted: op, then the
// end of err's message (from its last "api error ", else after its last
// ": "), cut to width bytes.
func ErrorKind(op string, err error, width int) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "api error "); i >= 0 {
		msg = msg[i:]
	} else if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return op + ": " + msg[:min(len(msg), width)]
}

// SleepCtx waits d (pacing or a random fault timing, not a
// synchronisation) or until ctx ends.
func SleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
