package clock

import (
	"testing"
	"time"
)

// TestOffset: Now is the wall clock moved by By, and a timer armed for an
// instant on that clock (NewTimerAt, ResetAt) fires when the clock reads
// it, not By early or late.
func TestOffset(t *testing.T) {
	o := Offset{By: time.Hour}
	if d := time.Until(o.Now()); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Fatalf("Now is %v off the wall clock, want 1h", d)
	}
	for _, arm := range []struct {
		name string
		make func(at time.Time) Timer
	}{
		{"NewTimerAt", o.NewTimerAt},
		{"ResetAt", func(at time.Time) Timer {
			tm := o.NewTimer(time.Hour)
			tm.ResetAt(at)
			return tm
		}},
	} {
		at := o.Now().Add(50 * time.Millisecond)
		tm := arm.make(at)
		select {
		case <-tm.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: a timer for 50 ms ahead on the offset clock had not fired after 10 s", arm.name)
		}
		if now := o.Now(); now.Before(at) {
			t.Errorf("%s: fired %v before the offset clock read its deadline", arm.name, at.Sub(now))
		}
	}
}
