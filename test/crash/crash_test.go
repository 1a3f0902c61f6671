package crash

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Environment knobs. `make crash` sets SLUICE_CRASH_ITERATIONS=200.
const (
	envIterations = "SLUICE_CRASH_ITERATIONS" // kills per subtest (default 20)
	envSeed       = "SLUICE_CRASH_SEED"       // reproduce a run's kill timings
)

const (
	producers  = 3
	consumers  = 3
	visibility = 4 * time.Second // receive VisibilityTimeout
	bodyPad    = 200             // bytes of each body
)

// TestMain builds the server once and hands its path to the tests through
// SLUICE_BIN (so a prebuilt binary can be passed the same way).
func TestMain(m *testing.M) { os.Exit(Main(m, "sluice-crash-bin-")) }

// TestCrash kills the server with SIGKILL at random moments under load,
// restarts it on the same data directory, and then checks by message id that
//
//	(a) every send the client saw acknowledged is delivered (lost = 0),
//	(b) no message is delivered by a receive begun after its delete was
//	    acknowledged (resurrected = 0),
//	(c) nothing is delivered that was never sent (unexpected = 0).
//
// Duplicates are allowed (at-least-once) and only counted.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the server binary for tens of seconds")
	}
	iterations := 20
	if s := os.Getenv(envIterations); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envIterations, s)
		}
		iterations = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		seed = n
	}
	t.Logf("%s=%d %s=%d", envIterations, iterations, envSeed, seed)
	t.Run("standard", func(t *testing.T) { runCrash(t, false, iterations, seed) })
	t.Run("fifo", func(t *testing.T) { runCrash(t, true, iterations, seed+1) })
}

// incarnation is one life of the server process and the client bound to it.
type incarnation struct {
	srv      *Server
	client   *sqs.Client
	queueURL string
	dead     chan struct{} // closed just before the process is killed
}

func (inc *incarnation) Dead() <-chan struct{} { return inc.dead }

func newClient(url string) *sqs.Client {
	return NewClient(url, "crash", producers+consumers+2, 30*time.Second)
}

func runCrash(t *testing.T, fifo bool, iterations int, seed uint64) {
	bin := Binary(t)
	rng := rand.New(rand.NewPCG(seed, 0x5111ce))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	failf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nserver log tail:\n%s", append(args, Tail(dir))...)
	}

	name := "crash"
	attrs := map[string]string{}
	if fifo {
		name = "crash.fifo"
		attrs["FifoQueue"] = "true"
	}
	start := func() *incarnation {
		t.Helper()
		srv, err := Start(ctx, bin, dir, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		inc := &incarnation{srv: srv, client: newClient(srv.URL()), dead: make(chan struct{})}
		out, err := inc.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			_ = srv.Kill()
			failf("GetQueueUrl %s after restart: %v", name, err)
		}
		inc.queueURL = aws.ToString(out.QueueUrl)
		return inc
	}

	// First start: create the queue.
	srv, err := Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first := newClient(srv.URL())
	if _, err := first.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs}); err != nil {
		_ = srv.Kill()
		failf("CreateQueue: %v", err)
	}
	_ = srv.Kill() // the queue itself must survive a crash too
	inc := start()
	cl := NewLives[*incarnation]()
	cl.Set(inc)
	defer func() {
		if cur := cl.cur; cur != nil {
			if err := cur.srv.Stop(10 * time.Second); err != nil {
				t.Logf("shutdown: %v", err)
			}
		}
	}()

	tr := newTracker(fmt.Sprintf("%x", seed&0xffffff))
	produceCtx, stopProducers := context.WithCancel(ctx)
	consumeCtx, stopConsumers := context.WithCancel(ctx)
	var pwg, cwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			produce(produceCtx, cl, tr, p, fifo)
		}()
	}
	for range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			consume(consumeCtx, cl, tr)
		}()
	}
	stopAll := func() {
		stopProducers()
		stopConsumers()
		pwg.Wait()
		cwg.Wait()
	}

	began := time.Now()
	var downtime time.Duration
	for i := range iterations {
		load := time.Duration(50+rng.IntN(651)) * time.Millisecond
		timer := time.NewTimer(load)
		select {
		case <-timer.C:
		case <-ctx.Done():
			stopAll()
			t.Fatal(ctx.Err())
		}
		old := cl.cur
		cl.Set(nil)
		close(old.dead)
		if err := old.srv.Kill(); err != nil {
			stopAll()
			t.Fatalf("iteration %d: kill: %v", i, err)
		}
		CloseIdle(old.client)
		down := time.Now()
		inc := start()
		downtime += time.Since(down)
		cl.Set(inc)
	}
	stopProducers()
	pwg.Wait()
	t.Logf("%d kills in %v (down %v in all, mean %v per restart); acked sends %d",
		iterations, time.Since(began).Round(time.Millisecond), downtime.Round(time.Millisecond),
		(downtime / time.Duration(iterations)).Round(time.Millisecond), tr.ackedCount())

	// Drain: every acknowledged message must be received and settled, and the
	// broker's counters must show the queue empty (messages whose delete was
	// sent but not acknowledged come back after their visibility timeout).
	drainDeadline := time.Now().Add(60*time.Second + 3*visibility)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	var lastAttrs string
	for {
		pending := tr.unsettled()
		if pending == 0 {
			empty, desc, err := queueEmpty(ctx, cl.cur)
			lastAttrs = desc
			if err != nil {
				lastAttrs = err.Error()
			}
			if empty {
				break
			}
		}
		if time.Now().After(drainDeadline) {
			t.Logf("drain deadline passed with %d acknowledged messages unsettled; queue: %s", pending, lastAttrs)
			break
		}
		<-poll.C
	}
	stopConsumers()
	cwg.Wait()

	rep := tr.report()
	t.Logf("sent attempted %d, acknowledged %d; deliveries %d, duplicates %d; delete acks %d (%d too late to count); live errors %v",
		rep.attempted, rep.acked, rep.deliveries, rep.duplicates, rep.deleteAcks, rep.lateDeleteAcks, rep.liveErrors)
	if fifo {
		t.Logf("FIFO first deliveries out of group order: %d", rep.fifoOrderViolations)
	}
	if len(rep.lost) > 0 {
		t.Errorf("lost = %d acknowledged messages never settled, e.g. %v", len(rep.lost), sample(rep.lost))
	}
	if len(rep.resurrected) > 0 {
		t.Errorf("resurrected = %d messages delivered after their delete was acknowledged, e.g. %v", len(rep.resurrected), sample(rep.resurrected))
	}
	if len(rep.unexpected) > 0 {
		t.Errorf("unexpected = %d bodies never sent, e.g. %q", len(rep.unexpected), sample(rep.unexpected))
	}
	if t.Failed() {
		t.Logf("server log tail:\n%s", Tail(dir))
	}
}

// queueEmpty reports whether the broker counts no visible, in-flight or
// delayed messages.
func queueEmpty(ctx context.Context, inc *incarnation) (bool, string, error) {
	out, err := inc.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(inc.queueURL),
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
	desc := fmt.Sprintf("visible=%s notVisible=%s delayed=%s",
		a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"], a["ApproximateNumberOfMessagesDelayed"])
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		if a[k] != "0" {
			return false, desc, nil
		}
	}
	return true, desc, nil
}

// produce sends batches of 10 unique bodies until ctx ends. Ids are
// recorded as attempted before the request and acknowledged only from a 200
// response's Successful list.
func produce(ctx context.Context, cl *Lives[*incarnation], tr *tracker, p int, fifo bool) {
	pad := strings.Repeat(".", bodyPad)
	seq := 0
	for ctx.Err() == nil {
		inc, err := cl.Current(ctx)
		if err != nil {
			return
		}
		ids := make([]string, 10)
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			seq++
			ids[i] = tr.id(p, seq)
			body := ids[i] + "|" + pad[:bodyPad-len(ids[i])-1]
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)}
			if fifo {
				entries[i].MessageGroupId = aws.String(fmt.Sprintf("g%d-%d", p, seq%4))
				entries[i].MessageDeduplicationId = aws.String(ids[i])
			}
		}
		tr.attempt(ids)
		out, err := inc.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(inc.queueURL), Entries: entries})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			tr.liveError(inc, "send", err)
			cl.AfterError(ctx, inc)
			continue
		}
		for _, s := range out.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(ids) {
				tr.liveError(inc, "send", fmt.Errorf("bad Successful Id %q", aws.ToString(s.Id)))
				continue
			}
			tr.ack(ids[i])
		}
		for _, f := range out.Failed {
			tr.liveError(inc, "send", fmt.Errorf("entry failed: %s", aws.ToString(f.Code)))
		}
	}
}

// consume receives, records and deletes at once. A delete that fails is not
// retried: its messages come back after the visibility timeout.
func consume(ctx context.Context, cl *Lives[*incarnation], tr *tracker) {
	for ctx.Err() == nil {
		inc, err := cl.Current(ctx)
		if err != nil {
			return
		}
		begun := tr.tick()
		out, err := inc.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(inc.queueURL),
			MaxNumberOfMessages: 10,
			WaitTimeSeconds:     1,
			VisibilityTimeout:   int32(visibility / time.Second),
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			tr.liveError(inc, "receive", err)
			cl.AfterError(ctx, inc)
			continue
		}
		if len(out.Messages) == 0 {
			continue
		}
		got := time.Now()
		ids := make([]string, len(out.Messages))
		entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			ids[i], _, _ = strings.Cut(aws.ToString(m.Body), "|")
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		tr.delivered(ids, begun)
		tr.deleteSent(ids)
		// The delete is not canceled with ctx: a received batch is deleted
		// even while the test is stopping, so the drain ends clean.
		dout, err := inc.client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(inc.queueURL), Entries: entries})
		if err != nil {
			tr.liveError(inc, "delete", err)
			cl.AfterError(ctx, inc)
			continue
		}
		for _, s := range dout.Successful {
			i, err := strconv.Atoi(aws.ToString(s.Id))
			if err != nil || i < 0 || i >= len(ids) {
				tr.liveError(inc, "delete", fmt.Errorf("bad Successful Id %q", aws.ToString(s.Id)))
				continue
			}
			tr.deleteAck(ids[i], got)
		}
		for _, f := range dout.Failed {
			tr.liveError(inc, "delete", fmt.Errorf("entry failed: %s", aws.ToString(f.Code)))
		}
	}
}

func sample(ids []string) []string {
	sort.Strings(ids)
	return ids[:min(len(ids), 10)]
}

// errorsIsCanceled is true for the errors a request gets when its context
// ends.
func errorsIsCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// tracker is the client-side ledger: what was sent, acknowledged, delivered
// and deleted, in a logical clock that orders "delete acknowledged" before
// "receive begun".
type tracker struct {
	run   string
	clock atomic.Int64

	mu         sync.Mutex
	msgs       map[string]*msgState
	unexpected []string
	deliveries int
	duplicates int
	deleteAcks int
	lateAcks   int
	liveErrs   map[string]int
	// FIFO: highest seq first delivered per group (group = producer and seq%4)
	groupSeq    map[string]int
	fifoReorder int
}

type msgState struct {
	acked       bool
	received    int
	deleteSent  bool  // a delete was sent after the latest delivery
	deleteAckAt int64 // logical time of the first counted delete ack; 0 = none
	resurrected bool  // delivered by a receive begun after deleteAckAt
}

func newTracker(run string) *tracker {
	return &tracker{run: run, msgs: map[string]*msgState{}, liveErrs: map[string]int{}, groupSeq: map[string]int{}}
}

func (tr *tracker) id(p, seq int) string { return fmt.Sprintf("m-%s-%d-%07d", tr.run, p, seq) }

func (tr *tracker) tick() int64 { return tr.clock.Add(1) }

func (tr *tracker) attempt(ids []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, id := range ids {
		tr.msgs[id] = &msgState{}
	}
}

func (tr *tracker) ack(id string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.msgs[id].acked = true
}

func (tr *tracker) delivered(ids []string, begun int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, id := range ids {
		m := tr.msgs[id]
		if m == nil {
			tr.unexpected = append(tr.unexpected, id)
			continue
		}
		tr.deliveries++
		m.received++
		if m.received > 1 {
			tr.duplicates++
		} else {
			tr.checkGroupOrderLocked(id)
		}
		if m.deleteAckAt != 0 && begun > m.deleteAckAt {
			m.resurrected = true
		}
		m.deleteSent = false
	}
}

// checkGroupOrderLocked counts first deliveries that go backwards within a
// FIFO message group (ids are m-run-producer-seq, group is producer, seq%4).
// Redeliveries are not compared: SQS may redeliver an earlier message while
// a later one of its group is leased (docs/guarantees.md, "Ordering").
func (tr *tracker) checkGroupOrderLocked(id string) {
	parts := strings.Split(id, "-")
	if len(parts) != 4 {
		return
	}
	seq, err := strconv.Atoi(parts[3])
	if err != nil {
		return
	}
	g := parts[2] + "/" + strconv.Itoa(seq%4)
	if seq < tr.groupSeq[g] {
		tr.fifoReorder++
	} else {
		tr.groupSeq[g] = seq
	}
}

func (tr *tracker) deleteSent(ids []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, id := range ids {
		if m := tr.msgs[id]; m != nil {
			m.deleteSent = true
		}
	}
}

// deleteAck records a delete acknowledged for a delivery received at got. A
// standard queue acknowledges the delete of a stale receipt handle without
// deleting (reference §7), so an ack that arrives when the lease could have
// run out is not counted for the resurrection check.
func (tr *tracker) deleteAck(id string, got time.Time) {
	now := tr.tick()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	m := tr.msgs[id]
	if m == nil {
		return
	}
	tr.deleteAcks++
	if time.Since(got) > visibility/2 {
		tr.lateAcks++
		return
	}
	if m.deleteAckAt == 0 {
		m.deleteAckAt = now
	}
}

func (tr *tracker) liveError(inc *incarnation, op string, err error) {
	select {
	case <-inc.dead:
		return // expected: the server was killed under this request
	default:
	}
	if errorsIsCanceled(err) {
		return
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	tr.mu.Lock()
	tr.liveErrs[op+": "+msg]++
	tr.mu.Unlock()
}

func (tr *tracker) ackedCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, m := range tr.msgs {
		if m.acked {
			n++
		}
	}
	return n
}

// settled: an acknowledged message is settled once received and then
// deleted with an ack, or with a delete sent whose outcome is unknown and no
// delivery since.
func (m *msgState) settled() bool {
	return !m.acked || m.received > 0 && (m.deleteAckAt != 0 || m.deleteSent)
}

func (tr *tracker) unsettled() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, m := range tr.msgs {
		if !m.settled() {
			n++
		}
	}
	return n
}

type crashReport struct {
	attempted, acked              int
	deliveries, duplicates        int
	deleteAcks, lateDeleteAcks    int
	fifoOrderViolations           int
	lost, resurrected, unexpected []string
	liveErrors                    map[string]int
}

func (tr *tracker) report() crashReport {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := crashReport{
		attempted: len(tr.msgs), deliveries: tr.deliveries, duplicates: tr.duplicates,
		deleteAcks: tr.deleteAcks, lateDeleteAcks: tr.lateAcks, fifoOrderViolations: tr.fifoReorder,
		unexpected: append([]string(nil), tr.unexpected...), liveErrors: tr.liveErrs,
	}
	for id, m := range tr.msgs {
		if m.acked {
			r.acked++
		}
		if !m.settled() {
			r.lost = append(r.lost, id)
		}
		if m.resurrected {
			r.resurrected = append(r.resurrected, id)
		}
	}
	return r
}
