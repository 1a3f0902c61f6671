// Package workertest is the transport conformance suite of the worker
// SDK: the same poison-message scenarios — transient failures that
// recover, a terminal failure, exhaustion of attempts, a worker crash
// mid-message, a redrive after the fix, and the redrive safety stop — run
// against every transport with the same counts asserted: every poison
// message is in the dead-letter queue exactly once with its context,
// every healthy message is processed, and nothing is lost across a
// worker crash.
//
// A transport's test calls Run with a Factory that sets up a fresh source
// and DLQ on a real server (Sluice, nats-server, redis-server, kfake,
// pstest) for each scenario.
package workertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
)

// Config is what a scenario asks of the transport's setup.
type Config struct {
	// MaxAttempts is how many deliveries a message gets before it is
	// dead-lettered (SQS maxReceiveCount, the transport's MaxAttempts).
	MaxAttempts int
}

// Harness is one transport set up for one scenario.
type Harness interface {
	// Publish sends each body as one message to the source.
	Publish(t testing.TB, bodies ...string)
	// Source connects a new consumer, as a new worker process would.
	// crash abandons it as a killed process would: its connections are
	// closed at once and nothing it holds is settled. A crashed
	// consumer's messages must come back to another consumer within
	// about 10 s.
	Source(t testing.TB) (src worker.Source, crash func())
	// DeadLetters peeks at the dead-letter queue: every entry, oldest
	// first, with its context, without removing any.
	DeadLetters(t testing.TB) []dlq.Entry
	// Redrive moves the dead letters back to the consumer with the
	// transport's console (or, on Sluice, its own redrive task) and
	// returns what it did; an error wrapping dlq.ErrSafetyStop when the
	// safety stop fired.
	Redrive(t testing.TB, o dlq.Options) (dlq.Report, error)
}

// Factory sets up a fresh Harness for one scenario.
type Factory func(t *testing.T, cfg Config) Harness

// Error classes the suite's handler records.
const (
	ClassPoison = "conformance.Poison"
	ClassFlaky  = "conformance.Flaky"
)

type poisonError struct{ body string }

func (e poisonError) Error() string      { return "cannot process " + e.body }
func (e poisonError) ErrorClass() string { return ClassPoison }

type flakyError struct{ body string }

func (e flakyError) Error() string      { return "downstream busy for " + e.body }
func (e flakyError) ErrorClass() string { return ClassFlaky }

// handler processes bodies by their prefix:
//
//	ok-…      succeeds
//	flaky-…   fails transiently twice, then succeeds
//	poison-…  fails terminally unless fixed
//	stuck-…   always fails transiently
//	crash-…   its first delivery blocks until the test crashes the worker
type handler struct {
	mu        sync.Mutex
	processed map[string]int // body → successful runs
	calls     map[string]int // body → calls
	fixed     bool
	entered   chan string // crash-… bodies, when their handler starts
}

func newHandler() *handler {
	return &handler{processed: map[string]int{}, calls: map[string]int{}, entered: make(chan string, 16)}
}

func (h *handler) Handle(ctx context.Context, m *worker.Message) error {
	body := string(m.Body)
	h.mu.Lock()
	h.calls[body]++
	n, fixed := h.calls[body], h.fixed
	h.mu.Unlock()
	switch {
	case strings.HasPrefix(body, "flaky-") && n <= 2:
		return worker.Transient(flakyError{body})
	case strings.HasPrefix(body, "stuck-"):
		return worker.Transient(flakyError{body})
	case strings.HasPrefix(body, "poison-") && !fixed:
		return worker.Terminal(poisonError{body})
	case strings.HasPrefix(body, "crash-") && n == 1:
		h.entered <- body
		<-ctx.Done() // the worker dies here
		return ctx.Err()
	}
	h.mu.Lock()
	h.processed[body]++
	h.mu.Unlock()
	return nil
}

func (h *handler) fix() {
	h.mu.Lock()
	h.fixed = true
	h.mu.Unlock()
}

// done reports whether every body was processed at least once.
func (h *handler) done(bodies []string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range bodies {
		if h.processed[b] == 0 {
			return false
		}
	}
	return true
}

func (h *handler) count(body string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.processed[body]
}

// Options are the worker options of the suite: short backoffs, no
// breaker or retry budget (they would make counts depend on timing).
func Options() worker.Options {
	o := worker.DefaultOptions()
	o.Concurrency = 4
	o.Prefetch = 4
	o.Backoff = worker.Backoff{Base: 50 * time.Millisecond, Cap: 200 * time.Millisecond}
	o.RetryBudget.Disabled = true
	o.Breaker.Disabled = true
	o.ShutdownTimeout = 5 * time.Second
	o.Version = "conformance-1.0"
	o.ConsumerID = "conformance"
	return o
}

// running is a worker started by start.
type running struct {
	stop    func()
	crashed bool // its Source was crashed: Run may return the dead connection's error
}

func start(t *testing.T, src worker.Source, h worker.Handler, o worker.Options) *running {
	t.Helper()
	w, err := worker.New(src, h, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	r := &running{}
	r.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !r.crashed {
					t.Errorf("worker: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("worker did not stop")
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

// WaitFor polls cond every 20 ms until it holds, or fails t after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// byBody counts dead letters per body.
func byBody(es []dlq.Entry) map[string]int {
	m := map[string]int{}
	for _, e := range es {
		m[string(e.Body)]++
	}
	return m
}

// checkDLQ asserts that the DLQ holds each of want exactly once (and
// nothing else), each with its context, and returns the entries.
func checkDLQ(t *testing.T, h Harness, want []string, class string, attempts int, terminal bool) []dlq.Entry {
	t.Helper()
	var es []dlq.Entry
	WaitFor(t, 30*time.Second, fmt.Sprintf("%d dead letters", len(want)), func() bool {
		es = h.DeadLetters(t)
		return len(es) >= len(want)
	})
	got := byBody(es)
	for _, b := range want {
		if got[b] != 1 {
			t.Errorf("%q is in the DLQ %d times, want exactly once (DLQ: %v)", b, got[b], got)
		}
	}
	if len(es) != len(want) {
		t.Errorf("DLQ has %d entries, want %d: %v", len(es), len(want), got)
	}
	for _, e := range es {
		c := e.Context
		if !e.Valid {
			t.Errorf("%s: no failure context: %+v", e.ID, e)
			continue
		}
		if c.ErrorClass != class || !strings.Contains(c.ErrorMessage, string(e.Body)) || c.Version != "conformance-1.0" {
			t.Errorf("%s: context class=%q message=%q version=%q, want class %q naming the body and version conformance-1.0",
				e.ID, c.ErrorClass, c.ErrorMessage, c.Version, class)
		}
		if attempts > 0 && c.Attempts != attempts {
			t.Errorf("%s (%s): attempts %d, want %d", e.ID, e.Body, c.Attempts, attempts)
		}
		if c.Terminal != terminal {
			t.Errorf("%s: terminal=%v, want %v", e.ID, c.Terminal, terminal)
		}
		if c.FailedAt.IsZero() || c.OriginID == "" {
			t.Errorf("%s: failedAt %v originID %q", e.ID, c.FailedAt, c.OriginID)
		}
	}
	return es
}

// Run runs every scenario, each on a fresh Harness from f.
func Run(t *testing.T, f Factory) {
	t.Run("TransientRecovers", func(t *testing.T) { transientRecovers(t, f) })
	t.Run("Terminal", func(t *testing.T) { terminal(t, f) })
	t.Run("Exhaustion", func(t *testing.T) { exhaustion(t, f) })
	t.Run("Crash", func(t *testing.T) { crash(t, f) })
	t.Run("RedriveAfterFix", func(t *testing.T) { redriveAfterFix(t, f) })
	t.Run("RedriveSafetyStop", func(t *testing.T) { safetyStop(t, f) })
}

func transientRecovers(t *testing.T, f Factory) {
	hn := f(t, Config{MaxAttempts: 4})
	all := append(bodies("ok", 5), bodies("flaky", 3)...)
	hn.Publish(t, all...)
	h := newHandler()
	src, _ := hn.Source(t)
	w := start(t, src, h, Options())
	WaitFor(t, 30*time.Second, "every message processed", func() bool { return h.done(all) })
	w.stop()
	if es := hn.DeadLetters(t); len(es) != 0 {
		t.Errorf("%d messages dead-lettered, want none: %v", len(es), byBody(es))
	}
}

func terminal(t *testing.T, f Factory) {
	hn := f(t, Config{MaxAttempts: 4})
	ok, poison := bodies("ok", 4), bodies("poison", 2)
	hn.Publish(t, append(ok, poison...)...)
	h := newHandler()
	src, _ := hn.Source(t)
	w := start(t, src, h, Options())
	WaitFor(t, 30*time.Second, "healthy messages processed", func() bool { return h.done(ok) })
	checkDLQ(t, hn, poison, ClassPoison, 1, true)
	w.stop()
	checkDLQ(t, hn, poison, ClassPoison, 1, true)
}

func exhaustion(t *testing.T, f Factory) {
	const max = 3
	hn := f(t, Config{MaxAttempts: max})
	ok, stuck := bodies("ok", 3), bodies("stuck", 2)
	hn.Publish(t, append(ok, stuck...)...)
	h := newHandler()
	src, _ := hn.Source(t)
	w := start(t, src, h, Options())
	WaitFor(t, 30*time.Second, "healthy messages processed", func() bool { return h.done(ok) })
	checkDLQ(t, hn, stuck, ClassFlaky, max, false)
	w.stop()
	h.mu.Lock()
	for _, b := range stuck {
		if h.calls[b] != max {
			t.Errorf("%s handled %d times, want %d", b, h.calls[b], max)
		}
	}
	h.mu.Unlock()
}

func crash(t *testing.T, f Factory) {
	hn := f(t, Config{MaxAttempts: 4})
	all := append(bodies("ok", 3), "crash-0")
	hn.Publish(t, all...)
	h := newHandler()
	src, kill := hn.Source(t)
	o := Options()
	o.ShutdownTimeout = 200 * time.Millisecond
	w := start(t, src, h, o)
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("crash-0 was never handled")
	}
	w.crashed = true
	kill()
	w.stop()
	src2, _ := hn.Source(t)
	w2 := start(t, src2, h, Options())
	WaitFor(t, 60*time.Second, "every message processed after the crash", func() bool { return h.done(all) })
	w2.stop()
	if es := hn.DeadLetters(t); len(es) != 0 {
		t.Errorf("%d messages dead-lettered, want none: %v", len(es), byBody(es))
	}
}

func redriveAfterFix(t *testing.T, f Factory) {
	hn := f(t, Config{MaxAttempts: 4})
	ok, poison := bodies("ok", 2), bodies("poison", 3)
	hn.Publish(t, append(ok, poison...)...)
	h := newHandler()
	src, _ := hn.Source(t)
	w := start(t, src, h, Options())
	WaitFor(t, 30*time.Second, "healthy messages processed", func() bool { return h.done(ok) })
	checkDLQ(t, hn, poison, ClassPoison, 1, true)

	h.fix()
	rep, err := hn.Redrive(t, dlq.Options{Rate: 50, SafetyWindow: time.Second})
	if err != nil || rep.Redriven != len(poison) || rep.Stopped {
		t.Fatalf("redrive: %+v, %v; want %d redriven", rep, err, len(poison))
	}
	WaitFor(t, 30*time.Second, "redriven messages processed", func() bool { return h.done(poison) })
	WaitFor(t, 10*time.Second, "DLQ empty", func() bool { return len(hn.DeadLetters(t)) == 0 })
	w.stop()
	for _, b := range poison {
		if n := h.count(b); n != 1 {
			t.Errorf("%s processed %d times after the redrive, want 1", b, n)
		}
	}
}

func safetyStop(t *testing.T, f Factory) {
	hn := f(t, Config{MaxAttempts: 4})
	poison := bodies("poison", 10)
	hn.Publish(t, poison...)
	h := newHandler()
	src, _ := hn.Source(t)
	w := start(t, src, h, Options())
	checkDLQ(t, hn, poison, ClassPoison, 1, true)

	// The fix is not in: redriven messages fail again, and the redrive
	// stops itself long before it has moved all ten.
	rep, err := hn.Redrive(t, dlq.Options{Rate: 1, SafetyThreshold: 1, SafetyWindow: 30 * time.Second})
	if !errors.Is(err, dlq.ErrSafetyStop) || !rep.Stopped {
		t.Fatalf("redrive: %+v, %v; want the safety stop", rep, err)
	}
	if rep.Redriven == 0 || rep.Redriven >= len(poison) {
		t.Errorf("redrove %d of %d before stopping", rep.Redriven, len(poison))
	}
	// Nothing is lost or doubled: every poison message is back in the
	// DLQ exactly once, with the context of its latest failure.
	checkDLQ(t, hn, poison, ClassPoison, 0, true)
	w.stop()
}

// ErrCrashed is what a crashed Source returns.
var ErrCrashed = errors.New("workertest: the consumer crashed")

// Crashable wraps src so that after crash every call fails with
// ErrCrashed and reaches nothing: a settle the dead process would have
// made never happens. Transports whose Source holds a connection also
// close it in their crash function.
func Crashable(src worker.Source) (worker.Source, func()) {
	c := &crashable{src: src, dead: make(chan struct{})}
	var once sync.Once
	return c, func() { once.Do(func() { close(c.dead) }) }
}

type crashable struct {
	src  worker.Source
	dead chan struct{}
}

func (c *crashable) crashed() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

func (c *crashable) Receive(ctx context.Context, max int) ([]*worker.Message, error) {
	if c.crashed() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.src.Receive(ctx, max)
}

func (c *crashable) Ack(ctx context.Context, m *worker.Message) error {
	if c.crashed() {
		return ErrCrashed
	}
	return c.src.Ack(ctx, m)
}

func (c *crashable) Extend(ctx context.Context, m *worker.Message) error {
	if c.crashed() {
		return ErrCrashed
	}
	return c.src.Extend(ctx, m)
}

func (c *crashable) Release(ctx context.Context, m *worker.Message) error {
	if c.crashed() {
		return ErrCrashed
	}
	return c.src.Release(ctx, m)
}

func (c *crashable) Fail(ctx context.Context, m *worker.Message, f worker.Failure) (worker.Outcome, error) {
	if c.crashed() {
		return worker.Outcome{}, ErrCrashed
	}
	return c.src.Fail(ctx, m, f)
}
