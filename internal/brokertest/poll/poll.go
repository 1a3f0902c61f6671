// Package poll is how Sluice's tests wait for a condition: call a check
// until it passes, never sleep a fixed time and hope. It is the one poll
// helper of the repository (the pattern nats-server calls checkFor).
//
// It lives apart from brokertest, and imports nothing of Sluice but the
// clock, so that every package's own tests can use it, including the
// internal tests of packages that brokertest itself imports (engine, sqs,
// amqp, alerts...), which could not import brokertest.
package poll

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// maxPause bounds the pause between two checks.
const maxPause = 10 * time.Millisecond

// CheckFor calls check until it returns nil. If timeout passes first, it
// fails the test with check's last error. The first check runs at once;
// the pause between checks starts at 100µs and doubles up to 10ms, so a
// condition that is already true costs nothing and a slow one does not
// spin. The timeout is a bound on a hang, not a measurement: choose it
// generously (seconds).
//
// Like t.Fatal, it must be called from the test's goroutine. check runs on
// that goroutine too, so it may use t, but should report by returning an
// error rather than failing the test itself.
func CheckFor(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := 100 * time.Microsecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("poll: timed out after %v: %v", timeout, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}

// True makes a check of cond for CheckFor: nil when cond holds, else an
// error saying that the test is waiting for what.
func True(what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("waiting for %s", what)
	}
}

// AdvanceUntil advances the fake clock clk by step until cond holds, and
// returns the simulated time that passed. Before each step it waits (in
// real time, up to 10 seconds, then it fails the test) until cond holds or
// at least parked timers wait on clk: parked is how many the test's
// goroutines hold once every one of them is idle (a scheduler, a move
// task waiting for tokens...). So each step reaches goroutines that have
// finished the work of the previous one; it never sleeps and hopes.
//
// A goroutine that ends instead of parking again (a task that completes)
// must make cond true, or the wait fails naming the count it saw.
func AdvanceUntil(t testing.TB, clk *clock.Fake, step time.Duration, parked int, what string, cond func() bool) time.Duration {
	t.Helper()
	start := clk.Now()
	for {
		held := false
		CheckFor(t, 10*time.Second, func() error {
			if held = cond(); held {
				return nil
			}
			if n := clk.Timers(); n < parked {
				return fmt.Errorf("waiting for %s: %d timers parked on the clock, want %d (%v simulated)", what, n, parked, clk.Now().Sub(start))
			}
			return nil
		})
		if held {
			return clk.Now().Sub(start)
		}
		clk.Advance(step)
	}
}

// Parked waits until at least n timers wait on the fake clock clk, that
// is until the goroutines the test drives are parked on it (see
// clock.Fake.BlockUntil), and fails the test, naming the count it saw, if
// that takes more than 10 seconds. Call it from the test's goroutine.
func Parked(t testing.TB, clk *clock.Fake, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntil(ctx, n); err != nil {
		t.Fatalf("poll: %v", err)
	}
}
