package worker

import (
	"context"
	"sync"
	"time"
)

// RetryBudget limits early retries to a fraction of recent attempts
// (Envoy's retry budget, applied to a queue): when most deliveries fail,
// "retry after a short backoff" multiplies the load on a struggling
// downstream exactly when it can least take it. A transient failure over
// the budget is not retried early: its message waits out a whole lease
// (the visibility timeout) instead. It is delayed, never dropped.
type RetryBudget struct {
	// Ratio is the fraction of attempts in Window that may be early
	// retries. DefaultOptions: 0.2.
	Ratio float64
	// MinRetries are always allowed per Window, so that a quiet consumer
	// can still retry (20% of a trickle is nothing). DefaultOptions: 10.
	MinRetries int
	// Window is the sliding window. DefaultOptions: 30 s.
	Window time.Duration
	// Disabled turns the budget off: every transient failure is retried
	// after its backoff.
	Disabled bool
}

// Breaker is the circuit breaker: when the share of transient failures
// among recent attempts crosses Threshold, the worker stops receiving
// (open) for OpenFor, then lets one message through (half-open); if it
// succeeds the breaker closes, if it fails transiently it opens again.
// Only transient failures count: a terminal failure says something about
// the message, not about the downstream, and a paused consumer would not
// help it.
type Breaker struct {
	// Threshold is the failure ratio that opens the breaker.
	// DefaultOptions: 0.5.
	Threshold float64
	// MinAttempts in Window before the ratio is trusted. DefaultOptions: 20.
	MinAttempts int
	// Window is the sliding window. DefaultOptions: 10 s.
	Window time.Duration
	// OpenFor is how long receiving pauses before a probe. DefaultOptions: 5 s.
	OpenFor time.Duration
	// Disabled turns the breaker off.
	Disabled bool
}

// BreakerState is the state of the circuit breaker.
type BreakerState int

const (
	BreakerClosed   BreakerState = iota // receiving normally
	BreakerOpen                         // not receiving
	BreakerHalfOpen                     // one probe message at a time
)

func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// window counts events in a sliding time window of windowBuckets buckets.
type window struct {
	width   time.Duration // of one bucket
	buckets [windowBuckets][2]int
	starts  [windowBuckets]int64 // bucket start, in widths since the epoch
}

const windowBuckets = 10

func newWindow(d time.Duration) *window {
	return &window{width: max(d/windowBuckets, time.Millisecond)}
}

// add counts a and b at now.
func (w *window) add(now time.Time, a, b int) {
	n := now.UnixNano() / int64(w.width)
	i := n % windowBuckets
	if w.starts[i] != n {
		w.starts[i], w.buckets[i] = n, [2]int{}
	}
	w.buckets[i][0] += a
	w.buckets[i][1] += b
}

// sum returns the totals of the buckets still inside the window at now.
func (w *window) sum(now time.Time) (a, b int) {
	n := now.UnixNano() / int64(w.width)
	for i := range w.buckets {
		if n-w.starts[i] < windowBuckets {
			a += w.buckets[i][0]
			b += w.buckets[i][1]
		}
	}
	return a, b
}

func (w *window) reset() { *w = window{width: w.width} }

// budget implements RetryBudget. Counts: attempts, early retries granted.
type budget struct {
	cfg RetryBudget
	mu  sync.Mutex
	win *window
}

func newBudget(cfg RetryBudget) *budget { return &budget{cfg: cfg, win: newWindow(cfg.Window)} }

// attempt counts a finished delivery.
func (b *budget) attempt(now time.Time) {
	b.mu.Lock()
	b.win.add(now, 1, 0)
	b.mu.Unlock()
}

// allow reports whether one more early retry fits, and counts it if so.
func (b *budget) allow(now time.Time) bool {
	if b.cfg.Disabled {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	attempts, retries := b.win.sum(now)
	if float64(retries+1) > max(b.cfg.Ratio*float64(attempts), float64(b.cfg.MinRetries)) {
		return false
	}
	b.win.add(now, 0, 1)
	return true
}

// breaker implements Breaker. Counts: attempts, transient failures.
type breaker struct {
	cfg      Breaker
	now      func() time.Time
	onChange func(from, to BreakerState)

	mu        sync.Mutex
	state     BreakerState
	win       *window
	openUntil time.Time
	probing   bool          // a half-open probe is out
	changed   chan struct{} // closed and replaced on every state change
}

func newBreaker(cfg Breaker, now func() time.Time, onChange func(from, to BreakerState)) *breaker {
	return &breaker{cfg: cfg, now: now, onChange: onChange, win: newWindow(cfg.Window), changed: make(chan struct{})}
}

func (b *breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// setLocked changes the state; the caller calls the returned func (the
// change notification) after unlocking.
func (b *breaker) setLocked(s BreakerState) func() {
	from := b.state
	if from == s {
		return func() {}
	}
	b.state = s
	close(b.changed)
	b.changed = make(chan struct{})
	return func() { b.onChange(from, s) }
}

// acquire waits until receiving is allowed and returns how many messages
// may be received: max when closed, 1 for a half-open probe. probe says
// the caller holds the probe and must call done with its result (or
// cancelProbe when it received nothing).
func (b *breaker) acquire(ctx context.Context, maxN int) (n int, probe bool, err error) {
	if b.cfg.Disabled {
		return maxN, false, nil
	}
	for {
		b.mu.Lock()
		notify := func() {}
		if b.state == BreakerOpen && !b.now().Before(b.openUntil) {
			notify = b.setLocked(BreakerHalfOpen)
		}
		switch {
		case b.state == BreakerClosed:
			b.mu.Unlock()
			notify()
			return maxN, false, nil
		case b.state == BreakerHalfOpen && !b.probing:
			b.probing = true
			b.mu.Unlock()
			notify()
			return 1, true, nil
		}
		// Open: wait until the probe is due. Half-open with the probe
		// out: wait for its result.
		wait := time.Hour
		if b.state == BreakerOpen {
			wait = b.openUntil.Sub(b.now())
		}
		changed := b.changed
		b.mu.Unlock()
		notify()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, false, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// cancelProbe returns an unused probe.
func (b *breaker) cancelProbe() {
	b.mu.Lock()
	b.probing = false
	ch := b.changed
	b.changed = make(chan struct{})
	b.mu.Unlock()
	close(ch)
}

// record counts a finished delivery. transientFailure is true for a
// failure that says the downstream may be unwell; neutral is true for a
// result that says nothing (a terminal failure, a duplicate).
func (b *breaker) record(probe, transientFailure, neutral bool) {
	if b.cfg.Disabled {
		return
	}
	now := b.now()
	b.mu.Lock()
	notify := func() {}
	switch {
	case probe:
		b.probing = false
		switch {
		case transientFailure:
			b.openUntil = now.Add(b.cfg.OpenFor)
			notify = b.setLocked(BreakerOpen)
		case !neutral:
			b.win.reset()
			notify = b.setLocked(BreakerClosed)
		default:
			// Let the next probe decide.
			ch := b.changed
			b.changed = make(chan struct{})
			defer close(ch)
		}
	case neutral:
	default:
		f := 0
		if transientFailure {
			f = 1
		}
		b.win.add(now, 1, f)
		if b.state == BreakerClosed {
			attempts, failures := b.win.sum(now)
			if attempts >= b.cfg.MinAttempts && float64(failures) >= b.cfg.Threshold*float64(attempts) {
				b.openUntil = now.Add(b.cfg.OpenFor)
				notify = b.setLocked(BreakerOpen)
			}
		}
	}
	b.mu.Unlock()
	notify()
}
