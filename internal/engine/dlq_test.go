package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// stepUntil advances the fake clock in steps until cond holds. Before
// each step it waits until cond holds or the two goroutines that move on
// the clock in these tests are parked on it (the scheduler, whose queues
// always hold a message with a retention deadline, and the move task
// waiting for tokens), so each step finds them done with the last one. It
// returns the simulated time that passed.
func (f *fixture) stepUntil(what string, step time.Duration, cond func() bool) time.Duration {
	f.t.Helper()
	return poll.AdvanceUntil(f.t, f.clk, step, 2, what, cond)
}

func (f *fixture) withDLQ(maxReceives int, mod func(*QueueConfig)) {
	f.create("dlq", nil)
	f.create("q", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: maxReceives}
		if mod != nil {
			mod(c)
		}
	})
}

func TestTerminalFailureDeadLettersWithContext(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5, nil)
	res := f.send("q", Message{Body: []byte("bad"), Attributes: []Attribute{{Name: "k", DataType: "String", StringValue: "v"}}})
	d := f.recv("q", 1, 30*time.Second)
	out, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{
		ErrorClass: "KeyError", Message: "no such customer", Trace: "main.go:42",
		ConsumerID: "worker-1", ConsumerVersion: "v1.2.3", Terminal: true,
	})
	if err != nil || !out.DeadLettered || out.Target != "dlq" {
		t.Fatalf("report: %+v %v", out, err)
	}
	f.restart()
	got := f.recv("dlq", 1, -1)
	if len(got) != 1 || got[0].MessageID != res[0].MessageID {
		t.Fatalf("dlq: %+v", got)
	}
	m := got[0]
	if m.DeadLetter == nil || m.DeadLetter.Reason != ReasonTerminal || m.DeadLetter.SourceQueue != "q" || m.DeadLetter.Attempts != 1 {
		t.Fatalf("dead-letter info %+v", m.DeadLetter)
	}
	if m.LastFailure == nil || m.LastFailure.ErrorClass != "KeyError" || m.LastFailure.ConsumerVersion != "v1.2.3" || m.LastFailure.Trace != "main.go:42" {
		t.Fatalf("failure %+v", m.LastFailure)
	}
	if len(m.Attributes) != 1 || m.Attributes[0].Name != "k" {
		t.Fatalf("user attributes changed: %+v", m.Attributes)
	}
	// Terminal without a dead-letter queue changes nothing.
	f.create("plain", nil)
	f.send("plain", body("x"))
	d = f.recv("plain", 1, 30*time.Second)
	if _, err := f.e.ReportFailure("plain", d[0].ReceiptHandle, Failure{Terminal: true}); !errors.Is(err, ErrNoDeadLetterQueue) {
		t.Fatalf("terminal without DLQ: %v", err)
	}
	if info, _ := f.e.GetQueue("plain"); info.InFlight != 1 {
		t.Fatalf("message disturbed: %+v", info)
	}
}

func TestFailureAtThresholdDeadLettersAtOnce(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(2, nil)
	f.send("q", body("x"))
	for i := 1; i <= 2; i++ {
		d := f.recv("q", 1, 30*time.Second)
		if len(d) != 1 {
			t.Fatalf("receive %d got nothing", i)
		}
		out, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{ErrorClass: "Timeout"})
		if err != nil {
			t.Fatal(err)
		}
		if out.DeadLettered != (i == 2) {
			t.Fatalf("attempt %d: %+v", i, out)
		}
		f.clk.Advance(30 * time.Second) // without a retry policy the lease runs out
	}
	if info, _ := f.e.GetQueue("dlq"); info.Visible != 1 {
		t.Fatalf("dlq %+v", info)
	}
}

func TestRetryPolicyBackoffGrows(t *testing.T) {
	f := newFixture(t)
	f.create("q", func(c *QueueConfig) {
		c.Retry = &RetryPolicy{Strategy: RetryExponential, Base: time.Second, Cap: 8 * time.Second}
	})
	f.send("q", body("x"))
	// Lease ends after 1 s each time; then the backoff is 1, 2, 4, 8, 8 s.
	for attempt, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		if d := f.recv("q", 1, time.Second); len(d) != 1 || d[0].ReceiveCount != attempt+1 {
			t.Fatalf("attempt %d: %+v", attempt+1, d)
		}
		f.clk.Advance(time.Second) // lease ends
		f.clk.Advance(want - time.Millisecond)
		if d := f.recv("q", 1, -1); len(d) != 0 {
			t.Fatalf("attempt %d: visible before its %v backoff", attempt+1, want)
		}
		if info, _ := f.e.GetQueue("q"); info.Delayed != 1 {
			t.Fatalf("backing-off message not counted as delayed: %+v", info)
		}
		f.clk.Advance(time.Millisecond)
	}
	// Backoff survives a restart: the recomputed delay is the same.
	f.recv("q", 1, time.Second)
	f.clk.Advance(time.Second + 7*time.Second)
	f.restart()
	if d := f.recv("q", 1, -1); len(d) != 0 {
		t.Fatal("restart skipped the backoff")
	}
	f.clk.Advance(time.Second)
	if d := f.recv("q", 1, -1); len(d) != 1 {
		t.Fatal("message lost after backoff and restart")
	}
}

func TestFullJitterIsBoundedAndSpread(t *testing.T) {
	p := &RetryPolicy{Strategy: RetryFullJitter, Base: 100 * time.Millisecond, Cap: 30 * time.Second}
	seen := map[time.Duration]bool{}
	for i := 0; i < 200; i++ {
		id := newID()
		for n := 1; n <= 12; n++ {
			d := p.Backoff(id, n)
			ceiling := min(p.Cap, p.Base<<(n-1))
			if d < 0 || d > ceiling {
				t.Fatalf("attempt %d: %v outside [0, %v]", n, d, ceiling)
			}
			if d != p.Backoff(id, n) {
				t.Fatal("backoff not reproducible")
			}
			seen[d] = true
		}
	}
	if len(seen) < 1000 {
		t.Fatalf("jitter barely spreads: %d distinct delays", len(seen))
	}
	dp := &RetryPolicy{Strategy: RetryDecorrelated, Base: time.Second, Cap: 20 * time.Second}
	for n := 1; n < 20; n++ {
		if d := dp.Backoff(newID(), n); d < time.Second || d > 20*time.Second {
			t.Fatalf("decorrelated %v out of range", d)
		}
	}
	f := newFixture(t)
	cfg := DefaultQueueConfig()
	cfg.Retry = &RetryPolicy{Strategy: RetryFullJitter, Base: time.Second}
	var ce *ConfigError
	if _, _, err := f.e.CreateQueue("nocap", cfg, nil); !errors.As(err, &ce) || ce.Setting != "RetryPolicy" {
		t.Fatalf("uncapped backoff accepted: %v", err)
	}
}

func TestReportFailureRetryAfter(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("x"))
	d := f.recv("q", 1, 30*time.Second)
	out, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{ErrorClass: "RateLimited", RetryAfter: 5 * time.Second, RetryAfterSet: true})
	if err != nil || out.DeadLettered || !out.VisibleAt.Equal(f.clk.Now().Add(5*time.Second)) {
		t.Fatalf("%+v %v", out, err)
	}
	f.clk.Advance(5 * time.Second)
	got := f.recv("q", 1, -1)
	if len(got) != 1 || got[0].LastFailure == nil || got[0].LastFailure.ErrorClass != "RateLimited" {
		t.Fatalf("%+v", got)
	}
	// A report on a stale handle fails like ChangeVisibility.
	if _, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{}); !errors.Is(err, ErrMessageNotAvailable) {
		t.Fatalf("stale: %v", err)
	}
}

// poison fills dlq with n terminal failures of the given class.
func (f *fixture) poison(n int, class string) []string {
	f.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		r := f.send("q", Message{Body: []byte(fmt.Sprintf("poison-%d", i)), Attributes: []Attribute{{Name: "tenant", DataType: "String", StringValue: fmt.Sprint(i % 2)}}})
		ids = append(ids, r[0].MessageID)
		d := f.recv("q", 1, 30*time.Second)
		if _, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{ErrorClass: class, Terminal: true}); err != nil {
			f.t.Fatal(err)
		}
		f.clk.Advance(time.Second)
	}
	return ids
}

func TestBrowseFiltersAndDoesNotTouch(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(3, nil)
	start := f.clk.Now()
	f.poison(4, "KeyError")
	f.poison(2, "ValueError")
	page, err := f.e.Browse("dlq", Filter{ErrorClass: "KeyError"}, 0, 3)
	if err != nil || len(page.Messages) != 3 || page.Next == 0 {
		t.Fatalf("page 1: %d %v %v", len(page.Messages), page.Next, err)
	}
	page2, _ := f.e.Browse("dlq", Filter{ErrorClass: "KeyError"}, page.Next, 3)
	if len(page2.Messages) != 1 || page2.Next != 0 {
		t.Fatalf("page 2: %+v", page2)
	}
	if p, _ := f.e.Browse("dlq", Filter{AttributeName: "tenant", AttributeValue: "1"}, 0, 0); len(p.Messages) != 3 {
		t.Fatalf("attribute filter: %d", len(p.Messages))
	}
	if p, _ := f.e.Browse("dlq", Filter{SentAfter: start.Add(4 * time.Second)}, 0, 0); len(p.Messages) != 2 {
		t.Fatalf("time filter: %d", len(p.Messages))
	}
	if p, _ := f.e.Browse("dlq", Filter{Reason: ReasonTerminal, SourceQueue: "q"}, 0, 0); len(p.Messages) != 6 {
		t.Fatalf("reason filter: %d", len(p.Messages))
	}
	// Browsing changed nothing: a receive still sees count 1.
	d := f.recv("dlq", 1, -1)
	if d[0].ReceiveCount != 2 { // 1 receive in q, then this one
		t.Fatalf("browse changed the receive count: %d", d[0].ReceiveCount)
	}
	n, err := f.e.DeleteMatching("dlq", Filter{ErrorClass: "ValueError"})
	if err != nil || n != 2 {
		t.Fatalf("delete matching: %d %v", n, err)
	}
	// Export and import round trip.
	all, _ := f.e.Browse("dlq", Filter{}, 0, 0)
	f.create("restored", nil)
	if n, err := f.e.Import("restored", all.Messages); err != nil || n != 4 {
		t.Fatalf("import %d %v", n, err)
	}
	back, _ := f.e.Browse("restored", Filter{}, 0, 0)
	if back.Messages[0].MessageID != all.Messages[0].MessageID || back.Messages[0].LastFailure.ErrorClass != "KeyError" || back.Messages[0].DeadLetter.Reason != ReasonTerminal {
		t.Fatalf("import lost context: %+v", back.Messages[0])
	}
}

func TestRedriveAfterFixDrainsAtRate(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(3, nil)
	ids := f.poison(20, "KeyError")
	if _, err := f.e.StartMoveTask(MoveTaskSpec{Source: "q"}); !errors.Is(err, ErrNotDeadLetterQueue) {
		t.Fatalf("non-DLQ source: %v", err)
	}
	dry, err := f.e.DryRunMoveTask(MoveTaskSpec{Source: "dlq"})
	if err != nil || dry.Total != 20 || dry.ByDestination["q"] != 20 || len(dry.Sample) != 10 {
		t.Fatalf("dry run %+v %v", dry, err)
	}
	if info, _ := f.e.GetQueue("dlq"); info.Visible != 20 {
		t.Fatal("dry run moved messages")
	}
	tk, err := f.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Rate: 5})
	if err != nil || tk.ToMove != 20 || tk.Status != TaskRunning {
		t.Fatalf("start %+v %v", tk, err)
	}
	_, err = f.e.StartMoveTask(MoveTaskSpec{Source: "dlq"})
	var active *ActiveTaskError
	if !errors.Is(err, ErrTaskRunning) || !errors.As(err, &active) || active.Task.ID != tk.ID || active.Task.Status != TaskRunning {
		t.Fatalf("second task: %v (want the refusal naming %s)", err, tk.ID)
	}
	// At 5 per second, 20 messages need at least 19/5 s of simulated time
	// (the bucket starts with one token).
	elapsed := f.stepUntil("completion", 50*time.Millisecond, func() bool {
		cur, _ := f.e.GetMoveTask(tk.ID)
		return cur.Status == TaskCompleted
	})
	if elapsed < 3800*time.Millisecond {
		t.Fatalf("20 messages moved in %v of simulated time: rate not limited", elapsed)
	}
	done, _ := f.e.GetMoveTask(tk.ID)
	if done.Moved != 20 {
		t.Fatalf("completed with %d moved", done.Moved)
	}
	// Back in the source as new messages, oldest first, with their history.
	d := f.recv("q", 10, 30*time.Second)
	if len(d) != 10 || d[0].MessageID == ids[0] || d[0].Redrive == nil || d[0].Redrive.OriginalMessageID != ids[0] || d[0].ReceiveCount != 1 {
		t.Fatalf("redriven message %+v", d[0])
	}
	list, _ := f.e.MoveTasks("dlq")
	if len(list) != 1 || list[0].Status != TaskCompleted {
		t.Fatalf("list %+v", list)
	}
}

func TestRedriveBeforeFixTripsSafetyStop(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(3, nil)
	f.poison(10, "KeyError")
	tk, err := f.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Rate: 100, SafetyThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	// The consumer is not fixed: everything redriven fails terminally again.
	f.stepUntil("the safety stop", 10*time.Millisecond, func() bool {
		d, _ := f.e.Receive(t.Context(), "q", ReceiveRequest{Max: 10, WaitSet: true})
		for _, m := range d {
			f.e.ReportFailure("q", m.ReceiptHandle, Failure{ErrorClass: "KeyError", Terminal: true})
		}
		cur, _ := f.e.GetMoveTask(tk.ID)
		return cur.Status == TaskPaused
	})
	cur, _ := f.e.GetMoveTask(tk.ID)
	if cur.Returned < 3 || len(cur.ReturnedClasses) != 1 || cur.ReturnedClasses[0] != "KeyError" || cur.FailureReason == "" {
		t.Fatalf("paused task %+v", cur)
	}
	if cur.Moved == 10 {
		t.Fatal("safety stop did not stop the redrive early")
	}
	// The pause survives a restart; cancel ends it.
	f.restart()
	if again, _ := f.e.GetMoveTask(tk.ID); again.Status != TaskPaused {
		t.Fatalf("after restart %+v", again)
	}
	if c, err := f.e.CancelMoveTask(tk.ID); err != nil || c.Status != TaskCancelled {
		t.Fatalf("cancel %+v %v", c, err)
	}
	if _, err := f.e.CancelMoveTask(tk.ID); !errors.Is(err, ErrTaskNotRunning) {
		t.Fatalf("second cancel: %v", err)
	}
}

func TestRedriveResumesAfterRestart(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(3, nil)
	f.poison(12, "KeyError")
	f.create("fixed", nil)
	tk, _ := f.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Destination: "fixed", Rate: 4})
	f.stepUntil("some progress", 50*time.Millisecond, func() bool { c, _ := f.e.GetMoveTask(tk.ID); return c.Moved >= 4 })
	f.restart()
	f.stepUntil("completion", 50*time.Millisecond, func() bool { c, _ := f.e.GetMoveTask(tk.ID); return c.Status == TaskCompleted })
	done, _ := f.e.GetMoveTask(tk.ID)
	info, _ := f.e.GetQueue("fixed")
	if info.Visible != 12 || done.Moved != 12 {
		t.Fatalf("after resume: fixed=%d moved=%d", info.Visible, done.Moved)
	}
	if dlq, _ := f.e.GetQueue("dlq"); dlq.Visible != 0 {
		t.Fatalf("dlq not drained: %+v", dlq)
	}
}

type countingObserver struct {
	NopObserver
	dead    []string
	deleted int
}

func (c *countingObserver) DeadLettered(q, target, reason string, _ time.Duration) {
	c.dead = append(c.dead, q+">"+target+":"+reason)
}
func (c *countingObserver) Deleted(string, time.Duration) { c.deleted++ }

// reopenWith closes the fixture's engine and opens it again on the same
// store and clock, reporting to obs.
func (f *fixture) reopenWith(obs Observer) {
	f.t.Helper()
	f.e.Close()
	e, err := Open(Options{Store: f.st, Clock: f.clk, Observer: obs})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { e.Close() })
	f.e = e
}

func TestObserverEvents(t *testing.T) {
	f := newFixture(t)
	obs := &countingObserver{}
	f.reopenWith(obs)
	f.withDLQ(1, nil)
	f.send("q", body("a"), body("b"))
	d := f.recv("q", 2, 0)
	f.del("q", d[0].ReceiptHandle)
	f.clk.Advance(time.Second)
	f.recv("q", 1, -1)
	if obs.deleted != 1 || len(obs.dead) != 1 || obs.dead[0] != "q>dlq:max_receives" {
		t.Fatalf("events %+v", obs)
	}
}

func TestOperatorPauseResumeAndImportIsAllOrNothing(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(3, nil)
	f.poison(6, "KeyError")
	tk, err := f.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Rate: 1, SafetyThreshold: -1})
	if err != nil || tk.SafetyThreshold != 0 {
		t.Fatalf("start with the safety stop disabled: %+v %v", tk, err)
	}
	if p, err := f.e.PauseMoveTask(tk.ID); err != nil || p.Status != TaskPaused {
		t.Fatalf("pause %+v %v", p, err)
	}
	if _, err := f.e.PauseMoveTask(tk.ID); !errors.Is(err, ErrTaskNotRunning) {
		t.Fatalf("second pause: %v", err)
	}
	moved, _ := f.e.GetMoveTask(tk.ID)
	f.clk.Advance(10 * time.Second)
	if again, _ := f.e.GetMoveTask(tk.ID); again.Moved != moved.Moved {
		t.Fatal("a paused task kept moving")
	}
	if r, err := f.e.ResumeMoveTask(tk.ID); err != nil || r.Status != TaskRunning {
		t.Fatalf("resume %+v %v", r, err)
	}
	f.stepUntil("completion", 100*time.Millisecond, func() bool { c, _ := f.e.GetMoveTask(tk.ID); return c.Status == TaskCompleted })

	f.create("restore", nil)
	views := []View{{Delivery: Delivery{MessageID: FormatID(newID()), Body: []byte("ok")}}, {Delivery: Delivery{MessageID: "bad"}}}
	if _, err := f.e.Import("restore", views); err == nil {
		t.Fatal("bad import accepted")
	}
	if info, _ := f.e.GetQueue("restore"); info.Visible != 0 {
		t.Fatalf("a failed import left %d messages behind", info.Visible)
	}
}

// Reject settles many rejected deliveries in one write: with a dead-letter
// queue each goes there with its failure context; without one each is
// dropped and counted. Stale handles settle without effect, malformed ones
// fail alone, and what was settled survives a restart.
func TestRejectManyAtOnce(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(0, nil)
	f.create("plain", nil)
	for _, q := range []string{"q", "plain"} {
		for i := range 4 {
			f.send(q, body(fmt.Sprintf("%s-%d", q, i)))
		}
	}
	fail := Failure{ErrorClass: "amqp.rejected", Terminal: true}
	for _, q := range []string{"q", "plain"} {
		d := f.recv(q, 4, 30*time.Second)
		if len(d) != 4 {
			t.Fatalf("%s: received %d", q, len(d))
		}
		// Settle the first one already: its handle is stale by then.
		if _, err := f.e.Delete(q, []string{d[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		hs := []string{d[0].ReceiptHandle, d[1].ReceiptHandle, "not-a-handle", d[2].ReceiptHandle, d[3].ReceiptHandle}
		errs, err := f.e.Reject(q, hs, fail)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if (i == 2) != errors.Is(e, ErrReceiptHandleInvalid) || i != 2 && e != nil {
				t.Fatalf("%s: handle %d: %v", q, i, e)
			}
		}
	}
	if info, _ := f.e.GetQueue("plain"); info.Dropped != 3 || info.Deleted != 1 {
		t.Fatalf("plain: dropped %d, deleted %d; want 3 and 1", info.Dropped, info.Deleted)
	}
	if info, _ := f.e.GetQueue("q"); info.DeadLettered != 3 || info.Dropped != 0 {
		t.Fatalf("q: dead-lettered %d, dropped %d; want 3 and 0", info.DeadLettered, info.Dropped)
	}
	f.restart()
	got := f.recv("dlq", 10, -1)
	if len(got) != 3 {
		t.Fatalf("dlq holds %d, want 3", len(got))
	}
	for _, m := range got {
		if m.DeadLetter == nil || m.DeadLetter.Reason != ReasonTerminal || m.DeadLetter.SourceQueue != "q" ||
			m.LastFailure == nil || m.LastFailure.ErrorClass != "amqp.rejected" {
			t.Fatalf("dead-lettered %s: %+v / %+v", m.Body, m.DeadLetter, m.LastFailure)
		}
	}
	for _, q := range []string{"q", "plain"} {
		if info, _ := f.e.GetQueue(q); info.Visible != 0 || info.InFlight != 0 {
			t.Fatalf("%s after restart: %+v", q, info)
		}
	}
}
