package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// moverRig is a shard leader whose dead-letter queues "far" and "far2"
// live on another shard that the test plays: its ShardCall records every
// import the mover asks for, at the fake clock's time, and answers as the
// test says.
type moverRig struct {
	t   *testing.T
	clk *clock.Fake
	s   *Server

	mu      sync.Mutex
	imports map[string][]time.Time // target → when each import call came
	answer  map[string]error       // target → what its engine answers (nil: takes them)
	down    error                  // not nil: no call arrives, the caller gets this
	far     bool                   // "far" lives on another shard

	// The mover's state (Options.MoverParked): whether it waits, when
	// its timer fires, and how many times it woke.
	parked   bool
	deadline time.Time
	wakes    int
}

// moverParked is the rig's Options.MoverParked.
func (r *moverRig) moverParked(parked bool, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parked = parked
	if parked {
		r.deadline = deadline
	} else {
		r.wakes++
	}
}

// waitMover waits until cond, read under the rig's lock, holds.
func (r *moverRig) waitMover(what string, cond func() bool) {
	r.t.Helper()
	poll.CheckFor(r.t, 20*time.Second, poll.True(what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return cond()
	}))
}

// errRefused is a target engine's refusal (ImportTransfers' ErrQueueFull).
var errRefused = fmt.Errorf("%w: dead-letter queue far", engine.ErrQueueFull)

func newMoverRig(t *testing.T) (*moverRig, func()) {
	return newMoverRigWith(t, func(*Options) {})
}

// newMoverRigWith is newMoverRig with edit applied to the server's
// options.
func newMoverRigWith(t *testing.T, edit func(*Options)) (*moverRig, func()) {
	r := &moverRig{t: t, clk: clock.NewFake(time.Now()), far: true,
		imports: map[string][]time.Time{}, answer: map[string]error{"far": errRefused}}
	o := DefaultOptions()
	edit(&o)
	o.MoverParked = r.moverParked
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	elsewhere := func(name string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return name == "far" && r.far || name == "far2"
	}
	o.NameTaken, o.QueueHeldElsewhere = elsewhere, elsewhere
	o.ShardCall = func(_ context.Context, _, _ string, body []byte) ([]byte, error) {
		c, err := decodeEngineCall(body)
		if err != nil {
			return nil, err
		}
		if c.Op != opImport {
			return nil, ErrNotElsewhere
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.imports[c.Queue] = append(r.imports[c.Queue], r.clk.Now())
		switch a := r.answer[c.Queue]; {
		case r.down != nil:
			return nil, r.down
		case a == ErrNotElsewhere:
			return nil, a // the router's answer: no other shard holds it
		default:
			return encodeGob(engineReply{Err: toRemoteError(a)})
		}
	}
	s, stop := run(t, o, r.clk)
	r.s = s
	for src, dlq := range map[string]string{"src": "far", "src2": "far2"} {
		cfg := engine.DefaultQueueConfig()
		cfg.DeadLetter = &engine.DeadLetterPolicy{Target: dlq, MaxReceiveCount: 1}
		if _, _, err := s.eng.CreateQueue(src, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	return r, stop
}

// deadLetter sends a message to src and fails it terminally: it leaves
// src as a transfer to far.
func (r *moverRig) deadLetter() { r.deadLetterFrom("src") }

// deadLetterFrom does the same on queue src (src2: a transfer to far2).
func (r *moverRig) deadLetterFrom(src string) {
	r.t.Helper()
	if _, err := r.s.eng.Send(src, []engine.Message{{Body: []byte("poison")}}); err != nil {
		r.t.Fatal(err)
	}
	ds, err := r.s.eng.Receive(context.Background(), src, engine.ReceiveRequest{Max: 1, WaitSet: true})
	if err != nil || len(ds) != 1 {
		r.t.Fatalf("receive: %d, %v", len(ds), err)
	}
	out, err := r.s.eng.ReportFailure(src, ds[0].ReceiptHandle, engine.Failure{ErrorClass: "E", Terminal: true})
	if err != nil || !out.DeadLettered {
		r.t.Fatalf("report: %+v, %v", out, err)
	}
}

// calls are the import calls for far.
func (r *moverRig) calls() []time.Time { return r.callsFor("far") }

func (r *moverRig) callsFor(target string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.imports[target]...)
}

// set runs f under the rig's lock (to change its answers).
func (r *moverRig) set(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// tick advances the fake clock by a second while the mover waits, then,
// if its timer fired, waits until it has made its pass and waits again,
// so that the mover sees each second however slow a pass is; the other
// goroutines whose timers fired get at most a second (a pace, not a
// check) to set theirs again.
func (r *moverRig) tick() {
	r.t.Helper()
	r.waitMover("the mover to wait", func() bool { return r.parked })
	r.mu.Lock()
	due, wakes := r.deadline, r.wakes
	r.mu.Unlock()
	n := r.clk.Timers()
	r.clk.Advance(time.Second)
	if !due.IsZero() && !due.After(r.clk.Now()) {
		r.waitMover("the mover's pass after its timer fired", func() bool { return r.wakes > wakes && r.parked })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.clk.BlockUntil(ctx, n)
}

// tickUntil ticks until cond holds, at most limit ticks.
func (r *moverRig) tickUntil(what string, limit int, cond func() bool) {
	r.t.Helper()
	for i := 0; !cond(); i++ {
		if i == limit {
			r.t.Fatalf("%s: not after %d s", what, limit)
		}
		r.tick()
	}
}

// TestMoverBacksOffFromARefusingTarget: a target whose engine errRefused its
// imports (full, here) is asked again after 2, 4, 8, 16 s and then every
// 30 s (moverBackoff), not every second, even when a new dead letter for
// it comes; once it takes them, every transfer arrives and ends.
func TestMoverBacksOffFromARefusingTarget(t *testing.T) {
	r, stop := newMoverRig(t)
	defer stop()
	r.deadLetter()
	poll.CheckFor(t, 5*time.Second, poll.True("the first import call", func() bool { return len(r.calls()) == 1 }))
	start := r.clk.Now()
	for r.clk.Now().Sub(start) < 150*time.Second {
		r.tick()
	}
	got := r.calls()
	for i := 1; i < len(got); i++ {
		gap := got[i].Sub(got[i-1])
		want := min(time.Second<<i, moverBackoff)
		if gap < want || gap > want+3*time.Second {
			t.Errorf("import %d came %v after the one before, want %v (the backoff): calls at %v", i+1, gap, want, offsets(got))
		}
	}
	// 0, 2, 6, 14, 30, 60, 90, 120, 150 s.
	if len(got) < 7 || len(got) > 9 {
		t.Fatalf("%d import calls in 150 s of a refusing target, want 8 or 9 (backoff to 30 s): %v", len(got), offsets(got))
	}
	// A new dead letter for it waits for the hold to end: the next
	// call comes 30 s after the last, not at once.
	r.deadLetter()
	r.set(func() { r.answer["far"] = nil })
	r.tickUntil("both transfers ended once the target takes them", 40, func() bool { return r.s.eng.TransfersPending() == 0 })
	got = r.calls()
	if gap := got[len(got)-1].Sub(got[len(got)-2]); gap < moverBackoff {
		t.Fatalf("the call that took them came %v after the last refusal, want %v (the hold): calls at %v", gap, moverBackoff, offsets(got))
	}
}

// TestMoverRetriesATargetThatDidNotAnswer: a target whose shard does not
// answer (no leader serving: an election) is called again every second,
// not after a growing backoff, so a dead letter lands about when the
// election ends.
func TestMoverRetriesATargetThatDidNotAnswer(t *testing.T) {
	r, stop := newMoverRig(t)
	defer stop()
	r.set(func() { r.down, r.answer["far"] = errors.New("no leader of shard 1 is serving"), nil })
	r.deadLetter()
	poll.CheckFor(t, 5*time.Second, poll.True("the first import call", func() bool { return len(r.calls()) == 1 }))
	for range 20 {
		r.tick()
	}
	got := r.calls()
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(got[i-1]); gap > moverPoll+time.Second {
			t.Errorf("import %d came %v after the one before, want %v: calls at %v", i+1, gap, moverPoll, offsets(got))
		}
	}
	if len(got) < 15 {
		t.Fatalf("%d import calls in 20 s of a shard without a leader, want about 20: %v", len(got), offsets(got))
	}
	r.set(func() { r.down = nil })
	r.tickUntil("the transfer ended once the shard answers", 3, func() bool { return r.s.eng.TransfersPending() == 0 })
}

// TestMoverRetriesATargetNotReadyYet: an engine that answers
// ErrUnavailable (shard 0 still restoring its bindings before it routes
// dead letters) is asked again every pass, as one that did not answer,
// not held with a growing backoff as a refusal is.
func TestMoverRetriesATargetNotReadyYet(t *testing.T) {
	r, stop := newMoverRig(t)
	defer stop()
	r.set(func() { r.answer["far"] = fmt.Errorf("%w: bindings not restored yet", engine.ErrUnavailable) })
	r.deadLetter()
	poll.CheckFor(t, 5*time.Second, poll.True("the first import call", func() bool { return len(r.calls()) == 1 }))
	for range 10 {
		r.tick()
	}
	if got := r.calls(); len(got) < 8 {
		t.Fatalf("%d import calls in 10 s of a target not ready yet, want about 10 (not a refusal's backoff): %v", len(got), offsets(got))
	}
	r.set(func() { r.answer["far"] = nil })
	r.tickUntil("the transfer ended once the target takes it", 3, func() bool { return r.s.eng.TransfersPending() == 0 })
}

// TestMoverHoldsOnlyTheRefusingTarget: a target that errRefused is held
// alone; a dead letter for another target moves at once.
func TestMoverHoldsOnlyTheRefusingTarget(t *testing.T) {
	r, stop := newMoverRig(t)
	defer stop()
	r.deadLetter()
	poll.CheckFor(t, 5*time.Second, poll.True("the first import call", func() bool { return len(r.calls()) == 1 }))
	r.tickUntil("far held 8 s", 20, func() bool { return len(r.calls()) == 4 }) // at 0, 2, 6, 14 s
	r.deadLetterFrom("src2")
	// The pass a new transfer starts waits out the rest of a moverPoll
	// since the last pass began: one second of the fake clock. Then it
	// must move far2's dead letter with the clock standing still (far's
	// hold cannot end meanwhile). Waiting in real time, not by ticks: a
	// tick does not wait for a pass to finish, and under a loaded race
	// run two ticks went by before it had.
	r.tick()
	poll.CheckFor(t, 10*time.Second, poll.True("the dead letter for far2 moved", func() bool { return r.s.eng.TransfersPending() == 1 }))
	if n := len(r.callsFor("far2")); n != 1 {
		t.Fatalf("%d import calls for far2, want 1", n)
	}
	if n := len(r.calls()); n != 4 {
		t.Fatalf("far was called again (%d calls) while held: %v", n, offsets(r.calls()))
	}
}

// TestMoverMovesATrickleAtOnce: after a pass that met no failing or held
// target, a new transfer starts the next pass at once, not a moverPoll
// after the last began: dead letters that cross shards one at a time
// each cross in milliseconds (before, about a second each), with the
// fake clock standing still.
func TestMoverMovesATrickleAtOnce(t *testing.T) {
	r, stop := newMoverRig(t)
	defer stop()
	r.set(func() { r.answer["far"] = nil })
	for i := range 3 {
		r.deadLetter()
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("dead letter %d moved without the clock moving", i+1), func() bool {
			return r.s.eng.TransfersPending() == 0 && len(r.calls()) == i+1
		}))
	}
}

// TestMoverReadsAPartAPass: while no transfer can move (the target
// shard has no leader), a pass reads at most Options.MoverPassTransfers of
// them and the next goes on from there, so the outbox is read a part a
// second, not whole every second: with 2 a pass, 6 transfers for far and
// then 1 for far2, far2's is read (and its shard called) about one pass in
// four, far's every pass that reads one. Once the shard answers, all move.
func TestMoverReadsAPartAPass(t *testing.T) {
	r, stop := newMoverRigWith(t, func(o *Options) { o.MoverPassTransfers = 2 })
	defer stop()
	r.set(func() { r.down, r.answer["far"] = errors.New("no leader of shard 1 is serving"), nil })
	for range 6 {
		r.deadLetter()
	}
	r.deadLetterFrom("src2")
	if n := r.s.eng.TransfersPending(); n != 7 {
		t.Fatalf("%d transfers pending, want 7", n)
	}
	far, far2 := len(r.calls()), len(r.callsFor("far2"))
	const passes = 24
	for range passes {
		r.tick()
	}
	far, far2 = len(r.calls())-far, len(r.callsFor("far2"))-far2
	if far2 < passes/4-2 || far2 > passes/4+2 || far < passes/2 {
		t.Fatalf("in %d s: %d calls for far, %d for far2; want far2's about one pass in four (%d), far's at least every other pass: a pass read more than 2 transfers",
			passes, far, far2, passes/4)
	}
	r.set(func() { r.down = nil })
	r.tickUntil("every transfer moved once the shard answers", 10, func() bool { return r.s.eng.TransfersPending() == 0 })
}

// TestMoverImportsHereATargetMadeHere: a transfer whose target has since
// been deleted on its shard and made again on this one (its shard's leader
// answers ErrNotElsewhere) is imported into the local queue and ended.
func TestMoverImportsHereATargetMadeHere(t *testing.T) {
	r, stop := newMoverRig(t)
	defer stop()
	r.deadLetter()
	poll.CheckFor(t, 5*time.Second, poll.True("the first import call", func() bool { return len(r.calls()) == 1 }))
	r.set(func() { r.far, r.answer["far"] = false, ErrNotElsewhere })
	if _, _, err := r.s.eng.CreateQueue("far", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("the transfer imported here and ended", func() bool {
		if r.s.eng.TransfersPending() == 0 {
			return true
		}
		r.tick()
		return false
	}))
	ds, err := r.s.eng.Receive(context.Background(), "far", engine.ReceiveRequest{Max: 10, WaitSet: true})
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "poison" || ds[0].DeadLetter == nil || ds[0].DeadLetter.SourceQueue != "src" {
		t.Fatalf("far holds %d: %+v, %v; want the dead letter from src", len(ds), ds, err)
	}
}

// offsets is each time's distance from the first, for messages.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, x := range ts {
		out[i] = x.Sub(ts[0])
	}
	return out
}

// TestShardEngineBodyAdmitsTheLargestTransfer: the node-only engine path
// reads a call carrying one transfer of the largest message the engine
// stores (an AMQP dead letter of engine.MaxStoredMessageSize, with an
// envelope and failure context of up to a MiB), which the mover sends
// alone when it is over ShardSendChunk. Measured on a 1 MiB record: the
// gob framing around a record does not grow with it.
func TestShardEngineBodyAdmitsTheLargestTransfer(t *testing.T) {
	long := strings.Repeat("n", 80)
	call := func(record int) int {
		b, err := encodeGob(engineCall{Op: opImport, Queue: long, Transfers: []engine.Transfer{{
			Target: long, Source: long, Reason: strings.Repeat("r", 1024), Record: make([]byte, record)}}})
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	overhead := call(1<<20) - 1<<20
	if grows := call(2<<20) - 2<<20; grows != overhead+1 && grows != overhead {
		t.Fatalf("gob framing %d bytes around 1 MiB, %d around 2 MiB: it grows with the record", overhead, grows)
	}
	if need := engine.MaxStoredMessageSize + 1<<20 + overhead + 16; need > maxShardEngineBody {
		t.Fatalf("a call with the largest transfer needs %d bytes, the path reads %d", need, maxShardEngineBody)
	}
}

// TestShutdownDoesNotWaitForAnotherShardsSilence: a server whose AMQP
// consumer holds a delivery of a queue on another shard, whose leader then
// stops answering, shuts down in about remoteGrace: the connection's
// teardown requeues the delivery there, and that call is ended, not waited
// for its 30 s (the delivery comes back when its session expires there).
// A shard 0 leadership whose server would not close kept this node from
// serving its next term (a 3-shard fault run, 2026-12-01).
func TestShutdownDoesNotWaitForAnotherShardsSilence(t *testing.T) {
	var mu sync.Mutex
	handed := false
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	o.NameTaken = func(name string) bool { return name == "far" }
	o.ShardCall = func(ctx context.Context, _, _ string, body []byte) ([]byte, error) {
		c, err := decodeEngineCall(body)
		if err != nil {
			return nil, err
		}
		switch c.Op {
		case opGetQueue:
			return encodeGob(engineReply{Info: engine.QueueInfo{Name: c.Queue, Config: engine.DefaultQueueConfig()}})
		case opKeepalive:
			return encodeGob(engineReply{})
		case opReceive:
			mu.Lock()
			first := !handed
			handed = true
			mu.Unlock()
			if first {
				return encodeGob(engineReply{Deliveries: []engine.Delivery{{MessageID: "m1", ReceiptHandle: "h1", Body: []byte("held")}}})
			}
			return encodeGob(engineReply{})
		}
		<-ctx.Done() // the requeue: a leader that does not answer
		return nil, ctx.Err()
	}
	s, stop := run(t, o, nil)
	ch := amqpChannel(t, s)
	ds, err := ch.Consume("far", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if string(d.Body) != "held" {
			t.Fatalf("delivered %q", d.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery of the queue elsewhere")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }() // run's stop fails the test on a Run error
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the server still shuts down 20 s later, waiting for another shard's leader")
	}
}
