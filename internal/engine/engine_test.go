package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

type fixture struct {
	t   *testing.T
	st  store.Store
	clk *clock.Fake
	e   *Engine
	// opts, when set, changes the options each open uses.
	opts func(*Options)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, st: newTestStore(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.open()
	return f
}

// envStore names the store the engine suite runs on: "memory" (the
// default) or "pebble" (`make test` runs the package once with each).
const envStore = "SLUICE_ENGINE_STORE"

// newTestStore opens the store the suite runs on, closed when the test
// ends.
func newTestStore(t *testing.T) store.Store {
	t.Helper()
	switch v := os.Getenv(envStore); v {
	case "", "memory":
		return memstore.New()
	case "pebble":
		st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("open pebble store: %v", err)
		}
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("close pebble store: %v", err)
			}
		})
		return st
	default:
		t.Fatalf("%s=%q: want memory or pebble", envStore, v)
		return nil
	}
}

func (f *fixture) open() {
	f.t.Helper()
	o := Options{Store: f.st, Clock: f.clk}
	if f.opts != nil {
		f.opts(&o)
	}
	e, err := Open(o)
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	f.e = e
	f.t.Cleanup(func() { e.Close() })
	// Runs before the Close above (cleanups run last-in first-out), and
	// only for the engine that is current when the test ends.
	f.t.Cleanup(func() {
		if f.e == e {
			f.checkReopen()
		}
	})
}

// restart simulates a process restart: a new engine over the same store.
func (f *fixture) restart() {
	f.e.Close()
	f.open()
}

func (f *fixture) create(name string, mod func(*QueueConfig)) {
	f.t.Helper()
	cfg := DefaultQueueConfig()
	if mod != nil {
		mod(&cfg)
	}
	if _, _, err := f.e.CreateQueue(name, cfg, nil); err != nil {
		f.t.Fatalf("create %s: %v", name, err)
	}
}

func (f *fixture) send(q string, msgs ...Message) []SendResult {
	f.t.Helper()
	res, err := f.e.Send(q, msgs)
	if err != nil {
		f.t.Fatalf("send: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			f.t.Fatalf("send entry %d: %v", i, r.Err)
		}
	}
	return res
}

func (f *fixture) recv(q string, max int, vis time.Duration) []Delivery {
	f.t.Helper()
	d, err := f.e.Receive(context.Background(), q, ReceiveRequest{Max: max, Visibility: vis, VisibilitySet: vis >= 0, WaitSet: true})
	if err != nil {
		f.t.Fatalf("receive: %v", err)
	}
	return d
}

// recvCopies receives until n messages came from q. It is for dead-letter
// copies that the engine's scheduler makes after a clock advance: the
// scheduler takes the message out of its source under the source's lock
// but inserts the copy only after the batch's fsync, so a caller that saw
// the source empty may still have to wait for the target.
func (f *fixture) recvCopies(q string, n int, vis time.Duration) []Delivery {
	f.t.Helper()
	var got []Delivery
	poll.CheckFor(f.t, 10*time.Second, func() error {
		got = append(got, f.recv(q, n-len(got), vis)...)
		if len(got) < n {
			return fmt.Errorf("%d of %d copies in %s", len(got), n, q)
		}
		return nil
	})
	return got
}

func (f *fixture) del(q string, handles ...string) []error {
	f.t.Helper()
	errs, err := f.e.Delete(q, handles)
	if err != nil {
		f.t.Fatalf("delete: %v", err)
	}
	return errs
}

func body(s string) Message { return Message{Body: []byte(s)} }

func bodies(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Body))
	}
	return out
}

func TestSendReceiveDelete(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	res := f.send("q", body("a"), body("b"))
	got := f.recv("q", 10, 30*time.Second)
	if fmt.Sprint(bodies(got)) != "[a b]" {
		t.Fatalf("got %v", bodies(got))
	}
	if got[0].MessageID != res[0].MessageID || got[0].ReceiveCount != 1 {
		t.Fatalf("delivery %+v", got[0])
	}
	if again := f.recv("q", 10, -1); len(again) != 0 {
		t.Fatalf("in-flight messages redelivered: %v", bodies(again))
	}
	for _, err := range f.del("q", got[0].ReceiptHandle, got[1].ReceiptHandle, got[0].ReceiptHandle) {
		if err != nil {
			t.Fatal(err)
		}
	}
	info, _ := f.e.GetQueue("q")
	if info.Visible+info.InFlight+info.Delayed != 0 {
		t.Fatalf("queue not empty: %+v", info)
	}
	if errs := f.del("q", "garbage"); !errors.Is(errs[0], ErrReceiptHandleInvalid) {
		t.Fatalf("garbage handle: %v", errs[0])
	}
}

func TestVisibilityTimeoutAndReceiveCount(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("a"))
	first := f.recv("q", 1, 10*time.Second)
	f.clk.Advance(9 * time.Second)
	if got := f.recv("q", 1, -1); len(got) != 0 {
		t.Fatal("visible before its lease ended")
	}
	f.clk.Advance(time.Second)
	second := f.recv("q", 1, 10*time.Second)
	if len(second) != 1 || second[0].ReceiveCount != 2 || second[0].ReceiptHandle == first[0].ReceiptHandle {
		t.Fatalf("second receive %+v", second)
	}
	// The stale handle succeeds without deleting the new lease.
	if errs := f.del("q", first[0].ReceiptHandle); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if info, _ := f.e.GetQueue("q"); info.InFlight != 1 {
		t.Fatalf("stale delete removed the message: %+v", info)
	}
	// Receive counts survive a restart, and so does the running lease.
	f.restart()
	if got := f.recv("q", 1, -1); len(got) != 0 {
		t.Fatal("lease lost across restart")
	}
	f.clk.Advance(10 * time.Second)
	third := f.recv("q", 1, 10*time.Second)
	if len(third) != 1 || third[0].ReceiveCount != 3 {
		t.Fatalf("after restart %+v", third)
	}
}

func TestChangeVisibility(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("a"))
	d := f.recv("q", 1, 30*time.Second)
	errs, _ := f.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: d[0].ReceiptHandle, Timeout: 0}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	d2 := f.recv("q", 1, 30*time.Second)
	if len(d2) != 1 {
		t.Fatal("visibility 0 did not release the message")
	}
	// As on SQS (standard queue), a handle from an earlier receive still
	// applies to the message: visibility 0 releases the newer lease.
	errs, _ = f.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: d[0].ReceiptHandle, Timeout: 0}})
	if errs[0] != nil {
		t.Fatalf("old handle: %v", errs[0])
	}
	if d3 := f.recv("q", 1, 30*time.Second); len(d3) != 1 {
		t.Fatal("old handle with visibility 0 did not release the message")
	} else {
		d2 = d3
	}
	errs, _ = f.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: d2[0].ReceiptHandle, Timeout: 13 * time.Hour}})
	if !errors.Is(errs[0], ErrVisibilityLimit) {
		t.Fatalf("13h: %v", errs[0])
	}
	f.del("q", d2[0].ReceiptHandle)
	errs, _ = f.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: d2[0].ReceiptHandle, Timeout: 5 * time.Second}})
	if !errors.Is(errs[0], ErrMessageNotAvailable) {
		t.Fatalf("deleted: %v", errs[0])
	}
}

func TestDelay(t *testing.T) {
	f := newFixture(t)
	f.create("q", func(c *QueueConfig) { c.Delay = 5 * time.Second })
	f.send("q", body("queue-delay"), Message{Body: []byte("now"), DelaySet: true})
	if got := bodies(f.recv("q", 10, -1)); fmt.Sprint(got) != "[now]" {
		t.Fatalf("got %v", got)
	}
	info, _ := f.e.GetQueue("q")
	if info.Delayed != 1 {
		t.Fatalf("delayed count %+v", info)
	}
	f.restart()
	f.clk.Advance(5 * time.Second)
	if got := bodies(f.recv("q", 10, -1)); fmt.Sprint(got) != "[queue-delay]" {
		t.Fatalf("got %v", got)
	}
}

func TestLongPollWakesOnArrival(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	done := make(chan []Delivery)
	go func() {
		d, _ := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 1, Wait: 20 * time.Second, WaitSet: true})
		done <- d
	}()
	// Wait until the receiver has parked on the clock, then send.
	poll.Parked(t, f.clk, 1)
	f.send("q", body("x"))
	select {
	case d := <-done:
		if len(d) != 1 {
			t.Fatalf("got %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not wake on arrival")
	}
}

func TestLongPollWakesOnLeaseExpiry(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("x"))
	f.recv("q", 1, 3*time.Second)
	done := make(chan []Delivery)
	go func() {
		d, _ := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 1, Wait: 20 * time.Second, WaitSet: true})
		done <- d
	}()
	poll.Parked(t, f.clk, 2) // the scheduler's timer and the poll's
	f.clk.Advance(3 * time.Second)
	select {
	case d := <-done:
		if len(d) != 1 || d[0].ReceiveCount != 2 {
			t.Fatalf("got %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not wake when the lease ended")
	}
}

func TestDeadLetterOnReceive(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("q", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1} })
	res := f.send("q", Message{Body: []byte("poison"), Attributes: []Attribute{{Name: "a", DataType: "String", StringValue: "v"}}, TraceHeader: "Root=1"})
	if d := f.recv("q", 1, 0); len(d) != 1 {
		t.Fatal("first receive should return the message")
	}
	f.clk.Advance(time.Second)
	// Visibility expiry alone never moves it; the next receive does.
	if info, _ := f.e.GetQueue("dlq"); info.Visible != 0 {
		t.Fatal("moved on expiry")
	}
	if d := f.recv("q", 1, -1); len(d) != 0 {
		t.Fatalf("second receive returned %v", bodies(d))
	}
	f.restart()
	d := f.recv("dlq", 1, -1)
	if len(d) != 1 {
		t.Fatal("message not in DLQ after restart")
	}
	m := d[0]
	if m.MessageID != res[0].MessageID || m.ReceiveCount != 2 || m.DeadLetterSource != "q" || m.TraceHeader != "Root=1" || len(m.Attributes) != 1 {
		t.Fatalf("dead-lettered message %+v", m)
	}
	if info, _ := f.e.GetQueue("q"); info.Visible+info.InFlight != 0 {
		t.Fatalf("source still holds it: %+v", info)
	}
	src, _ := f.e.DeadLetterSources("dlq")
	if fmt.Sprint(src) != "[q]" {
		t.Fatalf("sources %v", src)
	}
}

func fifoCfg(c *QueueConfig) { c.FIFO = true }

func TestFIFOGroupsAndLock(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", fifoCfg)
	var msgs []Message
	for i, g := range []string{"A", "A", "B", "A", "B"} {
		msgs = append(msgs, Message{Body: []byte(fmt.Sprintf("%s%d", g, i)), GroupID: g, DedupID: fmt.Sprint(i)})
	}
	res := f.send("q.fifo", msgs...)
	if res[0].SequenceNumber >= res[1].SequenceNumber {
		t.Fatalf("sequence numbers do not grow: %v %v", res[0].SequenceNumber, res[1].SequenceNumber)
	}
	d := f.recv("q.fifo", 2, 30*time.Second)
	if fmt.Sprint(bodies(d)) != "[A0 A1]" {
		t.Fatalf("first batch %v", bodies(d))
	}
	// Group A is locked even after a partial delete.
	f.del("q.fifo", d[0].ReceiptHandle)
	d2 := f.recv("q.fifo", 10, 30*time.Second)
	if fmt.Sprint(bodies(d2)) != "[B2 B4]" {
		t.Fatalf("second batch %v", bodies(d2))
	}
	// A send never resets a lock.
	f.send("q.fifo", Message{Body: []byte("A5"), GroupID: "A", DedupID: "5"})
	if got := f.recv("q.fifo", 10, 30*time.Second); len(got) != 0 {
		t.Fatalf("locked group delivered %v", bodies(got))
	}
	// Visibility 0 releases the group; order is kept.
	f.e.ChangeVisibility("q.fifo", []VisibilityChange{{ReceiptHandle: d[1].ReceiptHandle}})
	if got := bodies(f.recv("q.fifo", 10, 30*time.Second)); fmt.Sprint(got) != "[A1 A3 A5]" {
		t.Fatalf("after release %v", got)
	}
	// A stale FIFO handle fails.
	f.clk.Advance(31 * time.Second)
	if errs := f.del("q.fifo", d2[0].ReceiptHandle); !errors.Is(errs[0], ErrReceiptHandleExpired) {
		t.Fatalf("stale FIFO delete: %v", errs[0])
	}
}

func TestFIFODeadLetterReleasesGroup(t *testing.T) {
	f := newFixture(t)
	f.create("dlq.fifo", fifoCfg)
	f.create("q.fifo", func(c *QueueConfig) {
		c.FIFO = true
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq.fifo", MaxReceiveCount: 1}
	})
	f.send("q.fifo", Message{Body: []byte("poison"), GroupID: "g", DedupID: "1"}, Message{Body: []byte("next"), GroupID: "g", DedupID: "2"})
	if got := bodies(f.recv("q.fifo", 1, 0)); fmt.Sprint(got) != "[poison]" {
		t.Fatalf("got %v", got)
	}
	f.clk.Advance(time.Second)
	if got := bodies(f.recv("q.fifo", 1, 30*time.Second)); fmt.Sprint(got) != "[next]" {
		t.Fatalf("group not released after dead-letter: %v", got)
	}
	d := f.recv("dlq.fifo", 1, -1)
	if len(d) != 1 || d[0].DedupID != d[0].MessageID || d[0].GroupID != "g" {
		t.Fatalf("dlq copy %+v", d)
	}
}

func TestFIFODeduplication(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", func(c *QueueConfig) { c.FIFO = true; c.ContentBasedDedup = true })
	r1 := f.send("q.fifo", Message{Body: []byte("x"), GroupID: "g"})
	d := f.recv("q.fifo", 1, -1)
	f.del("q.fifo", d[0].ReceiptHandle)
	f.restart()
	r2 := f.send("q.fifo", Message{Body: []byte("x"), GroupID: "g"})
	if r1[0].MessageID != r2[0].MessageID || r1[0].SequenceNumber != r2[0].SequenceNumber {
		t.Fatalf("duplicate not recognised: %+v %+v", r1, r2)
	}
	if got := f.recv("q.fifo", 1, -1); len(got) != 0 {
		t.Fatal("duplicate enqueued")
	}
	f.clk.Advance(DedupWindow)
	f.send("q.fifo", Message{Body: []byte("x"), GroupID: "g"})
	if got := f.recv("q.fifo", 1, -1); len(got) != 1 {
		t.Fatal("message after the window was dropped")
	}
	// Errors.
	res, _ := f.e.Send("q.fifo", []Message{{Body: []byte("y")}, {Body: []byte("z"), GroupID: "g", DelaySet: true, Delay: time.Second}})
	if !errors.Is(res[0].Err, ErrMissingGroupID) || !errors.Is(res[1].Err, ErrDelayNotAllowed) {
		t.Fatalf("errors %v %v", res[0].Err, res[1].Err)
	}
}

func TestDedupScopeMessageGroup(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", fifoCfg)
	f.send("q.fifo", Message{Body: []byte("1"), GroupID: "a", DedupID: "d"})
	f.e.UpdateQueue("q.fifo", func(c *QueueConfig) error { c.DedupScope = DedupScopeMessageGroup; return nil })
	f.send("q.fifo", Message{Body: []byte("2"), GroupID: "a", DedupID: "d"}, Message{Body: []byte("3"), GroupID: "b", DedupID: "d"})
	info, _ := f.e.GetQueue("q.fifo")
	if info.Visible != 2 {
		t.Fatalf("want 2 messages, got %+v", info)
	}
}

func TestAttemptID(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", fifoCfg)
	f.send("q.fifo", Message{Body: []byte("1"), GroupID: "a", DedupID: "1"})
	req := ReceiveRequest{Max: 1, WaitSet: true, AttemptID: "try"}
	a, _ := f.e.Receive(context.Background(), "q.fifo", req)
	b, _ := f.e.Receive(context.Background(), "q.fifo", req)
	if len(a) != 1 || len(b) != 1 || a[0].ReceiptHandle != b[0].ReceiptHandle {
		t.Fatalf("retry did not return the same receipt: %v %v", a, b)
	}
}

func TestRetention(t *testing.T) {
	f := newFixture(t)
	f.create("q", func(c *QueueConfig) { c.Retention = time.Minute })
	f.send("q", body("old"))
	f.recv("q", 1, 10*time.Minute) // in flight messages expire too
	f.clk.Advance(30 * time.Second)
	f.send("q", body("new"))
	f.clk.Advance(30 * time.Second)
	info, _ := f.e.GetQueue("q")
	if info.Visible+info.InFlight != 1 || info.Expired != 1 {
		t.Fatalf("after expiry %+v", info)
	}
	f.restart()
	f.clk.Advance(30 * time.Second)
	info, _ = f.e.GetQueue("q")
	if info.Visible+info.InFlight != 0 {
		t.Fatalf("after restart %+v", info)
	}
}

func TestPurgeAndDelete(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("a"), Message{Body: []byte("b"), DelaySet: true, Delay: time.Minute})
	f.recv("q", 1, -1)
	if err := f.e.PurgeQueue("q"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.PurgeQueue("q"); !errors.Is(err, ErrPurgeInProgress) {
		t.Fatalf("second purge: %v", err)
	}
	info, _ := f.e.GetQueue("q")
	if info.Visible+info.InFlight+info.Delayed != 0 {
		t.Fatalf("purge left %+v", info)
	}
	f.restart()
	info, _ = f.e.GetQueue("q")
	if info.Visible+info.InFlight+info.Delayed != 0 {
		t.Fatalf("purge undone by restart %+v", info)
	}
	if err := f.e.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.e.CreateQueue("q", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueDeletedRecently) {
		t.Fatalf("recreate: %v", err)
	}
	f.clk.Advance(NameReuseDelay)
	f.create("q", nil)
	if info, _ := f.e.GetQueue("q"); info.Visible != 0 {
		t.Fatal("new queue inherited messages")
	}
}

func TestConfigValidation(t *testing.T) {
	f := newFixture(t)
	cfg := DefaultQueueConfig()
	cfg.Visibility = 13 * time.Hour
	_, _, err := f.e.CreateQueue("bad", cfg, nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Setting != "VisibilityTimeout" {
		t.Fatalf("err %v", err)
	}
	f.create("q", nil)
	err = f.e.UpdateQueue("q", func(c *QueueConfig) error { c.FIFO = true; return nil })
	if !errors.As(err, &ce) {
		t.Fatalf("type change: %v", err)
	}
	err = f.e.UpdateQueue("q", func(c *QueueConfig) error {
		c.DeadLetter = &DeadLetterPolicy{Target: "missing", MaxReceiveCount: 3}
		return nil
	})
	if !errors.As(err, &ce) {
		t.Fatalf("missing DLQ: %v", err)
	}
}

func TestMessageSizeLimit(t *testing.T) {
	f := newFixture(t)
	f.create("q", func(c *QueueConfig) { c.MaxMessageSize = 1024 })
	res, _ := f.e.Send("q", []Message{{Body: make([]byte, 1025)}, {Body: make([]byte, 1024)}})
	var tl *MessageTooLargeError
	if !errors.As(res[0].Err, &tl) || tl.Limit != 1024 || res[1].Err != nil {
		t.Fatalf("results %+v", res)
	}
}

func TestStorageFailureStopsWrites(t *testing.T) {
	// Failing on demand is a memory-store facility: this test runs on it
	// whichever store the suite runs on (the pebble store's fail-stop
	// has its own tests in pebblestore and the fault harness).
	t.Setenv(envStore, "memory")
	f := newFixture(t)
	f.create("q", nil)
	f.st.(*memstore.Store).Fail(errors.New("EIO"))
	if _, err := f.e.Send("q", []Message{body("x")}); !errors.Is(err, ErrStorage) {
		t.Fatalf("send after failure: %v", err)
	}
	if _, err := f.e.Send("q", []Message{body("x")}); !errors.Is(err, ErrStorage) || !errors.Is(err, ErrNotWritten) {
		// Refused before any write: certain to have taken no effect.
		t.Fatalf("second send after failure: %v, want ErrStorage and ErrNotWritten", err)
	}
}

func TestFairQueueRoundRobin(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	// A noisy tenant floods first; a quiet one sends after.
	var msgs []Message
	for i := 0; i < 8; i++ {
		msgs = append(msgs, Message{Body: []byte(fmt.Sprintf("noisy%d", i)), GroupID: "noisy"})
	}
	f.send("q", msgs...)
	f.send("q", Message{Body: []byte("quiet0"), GroupID: "quiet"}, Message{Body: []byte("quiet1"), GroupID: "quiet"}, body("plain"))
	got := bodies(f.recv("q", 6, 30*time.Second))
	if fmt.Sprint(got) != "[noisy0 quiet0 plain noisy1 quiet1 noisy2]" {
		t.Fatalf("not round-robin across groups: %v", got)
	}
	d := f.recv("q", 10, -1)
	if len(d) != 5 || d[0].GroupID != "noisy" {
		t.Fatalf("rest %v", bodies(d))
	}
}

func TestRedriveAllowPolicy(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", func(c *QueueConfig) {
		c.RedriveAllow = &RedriveAllowPolicy{Permission: "byQueue", SourceQueues: []string{"allowed"}}
	})
	f.create("allowed", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1} })
	_, _, err := f.e.CreateQueue("other", QueueConfig{MaxMessageSize: 1024, Retention: time.Hour, DeadLetter: &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}}, nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Setting != "RedrivePolicy" {
		t.Fatalf("denied source accepted: %v", err)
	}
	// Tightening the policy later stops moves: the message stays and is
	// delivered rather than dropped.
	f.send("allowed", body("x"))
	f.recv("allowed", 1, 0)
	f.e.UpdateQueue("dlq", func(c *QueueConfig) error {
		c.RedriveAllow = &RedriveAllowPolicy{Permission: "denyAll"}
		return nil
	})
	f.clk.Advance(time.Second)
	if d := f.recv("allowed", 1, -1); len(d) != 1 || d[0].ReceiveCount != 2 {
		t.Fatalf("message lost or moved against denyAll: %+v", d)
	}
}

func TestContentSizeHintIsAnUpperBound(t *testing.T) {
	m := &message{id: newID(), body: make([]byte, 1024), attrs: []Attribute{{Name: "n", DataType: "String", StringValue: "v"}},
		dedupID: "d", sender: "AKID", sentAt: 1 << 62, enqueuedAt: 1 << 62, visibleAt: 1 << 62, firstRecvAt: 1 << 62, recvCount: 1 << 30,
		group: &group{id: "g"}, ttlAt: 1 << 62,
		ext: &messageExt{trace: "Root=1", dlqSource: "src", envelope: make([]byte, 300),
			failure: &FailureRecord{ErrorClass: "E", Message: "m", Trace: "t", ConsumerID: "c", ConsumerVersion: "v", ReportedAt: time.Unix(0, 1<<62), Attempt: 1 << 30},
			dead:    &DeadLetterInfo{SourceQueue: "src", Reason: ReasonMaxReceives, Attempts: 1 << 30, FirstReceiveAt: time.Unix(0, 1<<62), LastReceiveAt: time.Unix(0, 1<<62), DeadLetteredAt: time.Unix(0, 1<<62)},
			redrive: &RedriveInfo{OriginalMessageID: FormatID(newID()), Count: 1 << 30, TaskID: "0123456789abcdef0123456789abcdef", At: time.Unix(0, 1<<62)}}}
	for _, msg := range []*message{m, {id: newID(), body: []byte("x"), group: &group{}}} {
		if got, hint := len(encodeContent(msg)), contentSizeHint(msg); got > hint {
			t.Errorf("encoded %d bytes, hint %d: the buffer regrows", got, hint)
		}
	}
}
