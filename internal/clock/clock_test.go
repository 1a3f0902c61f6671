package clock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestBlockUntilWaitsForParkedGoroutines: BlockUntil returns once the
// goroutines a test drives have parked on the clock, so the Advance that
// follows reaches them; each wakes, does its work, and parks again.
func TestBlockUntilWaitsForParkedGoroutines(t *testing.T) {
	f := NewFake(epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ticks atomic.Int32
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			for range 3 {
				tm := f.NewTimer(time.Second)
				<-tm.C()
				ticks.Add(1) // the work a wake-up does, before parking again
			}
			done <- struct{}{}
		}()
	}
	for round := range 3 {
		if err := f.BlockUntil(ctx, 2); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// Both parked again: both did the work of the previous wake-up.
		if n := ticks.Load(); n != int32(2*round) {
			t.Fatalf("round %d: %d ticks before the advance, want %d", round, n, 2*round)
		}
		f.Advance(time.Second)
		if n := f.Timers(); n != 0 {
			t.Fatalf("round %d: %d timers waiting after the advance fired both", round, n)
		}
	}
	for range 2 {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("a goroutine did not finish")
		}
	}
	if n := ticks.Load(); n != 6 {
		t.Fatalf("%d ticks, want 6", n)
	}
}

// TestBlockUntilDeadline: a wrong count fails with a message naming what
// was waiting and what was wanted, once the context ends.
func TestBlockUntilDeadline(t *testing.T) {
	f := NewFake(epoch)
	f.NewTimer(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := f.BlockUntil(ctx, 2)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 timers waiting, want at least 2") {
		t.Fatalf("BlockUntil(2) with one timer: %v", err)
	}
	if err := f.BlockUntil(context.Background(), 1); err != nil {
		t.Fatalf("BlockUntil(1) with one timer: %v", err)
	}
}

// TestBlockUntilCounts: Stop, Reset, a zero Reset and Advance change the
// count BlockUntil sees; a Stop wakes nobody into a false success.
func TestBlockUntilCounts(t *testing.T) {
	f := NewFake(epoch)
	a := f.NewTimer(time.Second)
	b := f.NewTimer(2 * time.Second)
	if n := f.Timers(); n != 2 {
		t.Fatalf("%d timers, want 2", n)
	}
	if !a.Stop() || f.Timers() != 1 {
		t.Fatalf("after Stop: %d timers", f.Timers())
	}
	done := make(chan error, 1)
	go func() { done <- f.BlockUntil(context.Background(), 2) }()
	b.Reset(3 * time.Second) // still one waiting
	select {
	case err := <-done:
		t.Fatalf("BlockUntil(2) returned %v with one timer waiting", err)
	default:
	}
	a.Reset(0) // fires at once: not waiting
	if f.Timers() != 1 {
		t.Fatalf("a zero Reset left %d timers waiting", f.Timers())
	}
	a.Reset(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Second)
	if f.Timers() != 1 {
		t.Fatalf("after firing one of two: %d timers", f.Timers())
	}
	f.Advance(2 * time.Second)
	if f.Timers() != 0 {
		t.Fatalf("after firing both: %d timers", f.Timers())
	}
}

// ResetAt arms a timer for a deadline, not a duration: a deadline computed
// before the clock moved still fires when it is reached (Reset of the
// difference would fire that much late), and one already past fires at
// once. The engine's scheduler relies on it (TestLongPollWakesOnLeaseExpiry
// failed about once in a few thousand runs under load without it).
func TestResetAtFiresAtTheDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	tm := f.NewTimer(time.Hour)
	deadline := start.Add(3 * time.Second) // computed at start
	f.Advance(3 * time.Second)             // the clock moves before it is armed
	tm.Stop()
	tm.ResetAt(deadline)
	select {
	case got := <-tm.C():
		if !got.Equal(deadline) {
			t.Fatalf("fired with %v, want %v", got, deadline)
		}
	default:
		t.Fatal("a deadline already reached did not fire at once")
	}
	tm.ResetAt(start.Add(5 * time.Second))
	f.Advance(time.Second)
	select {
	case <-tm.C():
		t.Fatal("fired a second early")
	default:
	}
	f.Advance(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("did not fire at its deadline")
	}
	r := Real{}.NewTimer(time.Hour)
	r.ResetAt(time.Now().Add(-time.Second))
	select {
	case <-r.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real timer: a past deadline did not fire")
	}
}
