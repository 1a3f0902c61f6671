package clock

import (
	"sync/atomic"
	"testing"
	"time"
)

// stepped is the wall clock moved by an amount a test changes while it
// runs: a wall clock that steps.
type stepped struct{ by atomic.Int64 }

func (c *stepped) Now() time.Time                 { return time.Now().Add(time.Duration(c.by.Load())).Round(0) }
func (c *stepped) NewTimer(d time.Duration) Timer { return Real{}.NewTimer(d) }
func (c *stepped) NewTimerAt(t time.Time) Timer   { return Real{}.NewTimer(t.Sub(c.Now())) }

// TestSteadyIgnoresWallSteps: a Steady clock starts on its base's time and
// keeps the time elapsed when the base's wall clock steps, and its timers
// fire by elapsed time, not by the stepped wall clock.
func TestSteadyIgnoresWallSteps(t *testing.T) {
	base := &stepped{}
	base.by.Store(int64(5 * time.Second))
	s := NewSteady(base)
	if d := s.Now().Sub(base.Now()); d.Abs() > 50*time.Millisecond {
		t.Fatalf("Steady starts %v off its base", d)
	}
	before := s.Now()
	base.by.Store(int64(-time.Hour)) // the wall clock steps an hour back
	if d := s.Now().Sub(before); d < 0 || d > 50*time.Millisecond {
		t.Fatalf("Steady moved %v when its base stepped an hour back", d)
	}
	deadline := s.Now().Add(30 * time.Millisecond)
	tm := s.NewTimerAt(deadline)
	base.by.Store(int64(time.Hour)) // and two hours forward
	select {
	case <-tm.C():
		if now := s.Now(); now.Before(deadline) {
			t.Fatalf("timer fired %v before its deadline", deadline.Sub(now))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("timer did not fire")
	}
	tm.ResetAt(s.Now().Add(10 * time.Millisecond)) // a fired timer: reports false
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("timer reset with ResetAt did not fire")
	}
}
