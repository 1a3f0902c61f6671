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
// (docs/guarantees.md, "Clocks"). A new leader whose clock is ahead of the
// old one's sees every in-flight lease expire early and redelivers it; one
// behind keeps them hidden and delayed longer. Nothing in Raft needs the
// clocks to agree, so nothing else would notice; this file measures it.
//
// Every status report a follower sends to the leader (clusterview.go,
// once a second) is answered with the leader's wall clock in the
// Sluice-Clock header (Unix nanoseconds, read as the answer is written).
// The follower takes its own wall clock at the midpoint of the round trip,
// so offset = midpoint − leader's clock, with half the round trip as the
// uncertainty (the classic Cristian estimate; on one machine or a LAN it
// is well under a millisecond). The follower exports the offset
// (sluice_cluster_clock_offset_seconds), logs a warning when it is beyond
// clockSkewWarn for certain (|offset| − uncertainty), and tells the leader
// in its next report, so the leader's cluster view (`sluice cluster
// status`, the dashboard) shows every member's offset. The leader's own is
// 0 by definition. Nothing is refused or failed for it: a skewed follower
// serves correctly (its engine runs only while it leads); the warning is
// for the operator to fix the node's time sync before it leads.

const (
	// clockHeader carries the leader's wall clock on the answer to a
	// status report.
	clockHeader = "Sluice-Clock"
	// clockSkewWarn is the offset from the leader's clock, beyond any
	// doubt of the measurement, past which a follower warns.
	clockSkewWarn = 500 * time.Millisecond
)

// clockOffset is a follower's last measurement of its clock against the
// leader's.
type clockOffset struct {
	measured    bool
	leader      uint64        // the leader it was measured against
	offset      time.Duration // this node's clock minus the leader's
	uncertainty time.Duration // half the round trip
	warned      bool          // the warning is standing (logged once per episode)
}

// stampClock sets the leader's clock on a status report's answer.
func (n *Node) stampClock(w http.ResponseWriter) {
	w.Header().Set(clockHeader, strconv.FormatInt(n.clk.Now().UnixNano(), 10))
}

// noteClock records the offset measured by one status report sent at
// sent and answered at got (both on this node's clock) with the leader's
// clock header value; an answer without one (a leader of an older release)
// measures nothing.
func (n *Node) noteClock(leader uint64, sent, got time.Time, header string) {
	theirs, err := strconv.ParseInt(header, 10, 64)
	if header == "" || err != nil {
		return
	}
	rtt := got.Sub(sent) // monotonic
	mid := sent.UnixNano() + int64(rtt/2)
	c := clockOffset{measured: true, leader: leader, offset: time.Duration(mid - theirs), uncertainty: rtt / 2}
	skewed := c.offset.Abs()-c.uncertainty > clockSkewWarn

	n.mu.Lock()
	c.warned = n.clock.warned
	switch {
	case skewed && !c.warned:
		c.warned = true
		n.log.Warn("this node's clock disagrees with the leader's: were it to lead, in-flight messages would be redelivered early (clock ahead) or stay hidden and delayed longer (behind) by about the offset; fix its time sync (NTP)",
			"leader", leader, "offset", c.offset.Round(time.Millisecond), "uncertainty", c.uncertainty.Round(time.Microsecond))
	case !skewed && c.warned && c.offset.Abs()+c.uncertainty < clockSkewWarn/2:
		c.warned = false
		n.log.Info("this node's clock agrees with the leader's again", "leader", leader, "offset", c.offset.Round(time.Millisecond))
	}
	n.clock = c
	n.mu.Unlock()
}

// clockOffsetMs is this node's clock offset from the leader's in
// milliseconds, as reported: 0 while it leads, nil when it has no
// measurement against the current leader.
func (n *Node) clockOffsetMs(role string, leader uint64) *float64 {
	if role == "leader" {
		return new(float64)
	}
	n.mu.Lock()
	c := n.clock
	n.mu.Unlock()
	if !c.measured || c.leader != leader {
		return nil
	}
	return new(float64(c.offset.Microseconds()) / 1000)
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
			"This node's wall clock minus the leader's, measured at its last status report (midpoint of the round trip); 0 on the leader, absent before a first measurement against the current leader. Past 0.5 s the node logs a warning: were it to lead, in-flight messages would be redelivered early or late by about this much."),
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
	if st.Role == "leader" {
		gauge(c.offset, 0)
		gauge(c.uncertainty, 0)
		return
	}
	c.n.mu.Lock()
	o := c.n.clock
	c.n.mu.Unlock()
	if o.measured && o.leader == st.Leader {
		gauge(c.offset, o.offset)
		gauge(c.uncertainty, o.uncertainty)
	}
}
