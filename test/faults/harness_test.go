package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/test/crash"
)

// Environment knobs. `make faults` sets SLUICE_FAULTS_BUDGET=5m.
const (
	envBudget = "SLUICE_FAULTS_BUDGET" // total load time shared by the tests (default 90s)
	envSeed   = "SLUICE_FAULTS_SEED"   // reproduce a run's random choices
	envChild  = "SLUICE_FAULTS_CHILD"  // set in the disk-fault child process
)

const defaultBudget = 90 * time.Second

// TestMain builds the server once (as test/crash does) unless -short, and
// turns the test binary into the disk-fault broker when it is started as
// one (see diskfault_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runDiskChild(os.Args[1:]))
	}
	os.Exit(crash.Main(m, "sluice-faults-bin-"))
}

// budget returns this test's share of SLUICE_FAULTS_BUDGET: the time it
// spends under load and faults (drains and restarts come on top).
func budget(t *testing.T, share float64) time.Duration {
	t.Helper()
	if testing.Short() {
		t.Skip("fault tests run the broker under load for tens of seconds")
	}
	total := defaultBudget
	if s := os.Getenv(envBudget); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envBudget, s)
		}
		total = d
	}
	return time.Duration(float64(total) * share)
}

// seed returns the run's seed (logged, settable with SLUICE_FAULTS_SEED).
func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
		s = n
	}
	t.Logf("%s=%d", envSeed, s)
	return s
}

func binary(t *testing.T) string {
	t.Helper()
	return crash.Binary(t)
}

// Workload shape.
const (
	producers       = 3
	consumers       = 3
	leaseTime       = 2 * time.Second // VisibilityTimeout of every receive
	maxReceiveCount = 3
	bodyPad         = 160
)

// incarnation is one life of the broker and the client bound to it.
type incarnation struct {
	srv    *crash.Server
	client *sqs.Client
	urls   map[string]string // queue name → URL
	dead   chan struct{}     // closed just before the process is killed
	epoch  int               // crashes before this incarnation (Receipt.Epoch)
}

func (inc *incarnation) Dead() <-chan struct{} { return inc.dead }

// newClient is an SDK client with one attempt per call (a retry would blur
// which sends were acknowledged) and the given request timeout.
func newClient(url string, timeout time.Duration) *sqs.Client {
	return crash.NewClient(url, "faults", producers+consumers+4, timeout)
}

// workload drives producers and consumers against a cluster and records
// everything in a Checker. The source queue has a DLQ with
// maxReceiveCount 3; about 3% of messages are poison (never deleted, so
// they must reach the DLQ), 3% are released early with
// ChangeMessageVisibility(0), and on standard queues 5% are delayed 1 s.
type workload struct {
	fifo    bool
	run     string
	timeout time.Duration // client request timeout
	ck      *Checker
	cl      *crash.Lives[*incarnation]

	main, dlq string
	crashes   int // kills so far; the next incarnation's epoch
	backlog   int // producers pause while the Checker's backlog exceeds it

	errs     sync.Map // "op: message" → *atomic.Int64, errors on live incarnations
	liveErrs atomic.Int64
	sends    atomic.Int64 // acknowledged sends
	ops      atomic.Int64 // requests made

	stopProduce, stopConsume context.CancelFunc
	pwg, cwg                 sync.WaitGroup
}

func newWorkload(fifo bool, run string, timeout time.Duration) *workload {
	w := &workload{fifo: fifo, run: run, timeout: timeout, ck: NewChecker(fifo, maxReceiveCount), cl: crash.NewLives[*incarnation](),
		main: "faults", dlq: "faults-dlq", backlog: 5000}
	if fifo {
		w.main, w.dlq, w.backlog = "faults.fifo", "faults-dlq.fifo", 600
	}
	return w
}

// createQueues makes the DLQ and the source queue on a fresh broker.
func (w *workload) createQueues(ctx context.Context, client *sqs.Client) error {
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
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": ga.Attributes["QueueArn"], "maxReceiveCount": maxReceiveCount})
	main := map[string]string{"RedrivePolicy": string(policy)}
	for k, v := range attrs {
		main[k] = v
	}
	if _, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(w.main), Attributes: main}); err != nil {
		return fmt.Errorf("create %s: %w", w.main, err)
	}
	return nil
}

// connect makes an incarnation for srv, looking up the queue URLs.
func (w *workload) connect(ctx context.Context, srv *crash.Server) (*incarnation, error) {
	inc := &incarnation{srv: srv, client: newClient(srv.URL(), w.timeout), urls: map[string]string{}, dead: make(chan struct{}), epoch: w.crashes}
	for _, name := range []string{w.main, w.dlq} {
		out, err := inc.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("GetQueueUrl %s: %w", name, err)
		}
		inc.urls[name] = aws.ToString(out.QueueUrl)
	}
	return inc, nil
}

// down marks the current incarnation dead (before it is killed) and
// returns it; workers wait until the next set.
func (w *workload) down() *incarnation {
	old := w.cl.Get()
	w.cl.Set(nil)
	close(old.dead)
	return old
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

func (w *workload) liveError(inc *incarnation, op string, err error) {
	select {
	case <-inc.dead:
		return // the broker was killed under this request
	default:
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "api error "); i >= 0 {
		msg = msg[i:]
	} else if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	msg = op + ": " + msg[:min(len(msg), 100)]
	v, _ := w.errs.LoadOrStore(msg, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	w.liveErrs.Add(1)
}

// errorSummary lists the errors seen on live incarnations.
func (w *workload) errorSummary() string {
	var parts []string
	w.errs.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%q×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// produce sends batches of 10 unique bodies until ctx ends. A body is
// "id|flags|padding"; flags P = poison. FIFO: eight groups per producer.
func (w *workload) produce(ctx context.Context, p int, rng *rand.Rand) {
	pad := strings.Repeat(".", bodyPad)
	seq := 0
	groupSeq := make([]int, 8)
	for ctx.Err() == nil {
		if w.ck.Backlog() > w.backlog {
			sleepCtx(ctx, 5*time.Millisecond) // pacing, not synchronisation
			continue
		}
		inc, err := w.cl.Current(ctx)
		if err != nil {
			return
		}
		sends := make([]Send, 10)
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			seq++
			id := fmt.Sprintf("m-%s-%d-%07d", w.run, p, seq)
			s := Send{ID: id, Poison: rng.IntN(100) < 3}
			flags := "-"
			if s.Poison {
				flags = "P"
			}
			s.Body = id + "|" + flags + "|" + pad[:bodyPad-len(id)-3]
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(s.Body)}
			if w.fifo {
				g := rng.IntN(len(groupSeq))
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
		out, err := inc.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(inc.urls[w.main]), Entries: entries})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.liveError(inc, "send", err)
			w.cl.AfterError(ctx, inc)
			continue
		}
		done := time.Now()
		for _, s := range out.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(sends) {
				w.liveError(inc, "send", fmt.Errorf("bad Successful Id %q", aws.ToString(s.Id)))
				continue
			}
			w.ck.Acked(sends[i].ID, aws.ToString(s.MessageId), done)
			w.sends.Add(1)
		}
		for _, f := range out.Failed {
			w.liveError(inc, "send", fmt.Errorf("entry failed: %s", aws.ToString(f.Code)))
		}
	}
}

// consume receives from queue, records each delivery and settles it:
// deletes it, or releases it with ChangeMessageVisibility(0) (3% of
// messages, and half the receives of poison ones), or leaves a poison
// message to its lease. In the DLQ everything is deleted.
func (w *workload) consume(ctx context.Context, queue string, dlq bool, rng *rand.Rand) {
	for ctx.Err() == nil {
		inc, err := w.cl.Current(ctx)
		if err != nil {
			return
		}
		begin := time.Now()
		w.ops.Add(1)
		out, err := inc.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(inc.urls[queue]),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(leaseTime / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.liveError(inc, "receive", err)
			w.cl.AfterError(ctx, inc)
			continue
		}
		end := time.Now()
		var dels []types.DeleteMessageBatchRequestEntry
		var delIDs []string
		var delLeases []Lease
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			id, rest, _ := strings.Cut(body, "|")
			count, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			w.ck.Received(Receipt{ID: id, Body: body, MessageID: aws.ToString(m.MessageId), Queue: queue, DLQ: dlq,
				Begin: begin, End: end, Count: count, Visibility: leaseTime, Epoch: inc.epoch})
			poison := strings.HasPrefix(rest, "P")
			switch {
			case !dlq && poison && rng.IntN(2) == 0:
				continue // let the lease run out
			case !dlq && (poison || rng.IntN(100) < 3):
				w.ck.Released(id, Lease{count, inc.epoch}, time.Now())
				w.ops.Add(1)
				_, err := inc.client.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(inc.urls[queue]), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				if err != nil && !strings.Contains(strings.ToLower(err.Error()), "receipt handle") && !strings.Contains(err.Error(), "MessageNotInflight") {
					w.liveError(inc, "release", err)
				}
				continue
			}
			dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(dels))), ReceiptHandle: m.ReceiptHandle})
			delIDs = append(delIDs, id)
			delLeases = append(delLeases, Lease{count, inc.epoch})
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
		dout, err := inc.client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(inc.urls[queue]), Entries: dels})
		// A delete settles its message only when answered (Checker:
		// settled), so a delete the broker did not answer is sent again,
		// with the same handles, as an SDK retries it: on the next
		// incarnation if this one died. It gives up only when the test
		// stops.
		for err != nil {
			w.liveError(inc, "delete", err)
			w.cl.AfterError(ctx, inc)
			if ctx.Err() != nil {
				return
			}
			if inc, err = w.cl.Current(ctx); err != nil {
				return
			}
			w.ops.Add(1)
			dout, err = inc.client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(inc.urls[queue]), Entries: dels})
		}
		done := time.Now()
		for _, s := range dout.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(delIDs) {
				continue
			}
			w.ck.DeleteAcked(delIDs[i], delLeases[i], inc.epoch, done)
		}
		for _, f := range dout.Failed {
			// The delete settles nothing: the message must come back.
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(delIDs) {
				w.ck.DeleteFailed(delIDs[i], delLeases[i])
			}
			// FIFO refuses a delete whose lease has ended.
			if msg := aws.ToString(f.Message); !strings.Contains(strings.ToLower(msg), "receipt handle") {
				w.liveError(inc, "delete", fmt.Errorf("entry failed: %s %s", aws.ToString(f.Code), msg))
			}
		}
	}
}

// queuesEmpty reports whether the broker counts no message in either queue.
func (w *workload) queuesEmpty(ctx context.Context, inc *incarnation) (bool, string) {
	var desc []string
	empty := true
	for _, name := range []string{w.main, w.dlq} {
		out, err := inc.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(inc.urls[name]),
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
// stops the consumers. It polls the checker and the broker's counters.
func (w *workload) drain(t *testing.T, ctx context.Context) {
	t.Helper()
	w.stopProducers()
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		pending := w.ck.Unsettled()
		var desc string
		if pending == 0 {
			var empty bool
			empty, desc = w.queuesEmpty(ctx, w.cl.Get())
			if empty {
				break
			}
		}
		if time.Now().After(deadline) {
			if desc == "" {
				_, desc = w.queuesEmpty(ctx, w.cl.Get())
			}
			t.Logf("drain deadline passed: %d acknowledged messages unsettled; %s\n%s", pending, desc,
				strings.Join(w.ck.UnsettledDetails(10), "\n"))
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	w.stopConsumers()
}

// verdict logs the figures and fails the test on any violation.
func (w *workload) verdict(t *testing.T, extra string) Report {
	t.Helper()
	r := w.ck.Report()
	t.Logf("%s; requests %d; %s", r, w.ops.Load(), extra)
	t.Logf("errors on live incarnations: %s", w.errorSummary())
	if r.Violations() > 0 {
		t.Errorf("the checker found violations:\n%s", r.Details(10))
	}
	if r.Acked == 0 {
		t.Errorf("no send was acknowledged: the test proves nothing")
	}
	return r
}
