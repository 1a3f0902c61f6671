package clusterfaults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/test/faults"
)

// redriveLoad, with several shards, is a queue pair on two shards whose
// every message crosses both ways under the faults: its source's
// RedrivePolicy (maxReceiveCount 1) names a dead-letter queue on another
// shard; the consumer makes each message visible again at its first
// receive, so the next receive dead-letters it (a transfer to the DLQ's
// shard, ADR 0015 step 5); a redriver starts a move task from the DLQ
// every two seconds, through a random node (a transfer back, each copy a
// new message with a fresh receive count); the consumer deletes a
// message it has seen before. The faults.Checker holds a DLQ terminal
// and a message's MessageId fixed, so this load keeps its own account,
// by body: a body acknowledged by a send and never deleted once every
// queue has drained is lost — unless a delete of it was sent and never
// answered (a leader dying, a forward cut): that delete may have been
// applied, and such bodies are counted apart; a body received that no
// send carried is unexpected. Duplicates are allowed (at-least-once), and a body may go
// round more than once (a lost delete, a lease a failover forgot). A
// task a safety rule pauses (a lost delete brings a redriven copy back,
// dead-lettered again) is cancelled and the next one started.
type redriveLoad struct {
	w *workload // for pick, note, queuesEmpty, the error summary and the DLQ's ARN (Main: source, DLQ: DLQ)

	mu       sync.Mutex
	sent     map[string]bool     // body → acknowledged (false: attempted only)
	seen     map[string]bool     // body → received once
	deleted  map[string]bool     // body → a delete of it acknowledged
	tried    map[string]bool     // body → a delete of it sent and not answered (it may have been applied)
	unknown  []string            // bodies received that no send carried
	trace    map[string][]string // body → what happened to it, for diagnose
	returned atomic.Int64        // second receives of a body: the redriven copy (or a lost delete's)
	tasks    atomic.Int64        // move tasks started
	paused   atomic.Int64        // tasks a safety rule paused, cancelled by the redriver

	prodCtx, consCtx      context.Context
	stopProd, stopCons    context.CancelFunc
	prodDone, consDone    sync.WaitGroup
	attempts, acks, recvs atomic.Int64
}

// newRedriveLoad makes, with more than one shard, the pair cfd<k> (the
// source) and cfd<k>-graves on two shards through node 1 (the policy set
// once both exist, so that placement does not put the source with its
// DLQ); nil with one shard.
func newRedriveLoad(ctx context.Context, c *testCluster, run string, shards int) (*redriveLoad, error) {
	if shards <= 1 {
		return nil, nil
	}
	w := newWorkload(c, run+"d", false)
	for k := 1; k < 10000; k++ {
		w.Main, w.DLQ = fmt.Sprintf("cfd%d", k), fmt.Sprintf("cfd%d-graves", k)
		if c.shardOf(w.Main) != c.shardOf(w.DLQ) {
			break
		}
	}
	w.PolicyLater, w.MaxReceives = true, 1
	if err := w.createQueues(ctx); err != nil {
		return nil, err
	}
	return &redriveLoad{w: w, sent: map[string]bool{}, seen: map[string]bool{}, deleted: map[string]bool{}, tried: map[string]bool{}, trace: map[string][]string{}}, nil
}

// Start starts one producer, two consumers and the redriver.
func (r *redriveLoad) Start(ctx context.Context, rng *rand.Rand) {
	r.prodCtx, r.stopProd = context.WithCancel(ctx)
	r.consCtx, r.stopCons = context.WithCancel(ctx)
	r.prodDone.Go(func() { r.produce(r.prodCtx, rand.New(rand.NewPCG(rng.Uint64(), 1))) })
	for i := range 2 {
		r.consDone.Go(func() { r.consume(r.consCtx, rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))) })
	}
	r.consDone.Go(func() { r.redrive(r.consCtx, rand.New(rand.NewPCG(rng.Uint64(), 9))) })
}

// StopProducers stops the producer and waits for it.
func (r *redriveLoad) StopProducers() {
	r.stopProd()
	r.prodDone.Wait()
}

// StopConsumers stops the consumers and the redriver and waits for them.
func (r *redriveLoad) StopConsumers() {
	r.stopCons()
	r.consDone.Wait()
}

// produce sends one body about every 20 ms through a random node.
func (r *redriveLoad) produce(ctx context.Context, rng *rand.Rand) {
	for i := 0; ctx.Err() == nil; i++ {
		_, client, url, err := r.w.pick(ctx, rng, r.w.Main)
		if err != nil {
			return
		}
		body := fmt.Sprintf("%s-%d", r.w.Run, i)
		r.mu.Lock()
		r.sent[body] = false
		r.mu.Unlock()
		r.attempts.Add(1)
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			r.w.note("send", err)
		} else {
			r.mu.Lock()
			r.sent[body] = true
			r.mu.Unlock()
			r.acks.Add(1)
		}
		faults.SleepCtx(ctx, 20*time.Millisecond)
	}
}

// consume receives from the source through random nodes: a body seen for
// the first time is made visible again (its next receive dead-letters
// it), one seen before is deleted.
func (r *redriveLoad) consume(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		_, client, url, err := r.w.pick(ctx, rng, r.w.Main)
		if err != nil {
			return
		}
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, VisibilityTimeout: 5, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		if err != nil {
			r.w.note("receive", err)
			faults.SleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			r.recvs.Add(1)
			r.mu.Lock()
			_, carried := r.sent[body]
			again := r.seen[body]
			r.seen[body] = true
			if !carried {
				r.unknown = append(r.unknown, body)
			}
			shard, term, node, _ := servedBy(out.ResultMetadata)
			r.trace[body] = append(r.trace[body], fmt.Sprintf("%s recv id=%s count=%s shard=%d term=%d node=%d", time.Now().Format("15:04:05.000"),
				aws.ToString(m.MessageId), m.Attributes["ApproximateReceiveCount"], shard, term, node))
			r.mu.Unlock()
			if !again {
				_, err := client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
					ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				if err != nil {
					r.w.note("change visibility", err) // it comes back after its 5 s anyway
				}
				r.mu.Lock()
				r.trace[body] = append(r.trace[body], fmt.Sprintf("%s visible: %v", time.Now().Format("15:04:05.000"), err))
				r.mu.Unlock()
				continue
			}
			r.returned.Add(1)
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				// Unanswered is not undone: the delete may have been
				// applied (its answer lost to a fault), and then the
				// body never comes back.
				r.w.note("delete", err)
				r.mu.Lock()
				r.tried[body] = true
				r.trace[body] = append(r.trace[body], fmt.Sprintf("%s delete: %v", time.Now().Format("15:04:05.000"), err))
				r.mu.Unlock()
				continue
			}
			r.mu.Lock()
			r.deleted[body] = true
			r.mu.Unlock()
		}
	}
}

// redrive starts a move task from the DLQ (to its sources: the source
// queue) every two seconds through a random node; a task still running
// refuses the next, which is counted as an error like any other.
func (r *redriveLoad) redrive(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		faults.SleepCtx(ctx, 2*time.Second)
		_, client, _, err := r.w.pick(ctx, rng, r.w.DLQ)
		if err != nil {
			return
		}
		out, err := client.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(r.w.DLQARN)})
		if err != nil {
			r.w.note("start move task", err)
			r.cancelPaused(ctx, client)
			continue
		}
		shard, term, node, _ := servedBy(out.ResultMetadata)
		r.mu.Lock()
		r.trace["tasks"] = append(r.trace["tasks"], fmt.Sprintf("%s shard=%d term=%d node=%d", time.Now().Format("15:04:05.000"), shard, term, node))
		r.mu.Unlock()
		r.tasks.Add(1)
	}
}

// cancelPaused cancels the DLQ's newest move task if a safety rule
// paused it, as an operator would once the cause is known: here a delete
// lost to a fault brings a redriven copy back, and its next receive
// dead-letters it again within the safety stop's window (or the load's
// dead letters outrun the task: the refill rule) — the rules working as
// documented, not a violation. A paused task keeps the source's one
// task slot, so without this the bodies dead-lettered after the pause
// would stay in the DLQ and the drain would never end.
func (r *redriveLoad) cancelPaused(ctx context.Context, client *sqs.Client) {
	out, err := client.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(r.w.DLQARN), MaxResults: aws.Int32(1)})
	if err != nil || len(out.Results) == 0 || aws.ToString(out.Results[0].Status) != "PAUSED" {
		return
	}
	task := out.Results[0]
	if _, err := client.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: task.TaskHandle}); err != nil {
		r.w.note("cancel paused move task", err)
		return
	}
	r.paused.Add(1)
	r.mu.Lock()
	r.trace["tasks"] = append(r.trace["tasks"], fmt.Sprintf("%s cancelled a paused task (%s)", time.Now().Format("15:04:05.000"), aws.ToString(task.FailureReason)))
	r.mu.Unlock()
}

// drained reports whether every acknowledged body was deleted and both
// queues are empty (the main drain's condition, with the others).
func (r *redriveLoad) drained(ctx context.Context, rng *rand.Rand) (bool, string) {
	if n, amb := r.owed(); n > amb {
		return false, fmt.Sprintf("%s: %d acknowledged bodies not deleted yet (and %d whose unanswered delete may have been applied)", r.w.Main, n-amb, amb)
	}
	return r.w.queuesEmpty(ctx, rng)
}

// owed counts the acknowledged bodies no acknowledged delete has
// settled, and of those the ambiguous ones: a delete of each was sent and
// not answered, and may have been applied.
func (r *redriveLoad) owed() (owed, ambiguous int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for body, acked := range r.sent {
		if acked && !r.deleted[body] {
			owed++
			if r.tried[body] {
				ambiguous++
			}
		}
	}
	return owed, ambiguous
}

// finish reports the load and fails the test on a lost or unexpected body
// (held tells whether the drain ended with messages still queued: then
// what is owed is stuck rather than lost, still a failure of a healed
// cluster), and on a run in which no body came back through a redrive.
func (r *redriveLoad) finish(t testing.TB, ctx context.Context, held bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	moved := int64(0)
	if _, client, _, err := r.w.pick(ctx, rng, r.w.DLQ); err == nil {
		if out, err := client.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(r.w.DLQARN), MaxResults: aws.Int32(10)}); err == nil {
			for _, e := range out.Results {
				moved += e.ApproximateNumberOfMessagesMoved
			}
		}
	}
	owed, ambiguous := r.owed()
	owed -= ambiguous
	r.mu.Lock()
	unknown := append([]string(nil), r.unknown...)
	deleted := len(r.deleted)
	r.mu.Unlock()
	t.Logf("redrive (source %s on shard %d, DLQ %s on shard %d): sends attempted %d, acked %d; receives %d, second receives (redriven copies) %d; bodies deleted %d; move tasks started %d (the last ten moved %d; paused by a safety rule and cancelled %d); acknowledged and not deleted %d (and %d whose unanswered delete may have been applied), unexpected %d; errors: %s",
		r.w.Main, r.w.c.shardOf(r.w.Main), r.w.DLQ, r.w.c.shardOf(r.w.DLQ), r.attempts.Load(), r.acks.Load(),
		r.recvs.Load(), r.returned.Load(), deleted, r.tasks.Load(), moved, r.paused.Load(), owed, ambiguous, len(unknown), r.w.errorSummary())
	if owed > 0 {
		r.diagnose(t, ctx) // a failing run only: a passing one's log stays short
	}
	switch {
	case owed > 0 && held:
		t.Errorf("redrive: %d acknowledged bodies still queued after the drain (stuck between the shards, or in a move task)", owed)
	case owed > 0:
		t.Errorf("redrive: %d acknowledged bodies lost (never deleted, and both queues empty)", owed)
	}
	if len(unknown) > 0 {
		t.Errorf("redrive: %d bodies received that no send carried, e.g. %q", len(unknown), unknown[:min(len(unknown), 5)])
	}
	if r.acks.Load() == 0 || r.returned.Load() == 0 || r.tasks.Load() == 0 {
		t.Errorf("redrive: %d sends acknowledged, %d redriven copies received, %d move tasks: the cross-shard redrive went unchecked", r.acks.Load(), r.returned.Load(), r.tasks.Load())
	}
}

// diagnose logs, for a run that owes bodies, which (and whether the
// consumer saw each once), the move tasks the DLQ lists, and each node's
// transfer metrics (a body between the shards is counted there).
func (r *redriveLoad) diagnose(t testing.TB, ctx context.Context) {
	t.Helper()
	r.mu.Lock()
	var owed []string
	for body, acked := range r.sent {
		if acked && !r.deleted[body] {
			owed = append(owed, fmt.Sprintf("%s (seen %v, delete unanswered %v): %q", body, r.seen[body], r.tried[body], r.trace[body]))
		}
	}
	r.mu.Unlock()
	slices.Sort(owed)
	for _, o := range owed[:min(len(owed), 20)] {
		t.Logf("redrive: owed %s", o)
	}
	r.mu.Lock()
	t.Logf("redrive: tasks started at %q", r.trace["tasks"])
	r.mu.Unlock()
	rng := rand.New(rand.NewPCG(5, 6))
	if _, client, _, err := r.w.pick(ctx, rng, r.w.DLQ); err == nil {
		out, err := client.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(r.w.DLQARN), MaxResults: aws.Int32(10)})
		if err == nil {
			for _, e := range out.Results {
				t.Logf("redrive: task %s moved %d of %d, %s", aws.ToString(e.Status), e.ApproximateNumberOfMessagesMoved,
					aws.ToInt64(e.ApproximateNumberOfMessagesToMove), aws.ToString(e.FailureReason))
			}
		}
	}
	for _, m := range r.w.c.nodes {
		srv, _ := m.current()
		if srv == nil {
			continue
		}
		resp, err := http.Get(srv.URL() + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if (strings.Contains(line, "transfer") || strings.Contains(line, "dropped_total{queue=\"cfd") || strings.Contains(line, "dead_lettered_total{queue=\"cfd")) && !strings.HasPrefix(line, "#") {
				t.Logf("redrive: node %d: %s", m.id, line)
			}
		}
	}
}

// pairLoad is a load with its own account over a queue pair (redriveLoad,
// dlxLoad): drained reports its drain, pair its queues.
type pairLoad interface {
	drained(ctx context.Context, rng *rand.Rand) (bool, string)
	pair() *workload
}

func (r *redriveLoad) pair() *workload { return r.w }

// pairsDrained is also, and each of loads drained.
func pairsDrained(loads []pairLoad, also func(context.Context, *rand.Rand) (bool, string)) func(context.Context, *rand.Rand) (bool, string) {
	return func(ctx context.Context, rng *rand.Rand) (bool, string) {
		for _, l := range loads {
			if ok, desc := l.drained(ctx, rng); !ok {
				return false, desc
			}
		}
		return also(ctx, rng)
	}
}

// pairsHeld is held, or a queue of one of loads not empty.
func pairsHeld(loads []pairLoad, held func(context.Context, *rand.Rand) bool) func(context.Context, *rand.Rand) bool {
	return func(ctx context.Context, rng *rand.Rand) bool {
		for _, l := range loads {
			if empty, _ := l.pair().queuesEmpty(ctx, rng); !empty {
				return true
			}
		}
		return held(ctx, rng)
	}
}
