package cluster

import (
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// Cluster time: a failover does not make the engine's clock jump.
//
// Visibility deadlines, delays, retry backoffs and retention are
// wall-clock instants written by the leader that took the change. A new
// leader whose wall clock is Δ ahead of the old one's would redeliver every
// in-flight message up to Δ early at once (Δ behind: late). So a node that
// becomes leader runs its engine (and everything of its server) not on its
// own wall clock but on the old leader's: its clock plus an adjustment,
// −offset, where offset is its clock minus the old leader's as it measured
// it at its status reports (clockskew.go). The adjustment then slews toward
// 0 at slewRate — the engine's clock runs at 99 % or 101 % of real time
// until it has converged on this node's own clock — so a deadline set
// before the failover moves by at most 1 % of the time it still had to run,
// never by Δ at once, and the cluster's time ends on the leader's.
//
// The leader stamps its status answers with this engine clock, so the
// followers measure against the time the state was written in, and the
// next leader continues it, erring late rather than early
// (startAdjustment). A node with no good recent measurement (it just
// restarted, or every report's round trip was slow) starts on its own
// clock, as before: offsetMaxAge and offsetMaxUncertainty say what "good"
// is.

const (
	// slewRate is how fast the adjustment moves toward 0: 10 ms per
	// second of real time.
	slewRate = 0.01
	// offsetMaxAge: a measurement older than this is not used to start a
	// leadership's clock. A follower measures once a second, so a leader
	// that just died leaves one about that old.
	offsetMaxAge = 5 * time.Second
	// offsetMaxUncertainty: a measurement whose round trip was longer than
	// twice this is not used either (on a LAN a report takes well under a
	// millisecond).
	offsetMaxUncertainty = 10 * time.Millisecond
	// quietAdjustment: adjustments smaller than this start a leadership
	// without a log line (the usual case: clocks in sync, the correction
	// is the measurement's own error bound).
	quietAdjustment = 10 * time.Millisecond
)

// startAdjustment is the adjustment a leadership starts with, from a
// measurement c taken age ago: the old leader's clock can only be ahead
// of what the measurement says, never behind it, by more than its
// uncertainty (the old leader read its clock between the report's send
// and its answer) plus what its own slew moved since (age × slewRate), so
// the new clock starts that much behind the measured one. A new leader
// can then be late against its predecessor, by at most twice that bound,
// but never early: no lease it inherits ends before its time.
func startAdjustment(c clockOffset, age time.Duration) time.Duration {
	return -(c.offset + c.uncertainty + time.Duration(float64(age)*slewRate))
}

// timeline is a leadership's engine clock: base plus an adjustment that
// starts at adj0 and moves toward 0 at slewRate from start (on base's
// monotonic reading).
type timeline struct {
	base  clock.Clock
	adj0  time.Duration
	start time.Time
}

// newTimeline starts a leadership's clock on base, adjusted by adj0.
func newTimeline(base clock.Clock, adj0 time.Duration) *timeline {
	return &timeline{base: base, adj0: adj0, start: base.Now()}
}

// adjustmentAt is the adjustment when base reads now.
func (t *timeline) adjustmentAt(now time.Time) time.Duration {
	if t.adj0 == 0 {
		return 0
	}
	moved := time.Duration(float64(now.Sub(t.start)) * slewRate)
	if t.adj0 > 0 {
		return max(0, t.adj0-moved)
	}
	return min(0, t.adj0+moved)
}

// Adjustment is the engine clock minus base now.
func (t *timeline) Adjustment() time.Duration { return t.adjustmentAt(t.base.Now()) }

// Now implements clock.Clock.
func (t *timeline) Now() time.Time {
	now := t.base.Now()
	return now.Add(t.adjustmentAt(now))
}

// NewTimer implements clock.Clock: a duration is the same on both clocks
// (within the 1 % slew).
func (t *timeline) NewTimer(d time.Duration) clock.Timer { return t.base.NewTimer(d) }

// NewTimerAt implements clock.Clock: it fires when the engine clock reads
// at, as the adjustment is now (a deadline far off may fire up to 1 % of
// its distance early or late; the engine checks what is due when a timer
// fires and sets the next).
func (t *timeline) NewTimerAt(at time.Time) clock.Timer {
	return &timelineTimer{Timer: t.base.NewTimerAt(at.Add(-t.Adjustment())), tl: t}
}

// timelineTimer converts ResetAt's instant like NewTimerAt.
type timelineTimer struct {
	clock.Timer
	tl *timeline
}

// ResetAt implements clock.Timer.
func (r *timelineTimer) ResetAt(at time.Time) bool {
	return r.Timer.ResetAt(at.Add(-r.tl.Adjustment()))
}

// leadershipClock returns the clock for a leadership this node starts now:
// the timeline of the last leader it measured against, when it has a good
// recent measurement of another node's, else its own clock.
func (n *Node) leadershipClock() *timeline {
	n.mu.Lock()
	c := n.clockGood
	n.mu.Unlock()
	now := n.clk.Now()
	adj := time.Duration(0)
	if age := now.Sub(c.at); c.measured && c.leader != n.opts.Cluster.NodeID && age >= 0 && age <= offsetMaxAge {
		adj = startAdjustment(c, age)
	}
	switch {
	case adj.Abs() > clockSkewWarn:
		n.log.Warn("leading on the previous leader's clock, which is far from this node's: slewing to this node's own at 1 %; fix the time sync of whichever is wrong",
			"previous_leader", c.leader, "adjustment", adj.Round(time.Millisecond), "converged_in", (time.Duration(float64(adj.Abs()) / slewRate)).Round(time.Second))
	case adj.Abs() >= quietAdjustment:
		n.log.Info("leading on the previous leader's clock, slewing to this node's own at 1 %",
			"previous_leader", c.leader, "adjustment", adj.Round(time.Millisecond), "converged_in", (time.Duration(float64(adj.Abs()) / slewRate)).Round(time.Second))
	}
	return newTimeline(n.clk, adj)
}
