package clock

import (
	"sync/atomic"
	"time"
)

// MaxSlewStep bounds the steps of a base clock that Steady and Slewed
// hide: a step up to a minute (an NTP step, a date corrected by hand) is
// hidden, Steady's forever and Slewed's until it has slewed; a longer one
// is followed at once, as the wall clock would be. A longer one is most
// often not a correction but time that really passed while the machine
// slept (Go's monotonic clock stops during a suspend): hiding it would
// put the broker's time that far behind for a hundred times as long.
const MaxSlewStep = time.Minute

// SlewRate is how fast a Slewed clock moves toward its base after a
// step: 10 ms per second (it runs at 99 % or 101 % of real time
// meanwhile), the rate the cluster's leaders steer their clocks at.
const SlewRate = 0.01

// Steady is a wall clock without small steps: it reads its base once, when
// made, and from then on that reading plus the time elapsed on the
// process's monotonic clock, which Linux corrects for NTP's rate but
// never steps. A step of the base's wall time of up to MaxSlewStep does
// not reach it; a longer one does, at once (it re-reads its base).
//
// The base must run at real time's rate (Real, Offset): Steady's time
// moves with the process's monotonic clock, not with a Fake's Advance.
type Steady struct {
	base Clock
	anc  atomic.Pointer[anchor]
}

// anchor is the base's time (monotonic reading stripped) and time.Now()
// (for its monotonic reading) at the same moment.
type anchor struct{ wall, start time.Time }

// NewSteady returns a Steady clock that reads base's time now.
func NewSteady(base Clock) *Steady {
	s := &Steady{base: base}
	s.anc.Store(&anchor{wall: base.Now().Round(0), start: time.Now()})
	return s
}

// Now returns the base's time at the last anchor plus the monotonic time
// elapsed since.
func (s *Steady) Now() time.Time {
	for {
		a := s.anc.Load()
		st := a.wall.Add(time.Since(a.start))
		w := s.base.Now().Round(0)
		if w.Sub(st).Abs() <= MaxSlewStep {
			return st
		}
		if s.anc.CompareAndSwap(a, &anchor{wall: w, start: time.Now()}) {
			return w
		}
	}
}

// NewTimer wraps time.NewTimer: a duration is the same on both clocks.
func (s *Steady) NewTimer(d time.Duration) Timer { return nowTimer{realTimer{time.NewTimer(d)}, s.Now} }

// NewTimerAt returns a timer that fires when Now reads t.
func (s *Steady) NewTimerAt(t time.Time) Timer {
	return nowTimer{realTimer{time.NewTimer(t.Sub(s.Now()))}, s.Now}
}

// nowTimer is a real timer whose deadlines are read on a clock's Now.
type nowTimer struct {
	realTimer
	now func() time.Time
}

// ResetAt makes the timer fire when the clock reads t.
func (r nowTimer) ResetAt(t time.Time) bool { return r.realTimer.Reset(t.Sub(r.now())) }

// Slewed is a wall clock that turns its base's steps into slews: it runs
// on the monotonic clock from its base's time when made and, whenever the
// base's time differs from it by a millisecond or more (a step), moves
// toward the base at SlewRate instead of jumping: it does not run
// backward, and a deadline it was asked for is reached at most SlewRate
// early (a timer fires at most that early and the code it wakes reads Now
// again). Without steps it reads its base's time; a step longer than
// MaxSlewStep it follows at once, backward too, as the wall clock does.
//
// The base must run at real time's rate (Real, Offset), not a Fake.
type Slewed struct {
	base  Clock
	wall  time.Time // the base's time when made, monotonic reading stripped
	start time.Time // time.Now() when made, for its monotonic reading
	rate  float64
	seg   atomic.Pointer[slewSegment]
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
	c := &Slewed{base: base, wall: base.Now().Round(0), start: time.Now(), rate: rate}
	c.seg.Store(&slewSegment{})
	return c
}

// Now returns the steady time (the base's time when made plus the
// monotonic time elapsed) plus the adjustment, which moves toward the
// base's time at the clock's rate, or jumps to it after a step longer than
// MaxSlewStep.
func (c *Slewed) Now() time.Time {
	elapsed := time.Since(c.start)
	st := c.wall.Add(elapsed)
	target := c.base.Now().Round(0).Sub(st)
	for {
		seg := c.seg.Load()
		step := target - seg.target
		if step.Abs() < time.Millisecond {
			return st.Add(seg.at(elapsed, c.rate))
		}
		// The base stepped: a new segment from where the adjustment is
		// now, or from the base's time after a long step.
		next := &slewSegment{from: max(elapsed, seg.from), adj: seg.at(elapsed, c.rate), target: target}
		if step.Abs() > MaxSlewStep {
			next.adj = target
		}
		if c.seg.CompareAndSwap(seg, next) {
			return st.Add(next.at(elapsed, c.rate))
		}
	}
}

// NewTimer wraps time.NewTimer: a duration is the same on both clocks.
func (c *Slewed) NewTimer(d time.Duration) Timer { return nowTimer{realTimer{time.NewTimer(d)}, c.Now} }

// NewTimerAt returns a timer that fires when Now reads t (at most
// SlewRate early while the clock slews back).
func (c *Slewed) NewTimerAt(t time.Time) Timer {
	return nowTimer{realTimer{time.NewTimer(t.Sub(c.Now()))}, c.Now}
}
