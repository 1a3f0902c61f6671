package clock

import (
	"sync/atomic"
	"time"
)

// Steady is a wall clock without steps: it reads its base once, when
// made, and from then on that reading plus the time elapsed on the
// process's monotonic clock. A step of the base's wall time (an NTP step,
// a date command, a virtual machine resumed) does not reach it; the
// rate corrections of NTP, which Linux applies to the monotonic clock
// too, do. So a deadline it was asked for is reached after the time it
// was set for, whatever the wall clock does meanwhile.
//
// The base must run at real time's rate (Real, Offset): Steady's time
// moves with the process's monotonic clock, not with a Fake's Advance.
type Steady struct {
	anchor time.Time // the base's time when made, monotonic reading stripped
	start  time.Time // time.Now() when made, for its monotonic reading
}

// NewSteady returns a Steady clock that reads base's time now.
func NewSteady(base Clock) *Steady {
	return &Steady{anchor: base.Now().Round(0), start: time.Now()}
}

// Now returns the base's time when s was made plus the monotonic time
// elapsed since.
func (s *Steady) Now() time.Time { return s.anchor.Add(time.Since(s.start)) }

// NewTimer wraps time.NewTimer: a duration is the same on both clocks.
func (s *Steady) NewTimer(d time.Duration) Timer { return steadyTimer{realTimer{time.NewTimer(d)}, s} }

// NewTimerAt returns a timer that fires when Now reads t.
func (s *Steady) NewTimerAt(t time.Time) Timer {
	return steadyTimer{realTimer{time.NewTimer(t.Sub(s.Now()))}, s}
}

type steadyTimer struct {
	realTimer
	s *Steady
}

// ResetAt makes the timer fire when the Steady clock reads t.
func (r steadyTimer) ResetAt(t time.Time) bool { return r.realTimer.Reset(t.Sub(r.s.Now())) }

// SlewRate is how fast a Slewed clock moves toward its base after a
// step: 10 ms per second (it runs at 99 % or 101 % of real time
// meanwhile), the rate the cluster's leaders steer their clocks at.
const SlewRate = 0.01

// Slewed is a wall clock that turns its base's steps into slews: it runs
// on the monotonic clock from its base's time when made, and whenever
// the base's time differs from it (a step: an NTP step, a date command, a
// virtual machine resumed) it moves toward the base at SlewRate instead
// of jumping. It never runs backward, and a deadline it was asked for is
// reached at most SlewRate early (a timer fires at most that early and
// the code it wakes reads Now again). Without steps it reads its base's
// time.
//
// The base must run at real time's rate (Real, Offset), not a Fake.
type Slewed struct {
	base   Clock
	steady *Steady
	rate   float64
	seg    atomic.Pointer[slewSegment]
}

// slewSegment is a stretch of constant target: at monotonic elapsed time
// from the adjustment was adj, moving toward target at the clock's rate.
type slewSegment struct {
	from        time.Duration
	adj, target time.Duration
}

func (s *slewSegment) at(elapsed time.Duration, rate float64) time.Duration {
	moved := time.Duration(float64(max(elapsed-s.from, 0)) * rate)
	if s.adj > s.target {
		return max(s.target, s.adj-moved)
	}
	return min(s.target, s.adj+moved)
}

// NewSlewed returns a Slewed clock over base, reading base's time now.
func NewSlewed(base Clock) *Slewed { return newSlewed(base, SlewRate) }

func newSlewed(base Clock, rate float64) *Slewed {
	c := &Slewed{base: base, steady: NewSteady(base), rate: rate}
	c.seg.Store(&slewSegment{})
	return c
}

// Now returns the steady time plus the adjustment, which moves toward
// the base's time at the clock's rate.
func (c *Slewed) Now() time.Time {
	elapsed := time.Since(c.steady.start)
	st := c.steady.anchor.Add(elapsed)
	target := c.base.Now().Round(0).Sub(st)
	for {
		seg := c.seg.Load()
		if (target - seg.target).Abs() < time.Millisecond {
			return st.Add(seg.at(elapsed, c.rate))
		}
		// The base stepped (or this reading is the first since): a new
		// segment from where the adjustment is now.
		next := &slewSegment{from: elapsed, adj: seg.at(elapsed, c.rate), target: target}
		if next.from < seg.from {
			next.from = seg.from // an older reading than the segment's: keep time monotone
		}
		if c.seg.CompareAndSwap(seg, next) {
			return st.Add(next.at(elapsed, c.rate))
		}
	}
}

// NewTimer wraps time.NewTimer: a duration is the same on both clocks.
func (c *Slewed) NewTimer(d time.Duration) Timer { return slewedTimer{realTimer{time.NewTimer(d)}, c} }

// NewTimerAt returns a timer that fires when Now reads t (at most
// SlewRate early while the clock slews back).
func (c *Slewed) NewTimerAt(t time.Time) Timer {
	return slewedTimer{realTimer{time.NewTimer(t.Sub(c.Now()))}, c}
}

type slewedTimer struct {
	realTimer
	c *Slewed
}

// ResetAt makes the timer fire when the Slewed clock reads t.
func (r slewedTimer) ResetAt(t time.Time) bool { return r.realTimer.Reset(t.Sub(r.c.Now())) }
