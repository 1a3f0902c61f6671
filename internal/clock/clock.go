// Package clock is the single source of time for Sluice.
//
// Every timer in the broker (visibility, delay, retention, long-poll waits,
// backoff) reads time through a Clock, so tests can drive time forward with a
// Fake instead of sleeping. Production code uses Real.
package clock

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// NewTimerAt returns a timer that fires once at t (at once if t has
	// passed): for a deadline computed from an earlier reading of Now
	// (see Timer.ResetAt).
	NewTimerAt(t time.Time) Timer
}

// Timer is the part of *time.Timer that Sluice uses.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset makes the timer fire after d; it reports whether it was active.
	Reset(d time.Duration) bool
	// ResetAt makes the timer fire at t (at once if t has passed); it
	// reports whether it was active. A deadline computed from an earlier
	// reading of Now should be armed with ResetAt, not with Reset of the
	// difference: time may have moved since that reading (on a Fake, a
	// whole Advance), and Reset would fire that much late.
	ResetAt(t time.Time) bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTimerAt wraps time.NewTimer(time.Until(t)).
func (Real) NewTimerAt(t time.Time) Timer { return realTimer{time.NewTimer(time.Until(t))} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
func (r realTimer) ResetAt(t time.Time) bool   { return r.t.Reset(time.Until(t)) }

// Fake is a manually advanced clock for tests. Its timers fire, in deadline
// order, when Advance moves the time past their deadline. The zero value is
// not usable; call NewFake.
//
// A goroutine is parked on a Fake when it holds a timer that is waiting
// (made by NewTimer or Reset, not yet fired, not stopped). Tests that
// advance the clock while other goroutines wait on it call BlockUntil
// first, so each Advance reaches goroutines that have finished their work
// and parked, instead of sleeping and hoping they have.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// changed is closed, and replaced, whenever len(timers) changes.
	changed chan struct{}
}

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start, changed: make(chan struct{})} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTimerAt returns a timer that fires when the time reaches when.
func (f *Fake) NewTimerAt(when time.Time) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.ResetAt(when)
	return t
}

// Advance moves the fake time forward by d and fires every timer whose
// deadline is reached.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.when.After(now) {
			due = append(due, t)
			t.active = false
		} else {
			kept = append(kept, t)
		}
	}
	f.timers = kept
	if len(due) > 0 {
		f.changedLocked()
	}
	// Sorted under the lock: a goroutine woken by an earlier timer of
	// due may Reset a later one (writing its when) before this loop
	// reaches it.
	sort.Slice(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	f.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- now:
		default:
		}
	}
}

// Timers returns how many timers are waiting; tests use it to know that a
// goroutine has parked on the clock before they advance it.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// BlockUntil blocks until at least n timers are waiting on f (see Fake:
// n goroutines are parked) and returns nil, or until ctx ends and returns
// an error that names n, how many timers were waiting, and ctx's error.
// A test that expects the wrong count therefore fails with that message
// when its deadline passes instead of hanging.
//
// At least n: timers that other goroutines hold count too, so n is the
// number the test knows must be parked once every goroutine it drives is
// idle.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		have, changed := len(f.timers), f.changed
		f.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("clock: %d timers waiting, want at least %d: %w", f.Timers(), n, ctx.Err())
		}
	}
}

// changedLocked wakes every BlockUntil; f.mu is held.
func (f *Fake) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.stopLocked()
}

func (t *fakeTimer) stopLocked() bool {
	if !t.active {
		return false
	}
	t.active = false
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			t.f.changedLocked()
			break
		}
	}
	return true
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	return t.resetLocked(t.f.now.Add(d))
}

func (t *fakeTimer) ResetAt(when time.Time) bool {
	t.f.mu.Lock()
	return t.resetLocked(when)
}

// resetLocked arms t for when; it is called with f.mu held and releases it.
func (t *fakeTimer) resetLocked(when time.Time) bool {
	was := t.stopLocked()
	t.when = when
	if !when.After(t.f.now) {
		t.f.mu.Unlock()
		select {
		case t.c <- when: // not t.when: read without the lock, another Reset may write it
		default:
		}
		return was
	}
	t.active = true
	t.f.timers = append(t.f.timers, t)
	t.f.changedLocked()
	t.f.mu.Unlock()
	return was
}
