package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// crashQueues creates dlq and work, work quarantining crash loops (3 in
// 60 s) into dlq with a generous receive limit.
func crashQueues(f *fixture, mod func(*QueueConfig)) {
	f.create("dlq", nil)
	f.create("work", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 50}
		c.CrashLimit, c.CrashWindow = DefaultCrashLimit, DefaultCrashWindow
		if mod != nil {
			mod(c)
		}
	})
}

// TestCrashLoopByLeaseExpiry: leases that end with no verdict count as
// crashes; the third within the window quarantines the message, and the
// count survives a restart without counting the same lease twice.
func TestCrashLoopByLeaseExpiry(t *testing.T) {
	f := newFixture(t)
	crashQueues(f, nil)
	f.send("work", body("x"))
	for i := 0; i < 2; i++ {
		if ds := f.recv("work", 1, 5*time.Second); len(ds) != 1 {
			t.Fatalf("round %d: no delivery", i)
		}
		f.clk.Advance(6 * time.Second) // the lease ends: a crash
		f.e.GetQueue("work")
	}
	// The restart replays the end of the second lease (its record still
	// shows it in flight): that must not count as a third crash.
	f.restart()
	if info, _ := f.e.GetQueue("work"); info.Visible != 1 {
		t.Fatalf("after restart: %+v", info)
	}
	f.recv("work", 1, 5*time.Second)
	f.clk.Advance(6 * time.Second) // crash 3
	if info, _ := f.e.GetQueue("work"); info.InFlight+info.Visible != 0 {
		t.Fatalf("work after crash 3: %+v", info)
	}
	ds := f.recvCopies("dlq", 1, time.Second)
	if len(ds) != 1 || ds[0].DeadLetter == nil || ds[0].DeadLetter.Reason != ReasonConsumerCrash {
		t.Fatalf("dead letter %+v", ds)
	}
}

// TestCrashLoopVerdictIsNotACrash: a lease that ends after a failure
// report (a verdict) is not a crash.
func TestCrashLoopVerdictIsNotACrash(t *testing.T) {
	f := newFixture(t)
	crashQueues(f, nil)
	f.send("work", body("x"))
	for i := 0; i < 4; i++ {
		ds := f.recv("work", 1, 5*time.Second)
		if len(ds) != 1 {
			t.Fatalf("round %d: no delivery", i)
		}
		if _, err := f.e.ReportFailure("work", ds[0].ReceiptHandle, Failure{ErrorClass: "KeyError"}); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(6 * time.Second)
	}
	if info, _ := f.e.GetQueue("dlq"); info.Visible != 0 {
		t.Fatalf("failure reports counted as crashes: %+v", info)
	}
}

// TestCrashLoopWithoutTargetKeepsMessage: quarantine never loses a
// message for want of a dead-letter queue.
func TestCrashLoopWithoutTargetKeepsMessage(t *testing.T) {
	f := newFixture(t)
	f.create("work", func(c *QueueConfig) { c.CrashLimit = 2 })
	f.send("work", body("x"))
	for i := 0; i < 3; i++ {
		ds := f.recv("work", 1, time.Minute)
		if len(ds) != 1 {
			t.Fatalf("round %d: no delivery", i)
		}
		if _, err := f.e.Abandon("work", []string{ds[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	if info, _ := f.e.GetQueue("work"); info.Visible != 1 || info.Dropped != 0 {
		t.Fatalf("%+v", info)
	}
}

// TestRequeueDelayedFIFOKeepsGroupLocked: a delayed retry on a FIFO queue
// keeps the message at the head of its group and the group locked
// (DLQ-33, DLQ-132).
func TestRequeueDelayedFIFOKeepsGroupLocked(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", func(c *QueueConfig) {
		c.FIFO, c.ContentBasedDedup, c.Requeue = true, true, RequeueDelayed
		c.Retry = &RetryPolicy{Strategy: RetryFixed, Base: 10 * time.Second, Cap: 10 * time.Second}
	})
	f.send("q.fifo", Message{Body: []byte("1"), GroupID: "g"}, Message{Body: []byte("2"), GroupID: "g"})
	ds := f.recv("q.fifo", 1, time.Minute)
	if _, err := f.e.Nack("q.fifo", []string{ds[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if ds := f.recv("q.fifo", 10, time.Minute); len(ds) != 0 {
		t.Fatalf("group not locked during the retry delay: %v", bodies(ds))
	}
	f.clk.Advance(11 * time.Second)
	if got := bodies(f.recv("q.fifo", 10, time.Minute)); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("order after the retry: %v", got)
	}
}

func TestRequeueConfigValidation(t *testing.T) {
	f := newFixture(t)
	for _, c := range []QueueConfig{
		func() QueueConfig { c := DefaultQueueConfig(); c.Requeue = "sideways"; return c }(),
		func() QueueConfig { c := DefaultQueueConfig(); c.CrashLimit = -1; return c }(),
		func() QueueConfig { c := DefaultQueueConfig(); c.CrashWindow = 13 * time.Hour; return c }(),
	} {
		if _, _, err := f.e.CreateQueue("bad", c, nil); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	// The settings survive a restart.
	f.create("ok", func(c *QueueConfig) { c.Requeue, c.CrashLimit, c.CrashWindow = RequeueTail, 4, time.Minute })
	f.restart()
	info, _ := f.e.GetQueue("ok")
	if info.Config.Requeue != RequeueTail || info.Config.CrashLimit != 4 || info.Config.CrashWindow != time.Minute {
		t.Fatalf("%+v", info.Config)
	}
}

// TestFailureContextIsCapped: context cannot push a message over a size
// limit: the error message is cut to 1 KiB, the trace to 16 KiB (DLQ-52).
func TestFailureContextIsCapped(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(5, nil)
	f.send("q", body("x"))
	d := f.recv("q", 1, time.Minute)
	long := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a'
		}
		return string(b)
	}
	if _, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{ErrorClass: "E", Message: long(5000), Trace: long(40000), Terminal: true}); err != nil {
		t.Fatal(err)
	}
	got := f.recv("dlq", 1, time.Minute)
	if lf := got[0].LastFailure; lf == nil || len(lf.Message) != MaxErrorText || len(lf.Trace) != MaxTrace {
		t.Fatalf("context %+v", lf)
	}
}

// TestPauseHoldsDeliveryAcrossRestart: a paused queue delivers nothing,
// keeps its messages visible, stays paused after a restart, and a long
// poll waiting on it returns the message as soon as it is resumed
// (DLQ-41).
func TestPauseHoldsDeliveryAcrossRestart(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("held"))
	if err := f.e.SetPaused("q", true); err != nil {
		t.Fatal(err)
	}
	if ds := f.recv("q", 10, time.Minute); len(ds) != 0 {
		t.Fatal("delivered while paused")
	}
	f.restart()
	info, _ := f.e.GetQueue("q")
	if !info.Config.Paused || info.Visible != 1 {
		t.Fatalf("after restart %+v", info)
	}
	base := f.clk.Timers()
	got := make(chan []Delivery, 1)
	go func() {
		ds, _ := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 1, Wait: MaxWait, WaitSet: true})
		got <- ds
	}()
	poll.Parked(t, f.clk, base+1) // the long poll
	if err := f.e.SetPaused("q", false); err != nil {
		t.Fatal(err)
	}
	if ds := <-got; len(ds) != 1 || string(ds[0].Body) != "held" {
		t.Fatalf("after resume %v", ds)
	}
}

// TestRetryBudgetDelaysRetriesOverBudget: with a 20 % budget, when 100
// first deliveries all fail, 20 retries go ahead and the other 80 are
// delayed by one to two budget windows, none dropped (DLQ-40).
func TestRetryBudgetDelaysRetriesOverBudget(t *testing.T) {
	f := newFixture(t)
	f.create("q", func(c *QueueConfig) { c.RetryBudgetPercent = 20 })
	for i := 0; i < 10; i++ {
		f.send("q", body("a"), body("b"), body("c"), body("d"), body("e"), body("f"), body("g"), body("h"), body("i"), body("j"))
	}
	var handles []string
	for len(handles) < 100 {
		for _, d := range f.recv("q", 10, time.Minute) {
			handles = append(handles, d.ReceiptHandle)
		}
	}
	if _, err := f.e.Nack("q", handles); err != nil {
		t.Fatal(err)
	}
	info, _ := f.e.GetQueue("q")
	if info.Visible != 20 || info.Delayed != 80 {
		t.Fatalf("visible %d delayed %d, want 20 and 80", info.Visible, info.Delayed)
	}
	f.clk.Advance(2 * RetryBudgetWindow)
	if info, _ := f.e.GetQueue("q"); info.Visible != 100 {
		t.Fatalf("after two windows %+v", info)
	}
}
