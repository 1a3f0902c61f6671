package cluster

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// A leadership's clock starts at the adjustment it was given and moves it
// toward 0 at 1 % of real time, never past 0, from either side; its timers
// fire when the adjusted clock reaches their instant.
func TestTimelineSlews(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	for _, adj0 := range []time.Duration{-3 * time.Second, 3 * time.Second, 0} {
		base := clock.NewFake(start)
		tl := newTimeline(base, adj0)
		if got := tl.Now().Sub(start); got != adj0 {
			t.Fatalf("adj0 %v: starts at %v, want %v", adj0, got, adj0)
		}
		base.Advance(100 * time.Second) // 1 s of slew
		want := adj0 - time.Second
		if adj0 < 0 {
			want = adj0 + time.Second
		}
		if adj0 == 0 {
			want = 0
		}
		if got := tl.Adjustment(); got != want {
			t.Fatalf("adj0 %v: after 100 s the adjustment is %v, want %v", adj0, got, want)
		}
		if got := tl.Now().Sub(base.Now()); got != want {
			t.Fatalf("adj0 %v: Now is %v off the base, want %v", adj0, got, want)
		}
		base.Advance(time.Hour) // long converged
		if got := tl.Adjustment(); got != 0 {
			t.Fatalf("adj0 %v: after an hour the adjustment is %v, want 0", adj0, got)
		}
	}

	// A timer for an instant on the adjusted clock fires when the base
	// reaches that instant minus the adjustment.
	base := clock.NewFake(start)
	tl := newTimeline(base, -10*time.Second) // the engine runs 10 s behind the base
	at := tl.Now().Add(5 * time.Second)
	tm := tl.NewTimerAt(at)
	base.Advance(4900 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("fired before the adjusted clock reached its instant")
	default:
	}
	base.Advance(200 * time.Millisecond)
	select {
	case <-tm.C():
	default:
		t.Fatal("did not fire once the adjusted clock passed its instant")
	}
}
