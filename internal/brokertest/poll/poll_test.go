package poll

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// fatalT records what CheckFor reports instead of ending the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

// run calls CheckFor with a recording T and returns what it reported
// ("" when it returned).
func run(t *testing.T, timeout time.Duration, check func() error) (msg string) {
	ft := &fatalT{TB: t}
	defer func() {
		if r := recover(); r != nil {
			if r != ft {
				panic(r)
			}
			msg = ft.msg
		}
	}()
	CheckFor(ft, timeout, check)
	return ""
}

// TestCheckForPolls: CheckFor returns as soon as the check passes, after
// as many calls as it takes.
func TestCheckForPolls(t *testing.T) {
	calls := 0
	msg := run(t, 10*time.Second, func() error {
		calls++
		if calls < 5 {
			return errors.New("not yet")
		}
		return nil
	})
	if msg != "" || calls != 5 {
		t.Fatalf("reported %q after %d calls; want a return after 5", msg, calls)
	}
}

// TestCheckForReportsTheLastError: on timeout the test fails with the
// check's last error, not a generic message.
func TestCheckForReportsTheLastError(t *testing.T) {
	calls := 0
	msg := run(t, 5*time.Millisecond, func() error {
		calls++
		return fmt.Errorf("depth %d, want 0", calls)
	})
	want := fmt.Sprintf("depth %d, want 0", calls)
	if !strings.HasPrefix(msg, "poll: timed out after 5ms") || !strings.HasSuffix(msg, want) {
		t.Fatalf("reported %q; want the timeout and %q", msg, want)
	}
}

// TestTrue: True turns a condition into a check that names what is
// awaited.
func TestTrue(t *testing.T) {
	ok := false
	check := True("the queue to drain", func() bool { return ok })
	if err := check(); err == nil || err.Error() != "waiting for the queue to drain" {
		t.Fatalf("false condition: %v", err)
	}
	ok = true
	if err := check(); err != nil {
		t.Fatalf("true condition: %v", err)
	}
	if msg := run(t, time.Millisecond, True("never", func() bool { return false })); !strings.HasSuffix(msg, "waiting for never") {
		t.Fatalf("reported %q", msg)
	}
}

// TestAdvanceUntilStepsOnlyParkedGoroutines: a goroutine that does work
// after each tick and then parks again sees every step: five ticks take
// exactly five steps, however slowly it runs, and the goroutine ending
// after the fifth does not leave AdvanceUntil waiting for it to park.
func TestAdvanceUntilStepsOnlyParkedGoroutines(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var ticks atomic.Int32
	go func() {
		for range 5 {
			tm := clk.NewTimer(time.Second)
			<-tm.C()
			time.Sleep(time.Millisecond) // slow work between ticks
			ticks.Add(1)
		}
	}()
	took := AdvanceUntil(t, clk, time.Second, 1, "five ticks", func() bool { return ticks.Load() == 5 })
	if took != 5*time.Second {
		t.Fatalf("five ticks took %v of simulated time, want 5s: a step ran ahead of the goroutine", took)
	}
}
