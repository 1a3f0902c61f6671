package cluster

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
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
// it at its status reports (clockskew.go). The adjustment then slews, at
// slewRate (the engine's clock runs at 99 % or 101 % of real time while it
// moves), toward a target: none (it holds the clock it started on) until
// its followers report, then the median of the voters' clocks
// (retargetClockLocked), so
// a deadline set before the failover moves by at most 1 % of the time it
// still had to run, never by Δ at once, and the cluster's time follows the
// majority's clocks: one skewed node, leader or not, does not move it.
//
// The leader stamps its status answers with this engine clock, so the
// followers measure against the time the state was written in, and the
// next leader continues it, erring late rather than early
// (startAdjustment). A node with no good recent measurement (it just
// restarted, or every report's round trip was slow: offsetMaxAge and
// offsetMaxUncertainty say what "good" is) asks the voters for their
// clocks instead (clockprobe.go), and starts on its own only when fewer
// than a majority answer.

const (
	// slewRate is how fast the adjustment moves toward its target: 10 ms
	// per second of real time.
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
// slews toward a target at slewRate. It starts at startAdjustment's value
// and holds it (target = start); the leader retargets it to the
// median of the voters' clocks as their reports arrive (medianTarget), so
// the cluster's time follows the majority's clocks, not whichever node
// leads. Readers are lock-free: the current segment is swapped whole.
type timeline struct {
	base clock.Clock
	seg  atomic.Pointer[segment]
	mu   sync.Mutex // serializes retarget
}

// segment is the adjustment from base reading from on: adj then, moving
// toward target at slewRate.
type segment struct {
	from        time.Time
	adj, target time.Duration
}

// at is the segment's adjustment when base reads now.
func (s *segment) at(now time.Time) time.Duration {
	moved := time.Duration(float64(now.Sub(s.from)) * slewRate)
	if s.adj > s.target {
		return max(s.target, s.adj-moved)
	}
	return min(s.target, s.adj+moved)
}

// newTimeline starts a leadership's clock on base, adjusted by adj0 and
// slewing toward target.
func newTimeline(base clock.Clock, adj0, target time.Duration) *timeline {
	t := &timeline{base: base}
	t.seg.Store(&segment{from: base.Now(), adj: adj0, target: target})
	return t
}

// retarget makes the adjustment slew toward target from where it is now.
func (t *timeline) retarget(target time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.seg.Load()
	if (old.target - target).Abs() < time.Millisecond {
		return // measurement noise: not worth a new segment
	}
	now := t.base.Now()
	t.seg.Store(&segment{from: now, adj: old.at(now), target: target})
}

// medianTarget is the adjustment that puts the engine clock on the median
// of the voters' clocks: diffs holds, for each voter that reported, its
// wall clock minus this leader's (the leader's own, 0, included). With an
// even count the middle value nearer to current wins, so a tie (two
// voters left of three) keeps the clock where it is. ok is false when
// fewer than a majority of voters are in diffs.
func medianTarget(diffs []time.Duration, voters int, current time.Duration) (time.Duration, bool) {
	if len(diffs) == 0 || 2*len(diffs) <= voters {
		return 0, false
	}
	slices.Sort(diffs)
	k := len(diffs) / 2
	if len(diffs)%2 == 1 {
		return diffs[k], true
	}
	lo, hi := diffs[k-1], diffs[k]
	if (current - lo).Abs() <= (hi - current).Abs() {
		return lo, true
	}
	return hi, true
}

// Behind is how far the clock is behind the target it slews toward now
// (0 when on it or ahead).
func (t *timeline) Behind() time.Duration {
	s := t.seg.Load()
	return max(s.target-s.at(t.base.Now()), 0)
}

// Adjustment is the engine clock minus base now.
func (t *timeline) Adjustment() time.Duration { return t.seg.Load().at(t.base.Now()) }

// Now implements clock.Clock.
func (t *timeline) Now() time.Time {
	now := t.base.Now()
	return now.Add(t.seg.Load().at(now))
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

// leadershipClock returns the clock for a leadership of shard k this node
// starts now. Shard 0's is the cluster's clock: the timeline of the last
// leader it measured against, when it has a good recent measurement of
// another node's; else the one its voters' answers give (clockprobe.go),
// waiting at most probeWait for them; else its own clock. Every other
// shard runs on the cluster's clock too, never on a clock of its own: on
// shard 0's timeline's adjustment when this node leads shard 0, else
// started as shard 0's is, and either way steered after that (as the
// cluster's clock is measured or moves) by steerShardClocksLocked. A
// leader of shard k thus hands its successor the clock the successor
// starts on, whichever node that is.
//
// Until 2026-12-01 a shard above 0 started on its measurement of shard
// 0's clock and then slewed toward its leader's own wall clock: a leader
// whose clock was behind the cluster's drifted 1 % of its term behind it,
// and its successor, starting on the cluster's clock, ended that much of
// every inherited lease early (docs/reliability.md).
func (n *Node) leadershipClock(ctx context.Context, k int) *timeline {
	n.mu.Lock()
	c, cluster := n.clockGood, n.timeline
	n.mu.Unlock()
	if k > 0 && cluster != nil {
		return newTimeline(clock.NewSteady(n.clk), n.boundByBeacon(ctx, k, cluster.Adjustment(), nil), cluster.seg.Load().target)
	}
	now := n.clk.Now()
	var adj time.Duration
	from := "the previous leader's clock, as this node measured it"
	if k > 0 {
		from = "the cluster's clock, as this node measured it"
	}
	// Shard 0's voters' answers, when this node asked them: they carry
	// shard 0's stamp bound as well, which boundByBeacon then need not
	// ask for again (another probeWait when a voter is down).
	var shard0 *[]voterAnswer
	if age := now.Sub(c.at); c.measured && c.leader != n.opts.Cluster.NodeID && age >= 0 && age <= offsetMaxAge {
		adj = startAdjustment(c, age)
	} else {
		a, f, ok, answers := n.probeClock(ctx)
		if ok {
			adj, from = a, f
		} else {
			n.log.Warn("leading on this node's own clock: it has no recent measurement of the cluster's clock and fewer than a majority of the voters answered its clock probe; deadlines inherited from the previous leader move by this node's offset from it")
		}
		if k == 0 {
			shard0 = &answers
		}
	}
	// Never ahead of the previous leader's last stamped clock (beacon.go).
	adj = n.boundByBeacon(ctx, k, adj, shard0)
	switch {
	case adj.Abs() > clockSkewWarn:
		n.log.Warn("leading on a clock far from this node's; steering toward the median of the voters' clocks at 1 %; fix the time sync of whichever is wrong",
			"clock", from, "adjustment", adj.Round(time.Millisecond))
	case adj.Abs() >= quietAdjustment:
		n.log.Info("leading on a clock a little off this node's, steering toward the median of the voters' clocks at 1 %",
			"clock", from, "adjustment", adj.Round(time.Millisecond))
	}
	// The clock holds where it starts until steered: shard 0's by the
	// voters' reports (retargetClockLocked), any other shard's by the next
	// measurement of the cluster's clock (steerShardClocksLocked). Until
	// 2026-12-01 shard 0 slewed toward this node's own wall clock until
	// the reports came, and when they did not (round trips over
	// offsetMaxUncertainty on a loaded machine), a leader with a skewed
	// clock drifted 1 % of its term toward it.
	target := adj
	// On a Steady base: a step of this node's wall clock while it leads
	// (an NTP step, a VM resumed) does not move the engine's clock; the
	// voters' median goes on steering it at 1 %.
	return newTimeline(clock.NewSteady(n.clk), adj, target)
}

// steerShardClocksLocked, with n.mu held, steers the clock of every shard
// above 0 that this node leads toward adj, the cluster's clock as this
// node knows it now (its wall clock plus adj): measured at a status report
// (noteClock) or, while this node leads shard 0, that shard's timeline
// (retargetClockLocked). The shards' clocks follow the cluster's at the
// same 1 %, a measurement (a second) behind.
func (n *Node) steerShardClocksLocked(adj time.Duration) {
	for k, tl := range n.shardClocks {
		if k > 0 && tl != nil {
			tl.retarget(adj)
		}
	}
}

// reportFresh: a follower's report older than this does not steer the
// cluster's clock.
const reportFresh = 3 * reportInterval

// retargetClockLocked, on the leader with n.mu held, as each report
// arrives, steers its engine clock to the median of the voters' clocks:
// each fresh report of a voter whose offset is certain to
// offsetMaxUncertainty gives that voter's clock minus this node's (its
// offset from the cluster's clock plus the current adjustment), this
// node's own counts as 0, and with a majority of the voters heard from,
// the timeline slews toward their median (medianTarget).
func (n *Node) retargetClockLocked(st raftstore.Status, now time.Time) {
	tl := n.timeline
	if tl == nil {
		return
	}
	cur := tl.Adjustment()
	voters := 0
	diffs := []time.Duration{0}
	for _, p := range st.Members {
		if p.Membership == raftstore.Learner {
			continue
		}
		voters++
		r, ok := n.reports[p.ID]
		if p.ID == st.ID || !ok || now.Sub(r.at) > reportFresh || r.st.Leader != st.ID || r.st.ClockOffsetMs == nil ||
			r.st.ClockUncertaintyMs > float64(offsetMaxUncertainty.Milliseconds()) {
			continue
		}
		diffs = append(diffs, time.Duration(*r.st.ClockOffsetMs*float64(time.Millisecond))+cur)
	}
	target, ok := medianTarget(diffs, voters, cur)
	if !ok {
		n.steerShardClocksLocked(cur)
		return
	}
	tl.retarget(target)
	n.steerShardClocksLocked(tl.Adjustment())
	// The leader's own clock is −target off the cluster's: it warns as a
	// follower would.
	n.clockWarningLocked(-target, 0,
		"this node's clock disagrees with the median of the voters' clocks, which the cluster's clock follows while this node leads: fix its time sync (NTP)")
}
