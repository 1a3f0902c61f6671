package cluster

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock offsets between members.
//
// The engine keeps visibility deadlines, delays, retry backoffs and
// retention as wall-clock instants, stamped by the leader that wrote them
// (docs/guarantees.md). A new leader takes over its predecessor's clock and
// slews from it toward the median of the voters' clocks (timeline.go), which needs each node to know its
// clock's offset from the leader's; and an operator needs to see a node
// whose time sync has failed. This file measures it.
//
// Every status report a follower sends to the leader (clusterview.go,
// once a second) is answered with the leader's engine clock in the
// Sluice-Clock header (Unix nanoseconds, read as the answer is written):
// the cluster's clock. The follower takes its own wall clock at the
// midpoint of the round trip, so offset = midpoint − cluster clock, with
// half the round trip as the uncertainty (Cristian's estimate; on one
// machine or a LAN well under a millisecond). The follower exports the
// offset (sluice_cluster_clock_offset_seconds), logs a warning when it is
// beyond clockSkewWarn for certain (|offset| − uncertainty), and tells the
// leader in its next report, so the leader's cluster view (`sluice
// cluster status`, the dashboard) shows every member's offset. Nothing is
// refused for it: a skewed follower serves correctly, and should it lead,
// it starts on the old leader's clock (timeline.go), or, without a
// measurement, on the one its voters' answers give (clockprobe.go).

const (
	// clockHeader carries the leader's engine clock (the cluster's) on
	// the answer to a status report.
	clockHeader = "Sluice-Clock"
	// clockSkewWarn is the offset from the leader's clock, beyond any
	// doubt of the measurement, past which a follower warns.
	clockSkewWarn = 500 * time.Millisecond
)

// clockOffset is a follower's measurement of its clock against the
// leader's engine clock.
type clockOffset struct {
	measured    bool
	leader      uint64        // the leader it was measured against
	offset      time.Duration // this node's clock minus the leader's
	uncertainty time.Duration // half the round trip
	at          time.Time     // when (this node's clock, at the answer)
}

// stampClock sets the leader's clock on a status report's answer: the
// clock its engine runs on (timeline.go). A node without one (it has just
// lost its leadership, or not yet started serving) sets none, and the
// report measures nothing: its own wall clock is not the cluster's, and a
// follower that took it for it (an answer racing a leadership's end) would
// carry a skewed node's offset into its next leadership — every message of
// a shard it then led was stamped 20 s ahead in the fault harness (seed
// 1796059533094640074, 3 nodes, 3 shards).
func (n *Node) stampClock(w http.ResponseWriter) {
	n.mu.Lock()
	tl := n.timeline
	n.mu.Unlock()
	if tl == nil {
		return
	}
	w.Header().Set(clockHeader, strconv.FormatInt(tl.Now().UnixNano(), 10))
}

// noteClock records the offset measured by one status report sent at
// sent and answered at got (both on this node's clock) with the leader's
// clock header value; an answer without one (a leader of an older release)
// measures nothing.
func (n *Node) noteClock(leader uint64, sent, got time.Time, header string) {
	theirs, err := strconv.ParseInt(header, 10, 64)
	if err != nil { // no header: a leader of an older release
		return
	}
	rtt := got.Sub(sent) // monotonic
	mid := sent.UnixNano() + int64(rtt/2)
	c := clockOffset{measured: true, leader: leader, offset: time.Duration(mid - theirs), uncertainty: rtt / 2, at: got}
	n.mu.Lock()
	n.clockWarningLocked(c.offset, c.uncertainty,
		"this node's clock disagrees with the cluster's (the leader's engine clock): fix its time sync (NTP); the leader steers the cluster's clock toward the median of the voters' clocks at 1 %, so if most clocks agree with this one the offset shrinks by itself",
		"leader", leader, "uncertainty", c.uncertainty.Round(time.Microsecond))
	n.clock = c
	if c.uncertainty <= offsetMaxUncertainty {
		n.clockGood = c
		n.steerShardClocksLocked(startAdjustment(c, 0))
	}
	n.mu.Unlock()
}

// clockWarningLocked, with n.mu held, logs warn (with attrs and the
// offset) when this node's clock is certainly more than clockSkewWarn off
// the cluster's (|offset| − uncertainty), once per episode, and that it
// agrees again once it is certainly within half of that. Followers call
// it at each measurement (noteClock), a leader at each retarget of the
// cluster's clock (timeline.go).
func (n *Node) clockWarningLocked(offset, uncertainty time.Duration, warn string, attrs ...any) {
	switch {
	case offset.Abs()-uncertainty > clockSkewWarn && !n.clockWarned:
		n.clockWarned = true
		n.log.Warn(warn, append(attrs, "offset", offset.Round(time.Millisecond))...)
	case offset.Abs()+uncertainty < clockSkewWarn/2 && n.clockWarned:
		n.clockWarned = false
		n.log.Info("this node's clock agrees with the cluster's again", "offset", offset.Round(time.Millisecond))
	}
}

// clockOffsetMs is this node's clock offset from the cluster's in
// milliseconds, as reported, and its uncertainty: while it leads, its wall
// clock minus its engine's (leaderOffset), known exactly; nil when it has
// no measurement against the current leader.
func (n *Node) clockOffsetMs(role string, leader uint64) (*float64, float64) {
	n.mu.Lock()
	c, tl := n.clock, n.timeline
	n.mu.Unlock()
	if role == "leader" {
		return new(leaderOffset(tl).Seconds() * 1000), 0
	}
	if !c.measured || c.leader != leader {
		return nil, 0
	}
	return new(float64(c.offset.Microseconds()) / 1000), float64(c.uncertainty.Microseconds()) / 1000
}

// leaderOffset is a leader's own offset from the cluster's clock: its wall
// clock minus its engine's, −adjustment (timeline.go); 0 without a
// timeline (not serving yet).
func leaderOffset(tl *timeline) time.Duration {
	if tl == nil {
		return 0
	}
	return -tl.Adjustment()
}

// clockCollector exports the offset.
type clockCollector struct {
	n                   *Node
	offset, uncertainty *prometheus.Desc
}

func newClockCollector(n *Node) clockCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return clockCollector{n: n,
		offset: d("sluice_cluster_clock_offset_seconds",
			"This node's wall clock minus the cluster's clock (the clock the leader's engine runs on), measured at its last status report (midpoint of the round trip); on the leader, its wall clock minus its engine's (non-zero while the cluster's clock is, or still slews toward, the median of the voters' clocks rather than its own); absent before a first measurement against the current leader. Past 0.5 s a follower logs a warning: its time sync is off."),
		uncertainty: d("sluice_cluster_clock_offset_uncertainty_seconds",
			"Half the round trip of the status report that measured sluice_cluster_clock_offset_seconds: the offset is known to within this."),
	}
}

// Describe implements prometheus.Collector.
func (c clockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.offset
	ch <- c.uncertainty
}

// Collect implements prometheus.Collector.
func (c clockCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.raft.Status()
	gauge := func(d *prometheus.Desc, v time.Duration) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v.Seconds())
	}
	c.n.mu.Lock()
	o, tl := c.n.clock, c.n.timeline
	c.n.mu.Unlock()
	if st.Role == "leader" {
		gauge(c.offset, leaderOffset(tl))
		gauge(c.uncertainty, 0)
		return
	}
	if o.measured && o.leader == st.Leader {
		gauge(c.offset, o.offset)
		gauge(c.uncertainty, o.uncertainty)
	}
}
