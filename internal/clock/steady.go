package clock

import "time"

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
