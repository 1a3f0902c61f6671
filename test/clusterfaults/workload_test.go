package clusterfaults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/test/crash"
	"github.com/sluicemq/sluice/test/faults"
)

// Workload shape (as test/faults, standard queues).
const (
	producers       = 3
	consumers       = 3
	leaseTime       = 2 * time.Second // VisibilityTimeout of every receive
	maxReceiveCount = 3
	bodyPad         = 160
	maxBacklog      = 3000
	maxBacklogFIFO  = 600 // a poison message holds its group for up to three leases
	groups          = 8   // FIFO message groups per producer
)

// newClient is an SDK client with one attempt per call (a retry would blur
// which sends were acknowledged) and the given request timeout.
func newClient(url string, timeout time.Duration) *sqs.Client {
	return crash.NewClient(url, "clusterfaults", producers+consumers+4, timeout)
}

// ackedDelete is an acknowledged delete whose certainty is decided after
// the run, when the monitor knows which terms the receive and the delete
// may have been served in (see workload.settleCertainty).
type ackedDelete struct {
	id           string
	lease        faults.Lease
	receiveBegin time.Time
	ackedAt      time.Time
}

// workload drives producers and consumers through every node of a cluster
// and records the history in a faults.Checker.
//
// Epochs: the single-node harness numbers broker incarnations, which the
// test itself creates by killing the broker. In a cluster an incarnation
// is a leader's term, and which term served a request is not known when
// it returns (a forwarded request may be served by a leader elected while
// it waited). So every delivery gets an epoch of its own, in the order the
// receives returned, which makes the Checker treat any two deliveries as
// possibly across a crash (a repeated receive count is then allowed;
// lease bounds are still checked whenever the count grew), and an
// acknowledged delete is made certain only after the run, when the
// monitor proves the receive and the delete were served in one term.
type workload struct {
	c       *testCluster
	ck      *faults.Checker
	run     string
	fifo    bool
	main    string
	dlq     string
	backlog int // producers pause while the Checker's backlog exceeds it

	epochs atomic.Int64 // the last delivery epoch handed out

	mu      sync.Mutex
	deletes []ackedDelete

	errs  sync.Map // "op: message" → *atomic.Int64
	nerrs atomic.Int64
	ops   atomic.Int64 // requests made

	stopProduce, stopConsume context.CancelFunc
	pwg, cwg                 sync.WaitGroup
}

func newWorkload(c *testCluster, run string, fifo bool) *workload {
	w := &workload{c: c, ck: faults.NewChecker(fifo, maxReceiveCount), run: run, fifo: fifo, main: "cf", dlq: "cf-dlq", backlog: maxBacklog}
	if fifo {
		w.main, w.dlq, w.backlog = "cf.fifo", "cf-dlq.fifo", maxBacklogFIFO
	}
	return w
}

// createQueues makes the DLQ and the source queue (with its redrive
// policy) through node 1.
func (w *workload) createQueues(ctx context.Context) error {
	_, client := w.c.nodes[0].current()
	attrs := map[string]string{}
	if w.fifo {
		attrs["FifoQueue"] = "true"
	}
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(w.dlq), Attributes: attrs})
	if err != nil {
		return fmt.Errorf("create %s: %w", w.dlq, err)
	}
	ga, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	policy, err := json.Marshal(map[string]any{"deadLetterTargetArn": ga.Attributes["QueueArn"], "maxReceiveCount": maxReceiveCount})
	if err != nil {
		return err
	}
	attrs["RedrivePolicy"] = string(policy)
	_, err = client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(w.main), Attributes: attrs})
	if err != nil {
		return fmt.Errorf("create %s: %w", w.main, err)
	}
	return nil
}

// pick returns a random node that is not killed, its client and its URL
// for queue. Paused and partitioned nodes are picked too: their clients
// see what real clients of such a node see.
func (w *workload) pick(ctx context.Context, rng *rand.Rand, queue string) (*member, *sqs.Client, string, error) {
	for ctx.Err() == nil {
		m := w.c.nodes[rng.IntN(len(w.c.nodes))]
		srv, client := m.current()
		if srv == nil {
			sleepCtx(ctx, time.Millisecond) // no spinning while nodes are down
			continue
		}
		u, err := m.queueURL(ctx, queue)
		if err != nil {
			w.note("url", err)
			sleepCtx(ctx, 20*time.Millisecond) // pacing before another node is tried
			continue
		}
		return m, client, u, nil
	}
	return nil, nil, "", ctx.Err()
}

// note counts an error by kind. Faults make errors expected; they are
// reported, not judged (only what was acknowledged is owed).
func (w *workload) note(op string, err error) {
	msg := err.Error()
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		op += fmt.Sprintf(" (HTTP %d)", re.HTTPStatusCode())
	}
	if i := strings.LastIndex(msg, "api error "); i >= 0 {
		msg = msg[i:]
	} else if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	msg = op + ": " + msg[:min(len(msg), 80)]
	v, _ := w.errs.LoadOrStore(msg, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	w.nerrs.Add(1)
}

// errorSummary lists the errors seen, most frequent kinds first (up to 12).
func (w *workload) errorSummary() string {
	type kv struct {
		k string
		n int64
	}
	var all []kv
	w.errs.Range(func(k, v any) bool {
		all = append(all, kv{k.(string), v.(*atomic.Int64).Load()})
		return true
	})
	if len(all) == 0 {
		return "none"
	}
	for i := range all { // a short insertion sort: few kinds
		for j := i; j > 0 && all[j].n > all[j-1].n; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	var parts []string
	for _, e := range all[:min(len(all), 12)] {
		parts = append(parts, fmt.Sprintf("%q×%d", e.k, e.n))
	}
	return strings.Join(parts, ", ")
}

func (w *workload) start(ctx context.Context, rng *rand.Rand) {
	pctx, stopP := context.WithCancel(ctx)
	cctx, stopC := context.WithCancel(ctx)
	w.stopProduce, w.stopConsume = stopP, stopC
	for p := range producers {
		w.pwg.Add(1)
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(p)))
		go func() { defer w.pwg.Done(); w.produce(pctx, p, r) }()
	}
	for c := range consumers {
		w.cwg.Add(1)
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(100+c)))
		go func() { defer w.cwg.Done(); w.consume(cctx, w.main, false, r) }()
	}
	w.cwg.Add(1)
	r := rand.New(rand.NewPCG(rng.Uint64(), 999))
	go func() { defer w.cwg.Done(); w.consume(cctx, w.dlq, true, r) }()
}

func (w *workload) stopProducers() {
	w.stopProduce()
	w.pwg.Wait()
}

func (w *workload) stopConsumers() {
	w.stopConsume()
	w.cwg.Wait()
}

// produce sends batches of 10 unique bodies "id|flags|padding" (flags P:
// poison, about 3%; on standard queues 5% are delayed 1 s; on FIFO queues
// each goes to one of the producer's groups, deduplicated by its id)
// through random nodes until ctx ends.
func (w *workload) produce(ctx context.Context, p int, rng *rand.Rand) {
	pad := strings.Repeat(".", bodyPad)
	seq := 0
	groupSeq := make([]int, groups)
	for ctx.Err() == nil {
		if w.ck.Backlog() > w.backlog {
			sleepCtx(ctx, 5*time.Millisecond) // pacing, not synchronisation
			continue
		}
		_, client, url, err := w.pick(ctx, rng, w.main)
		if err != nil {
			return
		}
		sends := make([]faults.Send, 10)
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			seq++
			id := fmt.Sprintf("m-%s-%d-%07d", w.run, p, seq)
			s := faults.Send{ID: id, Poison: rng.IntN(100) < 3}
			flags := "-"
			if s.Poison {
				flags = "P"
			}
			s.Body = id + "|" + flags + "|" + pad[:bodyPad-len(id)-3]
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(s.Body)}
			if w.fifo {
				g := rng.IntN(groups)
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
			w.ck.Attempt(s, now)
		}
		w.ops.Add(1)
		out, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.note("send", err)
			sleepCtx(ctx, 20*time.Millisecond) // pacing after an error
			continue
		}
		done := time.Now()
		for _, s := range out.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(sends) {
				w.note("send", fmt.Errorf("bad Successful Id %q", aws.ToString(s.Id)))
				continue
			}
			w.ck.Acked(sends[i].ID, aws.ToString(s.MessageId), done)
		}
		for _, f := range out.Failed {
			w.note("send", fmt.Errorf("entry failed: %s", aws.ToString(f.Code)))
		}
	}
}

// consume receives from queue through random nodes, records each delivery
// and settles it: deletes it, or releases it with ChangeMessageVisibility(0)
// (3% of messages, half the receives of poison ones), or leaves a poison
// message to its lease. In the DLQ everything is deleted. A delete that
// got no answer is sent again, with the same handles, through random
// nodes until one answers (or the test stops).
func (w *workload) consume(ctx context.Context, queue string, dlq bool, rng *rand.Rand) {
	for ctx.Err() == nil {
		_, client, url, err := w.pick(ctx, rng, queue)
		if err != nil {
			return
		}
		begin := time.Now()
		w.ops.Add(1)
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(leaseTime / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.note("receive", err)
			sleepCtx(ctx, 20*time.Millisecond) // pacing after an error
			continue
		}
		end := time.Now()
		var dels []types.DeleteMessageBatchRequestEntry
		var delIDs []string
		var delLeases []faults.Lease
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			id, rest, _ := strings.Cut(body, "|")
			count, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			epoch := int(w.epochs.Add(1))
			lease := faults.Lease{Count: count, Epoch: epoch}
			w.ck.Received(faults.Receipt{ID: id, Body: body, MessageID: aws.ToString(m.MessageId), Queue: queue, DLQ: dlq,
				Begin: begin, End: end, Count: count, Visibility: leaseTime, Epoch: epoch})
			poison := strings.HasPrefix(rest, "P")
			switch {
			case !dlq && poison && rng.IntN(2) == 0:
				continue // let the lease run out
			case !dlq && (poison || rng.IntN(100) < 3):
				w.ck.Released(id, lease, time.Now())
				w.ops.Add(1)
				_, err := client.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				if err != nil {
					w.note("release", err)
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
			w.ck.DeleteAttempted(id, delLeases[i], now)
		}
		// Not canceled with ctx: a received batch is deleted even while
		// the test stops, so the drain ends clean.
		w.ops.Add(1)
		dout, err := client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: dels})
		for err != nil {
			w.note("delete", err)
			sleepCtx(ctx, 20*time.Millisecond) // pacing before the retry
			if ctx.Err() != nil {
				return
			}
			if _, client, url, err = w.pick(ctx, rng, queue); err != nil {
				return
			}
			w.ops.Add(1)
			dout, err = client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: dels})
		}
		done := time.Now()
		for _, s := range dout.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(delIDs) {
				continue
			}
			// Epoch -1 matches no delivery: acknowledged (it settles the
			// message), certainty decided after the run.
			w.ck.DeleteAcked(delIDs[i], delLeases[i], -1, done)
			w.mu.Lock()
			w.deletes = append(w.deletes, ackedDelete{id: delIDs[i], lease: delLeases[i], receiveBegin: begin, ackedAt: done})
			w.mu.Unlock()
		}
		for _, f := range dout.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(delIDs) {
				w.ck.DeleteFailed(delIDs[i], delLeases[i])
			}
			w.note("delete", fmt.Errorf("entry failed: %s %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
}

// settleCertainty tells the Checker which acknowledged deletes were
// certain: those whose receive and delete the monitor proves were served
// in one term, by one leader's engine (termBefore the receive equals
// termAfter the acknowledgement). It returns how many of how many.
func (w *workload) settleCertainty(mo *monitor) (certain, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.deletes {
		lo := mo.termBefore(d.receiveBegin)
		hi, ok := mo.termAfter(d.ackedAt)
		if !ok || lo == 0 || lo != hi {
			continue
		}
		w.ck.DeleteAcked(d.id, d.lease, d.lease.Epoch, d.ackedAt)
		certain++
	}
	return certain, len(w.deletes)
}

// queuesEmpty reports whether the broker, asked through any live node,
// counts no message in either queue.
func (w *workload) queuesEmpty(ctx context.Context, rng *rand.Rand) (bool, string) {
	var desc []string
	empty := true
	for _, name := range []string{w.main, w.dlq} {
		_, client, url, err := w.pick(ctx, rng, name)
		if err != nil {
			return false, err.Error()
		}
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
				types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
			},
		})
		if err != nil {
			return false, err.Error()
		}
		a := out.Attributes
		desc = append(desc, fmt.Sprintf("%s visible=%s inflight=%s delayed=%s", name, a["ApproximateNumberOfMessages"],
			a["ApproximateNumberOfMessagesNotVisible"], a["ApproximateNumberOfMessagesDelayed"]))
		for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
			if a[k] != "0" {
				empty = false
			}
		}
	}
	return empty, strings.Join(desc, "; ")
}

// drain stops the producers, lets the consumers settle every acknowledged
// message (poison ones through the DLQ) until both queues are empty, then
// stops the consumers. It fails the test if that takes longer than limit.
func (w *workload) drain(t *testing.T, ctx context.Context, limit time.Duration) {
	t.Helper()
	w.stopProducers()
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(limit)
	for {
		pending := w.ck.Unsettled()
		var desc string
		if pending == 0 {
			var empty bool
			empty, desc = w.queuesEmpty(ctx, rng)
			if empty {
				break
			}
		}
		if time.Now().After(deadline) {
			if desc == "" {
				_, desc = w.queuesEmpty(ctx, rng)
			}
			t.Logf("drain deadline passed: %d acknowledged messages unsettled; %s\n%s", pending, desc,
				strings.Join(w.ck.UnsettledDetails(10), "\n"))
			break
		}
		sleepCtx(ctx, 100*time.Millisecond) // polling interval
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
	w.stopConsumers()
}
