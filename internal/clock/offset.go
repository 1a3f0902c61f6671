package clock

import "time"

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
