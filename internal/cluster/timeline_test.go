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

// A leadership never starts ahead of its predecessor's clock: whatever the
// true offset within the measurement's bound, and whatever the old leader's
// own slew did since (1 % of the measurement's age), the new clock starts
// at or behind the old one — late by at most twice the bound.
func TestStartAdjustmentErrsLate(t *testing.T) {
	for _, est := range []time.Duration{-20 * time.Second, -3 * time.Millisecond, 0, 4 * time.Millisecond, 20 * time.Second} {
		for _, u := range []time.Duration{0, 500 * time.Microsecond, offsetMaxUncertainty} {
			for _, age := range []time.Duration{0, time.Second, offsetMaxAge} {
				adj := startAdjustment(clockOffset{measured: true, offset: est, uncertainty: u}, age)
				drift := time.Duration(float64(age) * slewRate)
				// The true offset (new wall clock minus old leader's clock,
				// now) lies in [est-u-drift, est+u+drift]; the new clock is
				// wall+adj, so it leads the old one by trueOffset+adj.
				for _, trueOff := range []time.Duration{est - u - drift, est, est + u + drift} {
					lead := trueOff + adj
					if lead > 0 {
						t.Fatalf("est %v u %v age %v: starts %v ahead of the old leader's clock (true offset %v)", est, u, age, lead, trueOff)
					}
					if lead < -2*(u+drift) {
						t.Fatalf("est %v u %v age %v: starts %v behind, more than twice the bound", est, u, age, -lead)
					}
				}
			}
		}
	}
}
