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
		tl := newTimeline(base, adj0, 0)
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
	tl := newTimeline(base, -10*time.Second, 0) // the engine runs 10 s behind the base
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

// The cluster's clock goes to the median of the voters' clocks: an odd
// count takes the middle one; an even count the middle one nearer to
// where the clock is (two of three voters left keep it); fewer than a
// majority of the voters heard steers nothing.
func TestMedianTarget(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		diffs   []time.Duration
		voters  int
		current time.Duration
		want    time.Duration
		ok      bool
	}{
		{[]time.Duration{0, -20 * s, -20 * s}, 3, 0, -20 * s, true}, // the leader is the odd one out
		{[]time.Duration{0, 0, 3 * s}, 3, 0, 0, true},               // a follower is
		{[]time.Duration{0, -20 * s}, 3, -20 * s, -20 * s, true},    // a tie keeps the clock where it is
		{[]time.Duration{0, -20 * s}, 3, 0, 0, true},
		{[]time.Duration{0}, 3, 0, 0, false}, // the leader alone is no majority
		{[]time.Duration{0, s}, 4, 0, 0, false},
		{[]time.Duration{0, 2 * s, -s, 5 * s, 4 * s}, 5, 0, 2 * s, true},
	} {
		got, ok := medianTarget(c.diffs, c.voters, c.current)
		if got != c.want || ok != c.ok {
			t.Errorf("medianTarget(%v, %d voters, at %v) = %v, %v; want %v, %v", c.diffs, c.voters, c.current, got, ok, c.want, c.ok)
		}
	}
}

// Retargeting continues from where the adjustment is, toward the new
// target, at the same rate, in either direction.
func TestTimelineRetarget(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	base := clock.NewFake(start)
	tl := newTimeline(base, -2*time.Second, 0) // toward 0
	base.Advance(100 * time.Second)            // -1 s now
	tl.retarget(-5 * time.Second)              // the voters are 5 s behind this node
	if got := tl.Adjustment(); got != -time.Second {
		t.Fatalf("after the retarget: %v, want -1s (no jump)", got)
	}
	base.Advance(200 * time.Second) // 2 s of slew toward -5 s
	if got := tl.Adjustment(); got != -3*time.Second {
		t.Fatalf("200 s later: %v, want -3s", got)
	}
	base.Advance(time.Hour)
	if got := tl.Adjustment(); got != -5*time.Second {
		t.Fatalf("an hour later: %v, want -5s (the target, not past it)", got)
	}
}
