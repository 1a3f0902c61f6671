package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestBackoffFullJitterIsCapped(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second}
	for _, tc := range []struct {
		attempt int
		ceiling time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {60, time.Second}} {
		if got := b.ceiling(tc.attempt); got != tc.ceiling {
			t.Errorf("ceiling(%d) = %v, want %v", tc.attempt, got, tc.ceiling)
		}
		var top time.Duration
		for range 2000 {
			d := b.Delay(tc.attempt)
			if d < 0 || d > tc.ceiling {
				t.Fatalf("Delay(%d) = %v outside [0, %v]", tc.attempt, d, tc.ceiling)
			}
			top = max(top, d)
		}
		if top < tc.ceiling*8/10 {
			t.Errorf("Delay(%d) never came near its ceiling %v (max %v): not full jitter", tc.attempt, tc.ceiling, top)
		}
	}
}

func TestRetryBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBudget(RetryBudget{Ratio: 0.2, MinRetries: 2, Window: 10 * time.Second})
	grants := func(at time.Time) (n int) {
		for b.allow(at) {
			n++
		}
		return n
	}
	// Quiet: the floor allows two retries.
	if n := grants(now); n != 2 {
		t.Fatal("floor of 2 retries not applied")
	}
	// 50 attempts allow 20% = 10 retries in the window.
	for range 50 {
		b.attempt(now)
	}
	if n := grants(now); n != 8 { // 10 minus the 2 already granted
		t.Errorf("granted %d more retries, want 8", n)
	}
	// The window slides: after it, only the floor again.
	later := now.Add(11 * time.Second)
	if n := grants(later); n != 2 {
		t.Error("window did not slide")
	}
	if !newBudget(RetryBudget{Disabled: true}).allow(now) {
		t.Error("disabled budget refused")
	}
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	now := time.Unix(1000, 0)
	var changes []string
	b := newBreaker(Breaker{Threshold: 0.5, MinAttempts: 10, Window: 10 * time.Second, OpenFor: 5 * time.Second},
		func() time.Time { return now }, func(from, to BreakerState) { changes = append(changes, to.String()) })
	ctx := context.Background()
	// 9 failures: not enough attempts yet.
	for range 9 {
		b.record(false, true, false)
	}
	// Terminal failures are neutral.
	for range 20 {
		b.record(false, false, true)
	}
	if b.State() != BreakerClosed {
		t.Fatal("opened before MinAttempts")
	}
	b.record(false, true, false)
	if b.State() != BreakerOpen {
		t.Fatal("did not open at 10/10 failures")
	}
	// Open: acquire waits (a cancelled context shows it would block).
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	if _, _, err := b.acquire(cctx, 10); err == nil {
		t.Fatal("acquire did not block while open")
	}
	cancel()
	now = now.Add(5 * time.Second)
	n, probe, err := b.acquire(ctx, 10)
	if err != nil || n != 1 || !probe || b.State() != BreakerHalfOpen {
		t.Fatalf("half-open: n=%d probe=%v err=%v state=%v", n, probe, err, b.State())
	}
	// A failed probe opens it again.
	b.record(true, true, false)
	if b.State() != BreakerOpen {
		t.Fatal("failed probe did not reopen")
	}
	now = now.Add(5 * time.Second)
	if _, probe, _ = b.acquire(ctx, 10); !probe {
		t.Fatal("no probe")
	}
	b.record(true, false, false)
	if b.State() != BreakerClosed {
		t.Fatal("successful probe did not close")
	}
	if n, probe, _ := b.acquire(ctx, 10); n != 10 || probe {
		t.Fatalf("closed: n=%d probe=%v", n, probe)
	}
	want := "open half-open open half-open closed"
	if got := strings.Join(changes, " "); got != want {
		t.Errorf("changes %q, want %q", got, want)
	}
}

type codeError struct{ code string }

func (e *codeError) Error() string      { return "code " + e.code }
func (e *codeError) ErrorClass() string { return "Code" + e.code }

func TestClassify(t *testing.T) {
	o := DefaultOptions()
	o.Classifier = func(err error) Class {
		var ce *codeError
		if errors.As(err, &ce) && ce.code == "404" {
			return ClassTerminal
		}
		return ClassUnknown
	}
	w, err := New(nopSource{}, HandlerFunc(func(context.Context, *Message) error { return nil }), o)
	if err != nil {
		t.Fatal(err)
	}
	base := errors.New("x")
	for _, tc := range []struct {
		name string
		err  error
		want Class
	}{
		{"terminal mark", fmt.Errorf("ctx: %w", Terminal(base)), ClassTerminal},
		{"outer mark wins", Transient(Terminal(base)), ClassTransient},
		{"transient mark", Transient(base), ClassTransient},
		{"classifier", fmt.Errorf("get: %w", &codeError{"404"}), ClassTerminal},
		{"timeout", fmt.Errorf("call: %w", context.DeadlineExceeded), ClassTransient},
		{"unknown", io.ErrUnexpectedEOF, ClassTransient},
		{"panic", &PanicError{Value: "boom"}, ClassTerminal},
	} {
		if got, _, _ := w.classify(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	w.opts.UnknownIsTransient, w.opts.PanicIsTerminal = false, false
	if got, _, _ := w.classify(io.ErrUnexpectedEOF); got != ClassTerminal {
		t.Errorf("UnknownIsTransient=false: %v", got)
	}
	if got, _, _ := w.classify(&PanicError{Value: "boom"}); got != ClassTransient {
		t.Errorf("PanicIsTerminal=false: %v", got)
	}
	if c, after, ok := w.classify(RetryAfter(base, 3*time.Second)); c != ClassTransient || after != 3*time.Second || !ok {
		t.Errorf("RetryAfter: %v %v %v", c, after, ok)
	}

	// errors.Is / As see through the marks.
	e := Terminal(fmt.Errorf("wrap: %w", &codeError{"500"}))
	var ce *codeError
	if !errors.Is(e, ErrTerminal) || errors.Is(e, ErrTransient) || !errors.As(e, &ce) || !errors.Is(Transient(base), base) {
		t.Error("marks are not errors.Is/As friendly")
	}
	if Terminal(nil) != nil || Transient(nil) != nil || RetryAfter(nil, time.Second) != nil {
		t.Error("marking nil is not nil")
	}

	// Error classes and traces.
	if got := errorClass(e); got != "Code500" {
		t.Errorf("Classed: %q", got)
	}
	if got := errorClass(fmt.Errorf("a: %w", fmt.Errorf("b: %w", io.ErrUnexpectedEOF))); got != "unexpected EOF" {
		t.Errorf("wrapped sentinel: %q", got)
	}
	if got := errorClass(&PanicError{Value: 42}); got != "panic(int)" {
		t.Errorf("panic class: %q", got)
	}
	tr := errorTrace(fmt.Errorf("a: %w", Terminal(io.ErrUnexpectedEOF)))
	if !strings.Contains(tr, "*fmt.wrapError: a: unexpected EOF") || strings.Contains(tr, "classified") {
		t.Errorf("trace %q", tr)
	}
	if got := truncate("héllo", 2); got != "h" {
		t.Errorf("truncate split a rune: %q", got)
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := New(nopSource{}, HandlerFunc(nil), Options{Concurrency: 1}); err == nil || !strings.Contains(err.Error(), "DefaultOptions") {
		t.Errorf("zero Options accepted: %v", err)
	}
	for name, mut := range map[string]func(*Options){
		"prefetch":    func(o *Options) { o.Prefetch = 11 },
		"concurrency": func(o *Options) { o.Concurrency = 0 },
		"backoff":     func(o *Options) { o.Backoff.Cap = o.Backoff.Base / 2 },
		"budget":      func(o *Options) { o.RetryBudget.Ratio = 2 },
		"breaker":     func(o *Options) { o.Breaker.Threshold = 0 },
	} {
		o := DefaultOptions()
		mut(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := DefaultOptions()
	o.Breaker = Breaker{Disabled: true}
	o.RetryBudget = RetryBudget{Disabled: true}
	if err := o.Validate(); err != nil {
		t.Errorf("disabled breaker and budget: %v", err)
	}
}

type nopSource struct{}

func (nopSource) Receive(context.Context, int) ([]*Message, error) { return nil, nil }
func (nopSource) Ack(context.Context, *Message) error              { return nil }
func (nopSource) Extend(context.Context, *Message) error           { return nil }
func (nopSource) Release(context.Context, *Message) error          { return nil }
func (nopSource) Fail(context.Context, *Message, Failure) (Outcome, error) {
	return Outcome{}, nil
}
