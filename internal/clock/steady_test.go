package clock

import (
	"testing"
	"time"
)

// TestSteadyIgnoresWallSteps: a Steady clock starts on its base's time,
// keeps the time elapsed when the base's wall clock steps by up to
// MaxSlewStep, and its timers fire by elapsed time, not by the stepped wall
// clock; a longer step it follows at once.
func TestSteadyIgnoresWallSteps(t *testing.T) {
	base := &Stepping{}
	base.Step(5 * time.Second)
	s := NewSteady(base)
	if d := s.Now().Sub(base.Now()); d.Abs() > 50*time.Millisecond {
		t.Fatalf("Steady starts %v off its base", d)
	}
	before := s.Now()
	base.Step(-50 * time.Second) // the wall clock steps 50 s back
	if d := s.Now().Sub(before); d < 0 || d > 50*time.Millisecond {
		t.Fatalf("Steady moved %v when its base stepped 50 s back", d)
	}
	deadline := s.Now().Add(30 * time.Millisecond)
	tm := s.NewTimerAt(deadline)
	base.Step(100 * time.Second) // and 100 s forward: 50 s ahead
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
	// Two hours forward (a machine that slept): followed at once.
	base.Step(2 * time.Hour)
	if d := s.Now().Sub(base.Now()); d.Abs() > 50*time.Millisecond {
		t.Fatalf("Steady is %v off its base after a step of two hours", d)
	}
}

// TestSlewedTurnsStepsIntoSlews: a Slewed clock reads its base while the
// base does not step; when the base steps forward or back it does not
// jump, never runs backward, and moves toward the base at its rate.
func TestSlewedTurnsStepsIntoSlews(t *testing.T) {
	base := &Stepping{}
	c := newSlewed(base, 0.5) // fast, so the test need not wait 1,000 s
	if d := c.Now().Sub(base.Now()); d.Abs() > 10*time.Millisecond {
		t.Fatalf("Slewed starts %v off its base", d)
	}
	for _, step := range []time.Duration{200 * time.Millisecond, -300 * time.Millisecond} {
		before := c.Now()
		base.Step(step)
		after := c.Now()
		if d := after.Sub(before); d < 0 || d > 10*time.Millisecond {
			t.Fatalf("a step of %v moved the clock by %v at once", step, d)
		}
		last := after
		deadline := time.Now().Add(20 * time.Second)
		for {
			now := c.Now()
			if now.Before(last) {
				t.Fatalf("the clock ran backward by %v while slewing %v", last.Sub(now), step)
			}
			last = now
			if d := now.Sub(base.Now()); d.Abs() < 5*time.Millisecond {
				break // caught up with the base
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %v off the base 20 s after a step of %v", now.Sub(base.Now()), step)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A step longer than MaxSlewStep is followed at once.
	base.Step(3 * time.Hour)
	if d := c.Now().Sub(base.Now()); d.Abs() > 10*time.Millisecond {
		t.Fatalf("Slewed is %v off its base after a step of three hours", d)
	}
}
