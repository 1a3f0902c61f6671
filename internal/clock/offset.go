package clock

import (
	"sync/atomic"
	"time"
)

// Offset is the wall clock moved by By: a node whose time sync is off.
// Tests (and the cluster fault harness's test builds) use it to run a node
// ahead of or behind the others; nothing in a production build does.
// Its timers fire when Now reads their deadline.
type Offset struct {
	By time.Duration
}

// Now returns time.Now() moved by By.
func (o Offset) Now() time.Time { return time.Now().Add(o.By) }

// NewTimer wraps time.NewTimer: a duration is the same on both clocks.
func (o Offset) NewTimer(d time.Duration) Timer {
	return offsetTimer{realTimer{time.NewTimer(d)}, o.By}
}

// NewTimerAt returns a timer that fires when Now reads t.
func (o Offset) NewTimerAt(t time.Time) Timer {
	return offsetTimer{realTimer{time.NewTimer(time.Until(t.Add(-o.By)))}, o.By}
}

type offsetTimer struct {
	realTimer
	by time.Duration
}

// ResetAt makes the timer fire when the Offset clock reads t.
func (r offsetTimer) ResetAt(t time.Time) bool { return r.realTimer.ResetAt(t.Add(-r.by)) }

// Stepping is the wall clock moved by an amount that can change while it
// runs (Step): a clock an NTP step, a date command or a resumed machine
// moves at once. Tests use it; its readings carry no monotonic reading, as
// after a real step the wall time alone moved. The zero value is the wall
// clock.
type Stepping struct{ by atomic.Int64 }

// Step moves the clock by d from where it is.
func (s *Stepping) Step(d time.Duration) { s.by.Add(int64(d)) }

// Now returns the wall time moved by every Step so far.
func (s *Stepping) Now() time.Time { return time.Now().Add(time.Duration(s.by.Load())).Round(0) }

// NewTimer wraps time.NewTimer: a duration is the same on both clocks.
func (s *Stepping) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTimerAt returns a timer that fires when Now reads t, if the clock
// does not step meanwhile.
func (s *Stepping) NewTimerAt(t time.Time) Timer {
	return nowTimer{realTimer{time.NewTimer(t.Sub(s.Now()))}, s.Now}
}
