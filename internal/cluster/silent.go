package cluster

import (
	"context"
	"encoding/binary"
	"sync"
	"time"
)

// Members that stopped reporting.
//
// A member whose Raft node of shard 0 stopped (a failed write of its Raft
// log or state store, raftstore Node.Failure) knows no leader, so it
// cannot send the status reports the leader's view is made of
// (clusterview.go): in that view it only aged, like a member that is down
// or cut off. The leader therefore asks each member that has not reported
// for silentAfter, once every reportInterval, with a probe on shard 0's
// Raft connections (raftstore Node.Probe: the Raft listener answers
// probes whatever its node's loop is doing, stopped or not), whose answer
// (clockAnswer) ends with the member's status flags: statusStopped when
// any of its Raft nodes stopped. A member that answers so is shown as
// stopped (MemberView.Stopped) for as long as the answers say it; one
// that does not answer (down, cut off, an older release's answer without
// the flags) is shown as before.

const (
	// statusAnswerSize is the status flags' part of a probe's answer
	// (since 2026-12-04), after the clock's and the beacon's.
	statusAnswerSize = 8
	// statusStopped: one of the member's Raft nodes stopped.
	statusStopped = 1 << 0
	// silentAfter is how long a member's report may be missing before
	// the leader probes it.
	silentAfter = 3 * reportInterval
	// probedMaxAge bounds how long a probe's verdict is shown.
	probedMaxAge = 3 * reportInterval
)

// probedMember is the leader's last probe of a silent member.
type probedMember struct {
	stopped bool
	at      time.Time
}

// statusFlags are this node's status flags in a probe's answer.
func (n *Node) statusFlags() uint64 {
	n.mu.Lock()
	shards := n.shards // set under n.mu: a peer's probe may come during New
	n.mu.Unlock()
	var f uint64
	if shards == nil {
		return f
	}
	for k := range shards.Len() {
		if r := shards.Shard(k); r != nil && r.Failure() != nil {
			f |= statusStopped
		}
	}
	return f
}

// answerStopped reports whether a probe's answer a says the member's Raft
// node stopped; ok is false for an answer without the flags.
func answerStopped(a []byte) (stopped, ok bool) {
	const at = clockAnswerSize + beaconAnswerSize
	if len(a) < at+statusAnswerSize {
		return false, false
	}
	return binary.BigEndian.Uint64(a[at:])&statusStopped != 0, true
}

// probeSilent, while this node leads shard 0, probes every other member
// that has not reported for silentAfter (or never did) and keeps the
// verdicts for view. It waits at most probeWait.
func (n *Node) probeSilent(ctx context.Context) {
	r := n.shards.Shard(0)
	st := r.Status()
	if st.Role != "leader" {
		n.mu.Lock()
		clear(n.probed)
		n.mu.Unlock()
		return
	}
	now := time.Now()
	var silent []uint64
	n.mu.Lock()
	for _, m := range st.Members {
		if m.ID == st.ID {
			continue
		}
		if rep, ok := n.reports[m.ID]; !ok || now.Sub(rep.at) >= silentAfter {
			silent = append(silent, m.ID)
		}
	}
	n.mu.Unlock()
	if len(silent) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range silent {
		wg.Go(func() {
			a, _, _, err := r.Probe(ctx, id, n.clk.Now)
			stopped, ok := answerStopped(a)
			if err != nil || !ok {
				return
			}
			n.mu.Lock()
			n.probed[id] = probedMember{stopped: stopped, at: time.Now()}
			n.mu.Unlock()
		})
	}
	wg.Wait()
}

// memberStoppedLocked reports whether member id, as it last reported or
// (silent since) answered a probe, has a stopped Raft node. n.mu is held.
func (n *Node) memberStoppedLocked(id uint64, now time.Time) bool {
	p, probed := n.probed[id]
	rep, reported := n.reports[id]
	switch {
	case probed && now.Sub(p.at) <= probedMaxAge && (!reported || p.at.After(rep.at)):
		return p.stopped
	case reported && now.Sub(rep.at) < silentAfter:
		return rep.st.Stopped
	}
	return false
}
