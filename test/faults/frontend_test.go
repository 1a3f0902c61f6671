package faults

import (
	"context"
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
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cockroachdb/pebble/v2/vfs"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/server"
)

// Front-end power-loss workload.
const (
	feStd, feFIFO, feAMQP = "fe", "fe.fifo", "fe-amqp"
	feLease               = 30 * time.Second  // every SQS receive's lease
	feExtend              = 600 * time.Second // ChangeMessageVisibility extension
	feMinAcks             = 5                 // per stream per round, before the cut
)

// feBroker is one life of the in-process broker.
type feBroker struct {
	srv     *server.Server
	stop    context.CancelFunc
	done    chan error
	client  *sqs.Client
	urls    map[string]string
	amqpURL string
}

func feStart(t *testing.T, fs vfs.FS) *feBroker {
	t.Helper()
	opts := server.DefaultOptions()
	// A disk-like 2 ms per sync (see slowSyncFS); the crash clone is
	// taken of fs itself.
	opts.DataDir, opts.StoreFS = "db", slowSyncFS{FS: fs, delay: 2 * time.Millisecond}
	opts.SQSListen, opts.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	srv, err := server.New(opts, quiet, nil)
	if err != nil {
		t.Fatalf("start on the crash image: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &feBroker{srv: srv, stop: stop, done: make(chan error, 1), urls: map[string]string{},
		client: newClient("http://"+srv.SQSAddr(), 5*time.Second), amqpURL: "amqp://guest:guest@" + srv.AMQPAddr() + "/"}
	go func() { b.done <- srv.Run(ctx) }()
	return b
}

func (b *feBroker) close(t *testing.T) {
	t.Helper()
	b.stop()
	if err := <-b.done; err != nil {
		t.Logf("broker run: %v", err)
	}
}

// feExt is an acknowledged visibility extension.
type feExt struct {
	begin time.Time // the request's start: the deadline is at least begin+feExtend
	ack   time.Time
	count int // the receive count of the lease extended
	epoch int
}

// fePendingDelete is a delete that got no answer before a power cut.
type fePendingDelete struct {
	ck         *Checker
	id, handle string
	lease      Lease
}

// feRun is the state the workload carries across broker lives.
type feRun struct {
	std, fifo, amqp *Checker
	moved           *Checker // sent to the DLQ, then moved back by move tasks (frontend_move_test.go)
	tasks           []feTask // move tasks of this round
	// lostLease: a delete retried after a cut with its old handle counts
	// as certain (TestFrontEndPowerLossLostLease); otherwise as attempted.
	lostLease bool

	mu         sync.Mutex
	exts       map[string]feExt // MessageId → acknowledged extension (a retried send may be stored twice under one body id)
	retrySend  map[string][]string
	delRetries []fePendingDelete
	liveErrs   []string          // errors from a live broker: must be none
	how        map[string]string // id → how its delete was made certain, for reports
	epoch      int
	errAfter   time.Time // errors answered from here on are the cut's

	seq                                         atomic.Int64
	stdAcks, fifoAcks, confirms                 atomic.Int64
	dedupRepeats, doubleDeletes, retriedDeletes atomic.Int64
	deletesOK, extensions, resent               atomic.Int64
	tasksStarted, tasksPaused, tasksCancelled   atomic.Int64
	quietHeld                                   atomic.Int64
	checkPauses                                 atomic.Int64 // running tasks feCheck paused
	movedRetried                                atomic.Int64 // retried deletes of moved messages
}

// liveError records err unless it was answered after the power cut began
// (the broker shutting down) or ctx ended.
func (r *feRun) liveError(ctx context.Context, op string, err error) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.errAfter.IsZero() && !time.Now().Before(r.errAfter) {
		return
	}
	r.liveErrs = append(r.liveErrs, fmt.Sprintf("epoch %d %s: %v", r.epoch, op, err))
}

// TestFrontEndPowerLoss runs the real server (internal/server: SQS handler
// and AMQP listener) in process on pebble's crash-simulating filesystem,
// drives it with aws-sdk-go-v2 and amqp091-go, and cuts the power at a
// random moment of every round (a crash clone that keeps only synced data,
// in half the rounds plus a random part of the rest). The broker restarts
// on the clone and its stored state is checked against every
// acknowledgement received before the cut:
//
//   - every acknowledged SendMessage(Batch) and every publisher confirm
//     (basic.ack) is stored exactly once, body and MessageId intact, FIFO
//     groups in send order;
//   - a FIFO send repeated concurrently with its deduplication id (as a
//     client retrying a timed-out send does) binds at its first OK;
//   - every acknowledged delete, including one sent twice concurrently with
//     the same handle and one retried after the cut with its old handle, is
//     gone;
//   - every acknowledged ChangeMessageVisibility extension is in force;
//   - a move task (DLQ back to its source, started over SQS) whose start
//     was acknowledged exists; one whose pause (admin API) was acknowledged
//     is PAUSED; one whose cancel was acknowledged is CANCELLING or
//     CANCELLED; the messages it moved are in exactly one of the queues;
//   - producers whose send got no answer send it again after the restart
//     (same body, same deduplication id); a standard queue may then hold it
//     twice, a FIFO queue may not.
//
// Every round must see at least feMinAcks acknowledgements of each kind
// before its cut, and a live broker must answer no request with an error.
//
// A delete retried after a cut only counts as attempted here: whether its
// OK must delete is TestFrontEndPowerLossLostLease's question.
func TestFrontEndPowerLoss(t *testing.T) {
	frontEndPowerLoss(t, budget(t, 0.10), false)
}

// TestFrontEndPowerLossLostLease is TestFrontEndPowerLoss where a delete
// retried after a power cut with its old receipt handle (no receive ran
// since) must delete when it is acknowledged, also when the cut lost the
// lease the handle names (docs/guarantees.md). (The copy the handle names,
// that is: see Checker.DeleteRetryAcked for a handle the cut broker issued
// after the image was taken.)
func TestFrontEndPowerLossLostLease(t *testing.T) {
	frontEndPowerLoss(t, budget(t, 0.05), true)
}

func frontEndPowerLoss(t *testing.T, load time.Duration, lostLease bool) {
	rng := rand.New(rand.NewPCG(seed(t), 0xfe))
	r := &feRun{lostLease: lostLease, std: NewChecker(false, 0), fifo: NewChecker(true, 0), amqp: NewChecker(false, 0), moved: NewChecker(false, 0),
		exts: map[string]feExt{}, how: map[string]string{}, retrySend: map[string][]string{}}
	mem := crashfs.New()
	b := feStart(t, mem)
	feSetup(t, b)

	var rounds, withUnsynced int
	var violations []string
	began := time.Now()
	for rounds < 6 || time.Since(began) < load {
		rounds++
		feURLs(t, b)
		ctx, stop := context.WithCancel(context.Background())
		before := [3]int64{r.stdAcks.Load(), r.fifoAcks.Load(), r.confirms.Load()}
		deletesBefore := r.deletesOK.Load()
		// Deletes left unanswered by the last cut, retried before any
		// consumer can receive again.
		feRetryDeletes(ctx, r, b)
		var wg sync.WaitGroup
		// Each worker's generator is drawn here: rng is not shared.
		rngs := make([]*rand.Rand, 6)
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
		}
		for _, f := range []func(){
			func() { feProduceStd(ctx, r, b, rngs[0]) },
			func() { feProduceFIFO(ctx, r, b, rngs[1]) },
			func() { feConsume(ctx, r, b, feStd, rngs[2]) },
			func() { feConsume(ctx, r, b, feStd, rngs[3]) },
			func() { feConsume(ctx, r, b, feFIFO, rngs[4]) },
			func() { fePublish(ctx, r, b) },
			func() { feAMQPConsume(ctx, r, b) },
			func() { feMoveTasks(ctx, r, b, rngs[5]) },
		} {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
		// Cut only once every stream has acknowledgements in this round,
		// then at a random moment.
		deadline := time.Now().Add(60 * time.Second)
		for r.stdAcks.Load()-before[0] < feMinAcks || r.fifoAcks.Load()-before[1] < feMinAcks ||
			r.confirms.Load()-before[2] < feMinAcks || r.deletesOK.Load() == deletesBefore {
			if time.Now().After(deadline) {
				stop()
				wg.Wait()
				b.close(t)
				t.Fatalf("round %d: fewer than %d acknowledgements per stream in 60 s (std %d, fifo %d, confirms %d, deletes %d); live errors %v",
					rounds, feMinAcks, r.stdAcks.Load()-before[0], r.fifoAcks.Load()-before[1], r.confirms.Load()-before[2],
					r.deletesOK.Load()-deletesBefore, head(r.liveErrs))
			}
			time.Sleep(5 * time.Millisecond)
		}
		SleepCtx(context.Background(), time.Duration(rng.IntN(600))*time.Millisecond)
		cfg := vfs.CrashCloneCfg{}
		if rng.IntN(2) == 0 {
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 1 + rng.IntN(99), RNG: rand.New(rand.NewPCG(rng.Uint64(), 7))}
			withUnsynced++
		}
		// One round in three ends quietly: the load stops, a consumer
		// receives a few messages and the power goes before it deletes
		// them (their leases are the broker's last, unsynced writes);
		// it deletes them with their old handles after the restart.
		quiet := rng.IntN(3) == 0
		if quiet {
			stop()
			wg.Wait()
			// Let what the clients' departure set off (AMQP requeues,
			// requests the server still ran) settle first.
			time.Sleep(100 * time.Millisecond)
			feQuietReceive(r, b)
		}
		r.mu.Lock()
		cut := time.Now()
		r.errAfter = cut
		r.mu.Unlock()
		crashed := mem.CrashClone(cfg)
		b.close(t) // in-flight requests fail: their outcome is unknown
		stop()
		wg.Wait()
		for _, ck := range []*Checker{r.std, r.fifo, r.amqp, r.moved} {
			ck.PowerCut(cut)
			ck.Fault()
		}
		// The old broker answered until it closed: extensions it
		// acknowledged after the cut are not in the image.
		r.mu.Lock()
		for mid, e := range r.exts {
			if !e.ack.Before(cut) {
				delete(r.exts, mid)
			}
		}
		r.mu.Unlock()

		mem = crashed
		b = feStart(t, mem)
		r.mu.Lock()
		r.epoch++
		r.errAfter = time.Time{}
		r.mu.Unlock()
		if v := feCheck(t, r, b, cut); v != "" {
			violations = append(violations, fmt.Sprintf("round %d (unsynced kept %d%%): %s", rounds, cfg.UnsyncedDataPercent, v))
		}
	}
	b.close(t)
	t.Logf("%d power cuts (%d keeping part of the unsynced data) in %v; acknowledged: %d SQS sends (std %d, FIFO %d), %d confirms, %d deletes (%d sent twice at once, %d retried after a cut, %d of them received just before a quiet cut), %d visibility extensions; FIFO sends repeated with their dedup id %d; sends retried after a cut %d; move tasks started %d (paused %d, cancelled %d; %d running at a restart, paused for the check); retried deletes of moved messages %d; violating rounds %d",
		rounds, withUnsynced, time.Since(began).Round(time.Millisecond), r.stdAcks.Load()+r.fifoAcks.Load(), r.stdAcks.Load(), r.fifoAcks.Load(),
		r.confirms.Load(), r.deletesOK.Load(), r.doubleDeletes.Load(), r.retriedDeletes.Load(), r.quietHeld.Load(), r.extensions.Load(),
		r.dedupRepeats.Load(), r.resent.Load(), r.tasksStarted.Load(), r.tasksPaused.Load(), r.tasksCancelled.Load(), r.checkPauses.Load(), r.movedRetried.Load(), len(violations))
	for _, v := range violations {
		t.Error(v)
	}
	// Deliveries, judged over the whole run (there is no drain, so
	// nothing is judged lost here): none after a certain delete, none of
	// a message never sent, no altered body, and FIFO first deliveries in
	// group order. AMQP deliveries carry no receive count, so only the
	// first two apply to them.
	for name, ck := range map[string]*Checker{"std": r.std, "fifo": r.fifo, "dlq and moved": r.moved, "amqp": r.amqp} {
		rep := ck.Report()
		bad := map[string][]string{"resurrected": r.explain(rep.Resurrected), "unexpected": rep.Unexpected}
		if ck != r.amqp {
			bad["corrupt"], bad["order"] = rep.Corrupt, rep.Order
		}
		for what, l := range bad {
			if len(l) > 0 {
				t.Errorf("%s deliveries: %d %s: %v", name, len(l), what, head(l))
			}
		}
	}
	for _, e := range head(r.liveErrs) {
		t.Errorf("error from a live broker: %s", e)
	}
	// The workload must have exercised every path it claims to check.
	for name, n := range map[string]int64{"FIFO dedup repeats": r.dedupRepeats.Load(), "double deletes": r.doubleDeletes.Load(),
		"visibility extensions": r.extensions.Load(), "move task starts": r.tasksStarted.Load()} {
		if n == 0 {
			t.Errorf("no %s acknowledged in %d rounds", name, rounds)
		}
	}
}

// feSetup creates the queues: over SQS a standard and a FIFO queue, over
// AMQP a durable queue.
func feSetup(t *testing.T, b *feBroker) {
	t.Helper()
	ctx := context.Background()
	// fe's dead-letter queue (a receive count it never reaches) holds
	// what the move tasks move back.
	redrive := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"1000"}`, feDLQArn)
	for _, q := range []struct {
		name  string
		attrs map[string]string
	}{{feDLQ, nil}, {feStd, map[string]string{"RedrivePolicy": redrive}}, {feFIFO, map[string]string{"FifoQueue": "true"}}} {
		if _, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.name), Attributes: q.attrs}); err != nil {
			t.Fatalf("create %s: %v", q.name, err)
		}
	}
	conn, err := amqp.Dial(b.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(feAMQP, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

// feURLs looks the queue URLs up on the current broker.
func feURLs(t *testing.T, b *feBroker) {
	t.Helper()
	for _, name := range []string{feStd, feFIFO, feDLQ} {
		out, err := b.client.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatalf("queue %s after power loss: %v", name, err)
		}
		b.urls[name] = aws.ToString(out.QueueUrl)
	}
}

func feBody(id string) string { return id + "|" + strings.Repeat("~", 80) }

// feProduceStd sends batches of 10 to the standard queue; first it sends
// again whatever got no answer before the last cut.
func feProduceStd(ctx context.Context, r *feRun, b *feBroker, rng *rand.Rand) {
	r.mu.Lock()
	retry := r.retrySend[feStd]
	delete(r.retrySend, feStd)
	r.mu.Unlock()
	for ctx.Err() == nil {
		var ids []string
		if len(retry) > 0 {
			ids, retry = retry[:min(10, len(retry))], retry[min(10, len(retry)):]
			for _, id := range ids {
				r.std.Retried(id)
				r.resent.Add(1)
				r.note(id, "sent again after a cut")
			}
		} else {
			for range 1 + rng.IntN(10) {
				id := fmt.Sprintf("s-%07d", r.seq.Add(1))
				ids = append(ids, id)
				r.std.Attempt(Send{ID: id, Body: feBody(id)}, time.Now())
			}
		}
		entries := make([]types.SendMessageBatchRequestEntry, len(ids))
		for i, id := range ids {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(feBody(id))}
		}
		out, err := b.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(b.urls[feStd]), Entries: entries})
		if err != nil {
			r.liveError(ctx, "std send", err)
			r.mu.Lock()
			r.retrySend[feStd] = append(append(r.retrySend[feStd], ids...), retry...)
			r.mu.Unlock()
			return
		}
		now := time.Now()
		for _, s := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(s.Id))
			r.std.Acked(ids[i], aws.ToString(s.MessageId), now)
			r.stdAcks.Add(1)
		}
		for _, f := range out.Failed {
			r.liveError(ctx, "std send entry", fmt.Errorf("%s %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
}

// feProduceFIFO sends one message at a time (so each group's send order
// is its store order) to four groups; 15% are sent twice at once with the
// same deduplication id, and a send that got no answer before a cut is sent
// again, with the same id, after the restart.
func feProduceFIFO(ctx context.Context, r *feRun, b *feBroker, rng *rand.Rand) {
	r.mu.Lock()
	retry := r.retrySend[feFIFO]
	delete(r.retrySend, feFIFO)
	r.mu.Unlock()
	send := func(id, group string) (string, error) {
		out, err := b.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(b.urls[feFIFO]), MessageBody: aws.String(feBody(id)),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(id)})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.MessageId), nil
	}
	for ctx.Err() == nil {
		var id, group string
		twice := false
		if len(retry) > 0 {
			id, retry = retry[0], retry[1:]
			group = "g" + strings.SplitN(id, "-", 3)[1]
			r.fifo.Retried(id)
			r.resent.Add(1)
			r.note(id, "sent again after a cut")
		} else {
			g := rng.IntN(4)
			seq := int(r.seq.Add(1))
			id, group = fmt.Sprintf("f-%d-%07d", g, seq), fmt.Sprintf("g%d", g)
			r.fifo.Attempt(Send{ID: id, Body: feBody(id), Group: group, Seq: seq}, time.Now())
			twice = rng.IntN(100) < 15
			if twice {
				r.note(id, "sent twice at once with one dedup id")
			}
		}
		n := 1
		if twice {
			n = 2
		}
		var wg sync.WaitGroup
		var failed atomic.Bool
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mid, err := send(id, group)
				if err != nil {
					r.liveError(ctx, "fifo send", err)
					failed.Store(true)
					return
				}
				r.fifo.Acked(id, mid, time.Now())
				r.fifoAcks.Add(1)
				if twice {
					r.dedupRepeats.Add(1)
				}
			}()
		}
		wg.Wait()
		if failed.Load() {
			r.mu.Lock()
			r.retrySend[feFIFO] = append(append(r.retrySend[feFIFO], id), retry...)
			r.mu.Unlock()
			return
		}
	}
}

// feConsume receives with 30 s leases. Per message: 10% get their
// visibility extended to 10 minutes and are kept; the rest are deleted in a
// batch, 10% of them also with a concurrent DeleteMessage of the same
// handle. Deletes that get no answer are retried after the restart.
func feConsume(ctx context.Context, r *feRun, b *feBroker, queue string, rng *rand.Rand) {
	ck := r.std
	if queue == feFIFO {
		ck = r.fifo
	}
	url := b.urls[queue]
	for ctx.Err() == nil {
		begin := time.Now()
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			VisibilityTimeout: int32(feLease / time.Second), MessageSystemAttributeNames: []types.MessageSystemAttributeName{"ApproximateReceiveCount"}})
		if err != nil {
			r.liveError(ctx, queue+" receive", err)
			return
		}
		end := time.Now()
		if len(out.Messages) == 0 {
			SleepCtx(ctx, 5*time.Millisecond)
			continue
		}
		var dels []types.DeleteMessageBatchRequestEntry
		var pend []fePendingDelete
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			id, _, _ := strings.Cut(body, "|")
			count, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			r.mu.Lock()
			epoch := r.epoch
			delete(r.exts, aws.ToString(m.MessageId)) // received again: the extension is spent
			r.mu.Unlock()
			ck := r.checkerFor(id, ck)
			ck.Received(Receipt{ID: id, Body: body, MessageID: aws.ToString(m.MessageId), Queue: queue, Begin: begin, End: end,
				Count: count, Visibility: feLease, Epoch: epoch})
			if queue == feStd && rng.IntN(100) < 10 {
				at := time.Now()
				_, err := b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
					ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: int32(feExtend / time.Second)})
				if err != nil {
					r.liveError(ctx, "extend visibility", err)
					return
				}
				r.mu.Lock()
				r.exts[aws.ToString(m.MessageId)] = feExt{begin: at, ack: time.Now(), count: count, epoch: epoch}
				r.mu.Unlock()
				r.extensions.Add(1)
				continue
			}
			ck.DeleteAttempted(id, Lease{count, epoch}, time.Now())
			dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(dels))), ReceiptHandle: m.ReceiptHandle})
			pend = append(pend, fePendingDelete{ck: ck, id: id, handle: aws.ToString(m.ReceiptHandle), lease: Lease{count, epoch}})
		}
		if len(dels) == 0 {
			continue
		}
		var wg sync.WaitGroup
		if rng.IntN(100) < 10 { // the same handle deleted twice at once
			p := pend[0]
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(p.handle)}); err != nil {
					r.liveError(ctx, queue+" second delete", err)
					return
				}
				p.ck.DeleteAcked(p.id, p.lease, r.epochNow(), time.Now())
				r.doubleDeletes.Add(1)
				r.note(p.id, "deleted twice at once")
			}()
		}
		dout, err := b.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: dels})
		wg.Wait()
		if err != nil {
			r.liveError(ctx, queue+" delete", err)
			if queue == feStd {
				r.mu.Lock()
				r.delRetries = append(r.delRetries, pend...)
				r.mu.Unlock()
			}
			return
		}
		now := time.Now()
		for _, s := range dout.Successful {
			i, _ := strconv.Atoi(aws.ToString(s.Id))
			pend[i].ck.DeleteAcked(pend[i].id, pend[i].lease, r.epochNow(), now)
			r.deletesOK.Add(1)
		}
		for _, f := range dout.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			pend[i].ck.DeleteFailed(pend[i].id, pend[i].lease)
			r.liveError(ctx, queue+" delete entry", fmt.Errorf("%s %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
}

// note records how id's delete was made, for violation reports.
func (r *feRun) note(id, how string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.how[id]; old != "" {
		how = old + "; " + how
	}
	r.how[id] = how
}

// explain annotates entries with how their messages' deletes were made.
// An entry is a body id, or a Report line that begins with one ("id: …").
func (r *feRun) explain(entries []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e
		id, _, _ := strings.Cut(e, ":")
		if h := r.how[id]; h != "" {
			out[i] += " (" + h + ")"
		}
	}
	return out
}

// checkerFor returns the checker of the message with body id id received
// from a queue whose own checker is def: messages a move task brought in
// from the dead-letter queue have their own.
func (r *feRun) checkerFor(id string, def *Checker) *Checker {
	if strings.HasPrefix(id, "d-") {
		return r.moved
	}
	return def
}

func (r *feRun) epochNow() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch
}

// feQuietReceive receives up to 10 messages from the standard queue on a
// broker with no other load, and leaves their deletes for after the power
// cut that follows at once.
func feQuietReceive(r *feRun, b *feBroker) {
	ctx := context.Background()
	begin := time.Now()
	out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.urls[feStd]), MaxNumberOfMessages: 10,
		VisibilityTimeout: int32(feLease / time.Second), MessageSystemAttributeNames: []types.MessageSystemAttributeName{"ApproximateReceiveCount"}})
	if err != nil {
		r.liveError(ctx, "quiet receive", err)
		return
	}
	end := time.Now()
	epoch := r.epochNow()
	for _, m := range out.Messages {
		body := aws.ToString(m.Body)
		id, _, _ := strings.Cut(body, "|")
		count, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
		ck := r.checkerFor(id, r.std)
		ck.Received(Receipt{ID: id, Body: body, MessageID: aws.ToString(m.MessageId), Queue: feStd, Begin: begin, End: end,
			Count: count, Visibility: feLease, Epoch: epoch})
		ck.DeleteAttempted(id, Lease{count, epoch}, time.Now())
		r.mu.Lock()
		delete(r.exts, aws.ToString(m.MessageId))
		r.delRetries = append(r.delRetries, fePendingDelete{ck: ck, id: id, handle: aws.ToString(m.ReceiptHandle), lease: Lease{count, epoch}})
		r.mu.Unlock()
		r.quietHeld.Add(1)
	}
}

// feRetryDeletes sends again, with their old handles, the standard queue's
// deletes that got no answer before the last cut. No consumer runs yet, so
// nothing can have received those messages in this life of the broker: an
// OK must delete (docs/guarantees.md: a handle whose lease a crash lost
// still deletes), a message a move task moved included.
func feRetryDeletes(ctx context.Context, r *feRun, b *feBroker) {
	r.mu.Lock()
	pend := r.delRetries
	r.delRetries = nil
	epoch := r.epoch
	r.mu.Unlock()
	for _, p := range pend {
		if _, err := b.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(b.urls[feStd]), ReceiptHandle: aws.String(p.handle)}); err != nil {
			r.liveError(ctx, "retried delete", err)
			continue
		}
		// Moved messages (d-…) too: a moved copy is receivable only once
		// its move is durable (docs/guarantees.md), so a cut cannot undo
		// the move of a copy a consumer received before it. (One received
		// from the cut broker after the image was taken may not be in it:
		// the checker then holds the delete to that copy alone.)
		if p.ck == r.moved {
			r.movedRetried.Add(1)
		}
		if r.lostLease {
			p.ck.DeleteRetryAcked(p.id, p.lease, epoch, time.Now())
		} else {
			p.ck.DeleteAttempted(p.id, p.lease, time.Now())
		}
		r.retriedDeletes.Add(1)
		r.note(p.id, "delete retried after a cut with its old handle")
	}
}

// fePublish publishes persistent messages with publisher confirms, up to
// 32 unconfirmed.
func fePublish(ctx context.Context, r *feRun, b *feBroker) {
	conn, err := amqp.Dial(b.amqpURL)
	if err != nil {
		r.liveError(ctx, "amqp dial", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		r.liveError(ctx, "amqp channel", err)
		return
	}
	type inflight struct {
		id string
		dc *amqp.DeferredConfirmation
	}
	window := make(chan inflight, 32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range window {
			ok, err := f.dc.WaitContext(ctx)
			if err != nil {
				return // the connection closed under the cut: unknown
			}
			if !ok {
				r.liveError(ctx, "amqp publish", errors.New(f.id+": basic.nack"))
				continue
			}
			r.amqp.Acked(f.id, "", time.Now())
			r.confirms.Add(1)
		}
	}()
	defer func() { close(window); <-done }()
	for ctx.Err() == nil {
		id := fmt.Sprintf("a-%07d", r.seq.Add(1))
		r.amqp.Attempt(Send{ID: id, Body: feBody(id)}, time.Now())
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", feAMQP, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(feBody(id))})
		if err != nil {
			r.liveError(ctx, "amqp publish", err)
			return
		}
		select {
		case window <- inflight{id, dc}:
		case <-ctx.Done():
			return
		}
	}
}

// feAMQPConsume consumes with manual acks. A basic.ack has no reply, so it
// only ever counts as a delete attempted.
func feAMQPConsume(ctx context.Context, r *feRun, b *feBroker) {
	conn, err := amqp.Dial(b.amqpURL)
	if err != nil {
		r.liveError(ctx, "amqp dial", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(20, 0, false)
	}
	if err != nil {
		r.liveError(ctx, "amqp channel", err)
		return
	}
	ds, err := ch.ConsumeWithContext(ctx, feAMQP, "", false, false, false, false, nil)
	if err != nil {
		r.liveError(ctx, "amqp consume", err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-ds:
			if !ok {
				return
			}
			now := time.Now()
			body := string(d.Body)
			id, _, _ := strings.Cut(body, "|")
			epoch := r.epochNow()
			r.amqp.Received(Receipt{ID: id, Body: body, Queue: feAMQP, Begin: now, End: now, Count: 1, Epoch: epoch})
			r.amqp.DeleteAttempted(id, Lease{1, epoch}, time.Now())
			if err := d.Ack(false); err != nil {
				return
			}
		}
	}
}

// feCheck lists every stored message of the restarted broker and checks it
// against the history up to the cut; it returns a description of the
// violations ("" if none).
//
// A move task the restart resumed moves messages while the queues are
// listed one by one: a message between its source and its destination
// (out of the DLQ, its copy not yet receivable in fe until its batch is
// synced) would be in neither listing. So the running tasks are first
// paused through the admin API, whose OK comes only once no batch is in
// progress, and resumed after the listing; their statuses are taken
// before that pause.
func feCheck(t *testing.T, r *feRun, b *feBroker, cut time.Time) string {
	t.Helper()
	eng := b.srv.Engine()
	statuses := feTaskStatuses(b)
	var bad []string
	var paused []string
	for id, st := range statuses {
		if st != "RUNNING" {
			continue
		}
		if err := feAdminPost(context.Background(), b, "/sluice/v1/tasks/"+id+"/pause"); err != nil {
			if !feTaskOver(b, id) { // one that ended meanwhile has no batch in progress
				bad = append(bad, fmt.Sprintf("move task %s: pause before the check: %v", id, err))
			}
			continue
		}
		paused = append(paused, id)
		r.checkPauses.Add(1)
	}
	defer func() {
		for _, id := range paused {
			if err := feAdminPost(context.Background(), b, "/sluice/v1/tasks/"+id+"/resume"); err != nil {
				t.Errorf("move task %s: resume after the check: %v", id, err)
			}
		}
	}()
	stored := map[*Checker][]Stored{}
	var views []engine.View
	for _, name := range eng.ListQueues("") {
		var cursor uint64
		for {
			page, err := eng.Browse(name, engine.Filter{}, cursor, 1000)
			if err != nil {
				t.Fatalf("browse %s: %v", name, err)
			}
			views = append(views, page.Messages...)
			if page.Next == 0 {
				break
			}
			cursor = page.Next
		}
	}
	r.mu.Lock()
	exts := r.exts
	r.mu.Unlock()
	for _, v := range views {
		body := string(v.Body)
		id, _, _ := strings.Cut(body, "|")
		ck := r.amqp
		switch {
		case strings.HasPrefix(id, "s-"):
			ck = r.std
		case strings.HasPrefix(id, "f-"):
			ck = r.fifo
		case strings.HasPrefix(id, "d-"):
			ck = r.moved
		}
		stored[ck] = append(stored[ck], Stored{ID: id, Body: body, MessageID: v.MessageID})
		if e, ok := exts[v.MessageID]; ok && e.ack.Before(cut) {
			if v.State != "inflight" || v.VisibleAt.Before(e.begin.Add(feExtend-DefaultSlack)) {
				bad = append(bad, fmt.Sprintf("%s: visibility of receive %d (epoch %d) extended to %v at %v (acknowledged before the cut), but stored %s until %v (receive count %d, last received %v)",
					id, e.count, e.epoch, feExtend, e.begin.Format(time.StampMilli), v.State, v.VisibleAt.Format(time.StampMilli), v.ReceiveCount, v.LastReceived.Format(time.StampMilli)))
			}
		}
	}
	for name, ck := range map[string]*Checker{"std": r.std, "fifo": r.fifo, "amqp": r.amqp, "dlq and moved": r.moved} {
		s := ck.CheckSnapshot(stored[ck])
		if s.Violations() > 0 {
			bad = append(bad, fmt.Sprintf("%s: lost %v duplicated %v resurrected %v unexpected %v corrupt %v order %v", name,
				r.explain(head(s.Lost)), head(s.Duplicated), r.explain(head(s.Resurrected)), head(s.Unexpected), head(s.Corrupt), head(s.Order)))
		}
	}
	bad = append(bad, feCheckTasks(t, r, statuses, cut)...)
	return strings.Join(head(bad), "; ")
}
