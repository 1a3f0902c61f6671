package raftstore

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// A follower that receives a snapshot at index I goes on from the
// leader's log at I+1. The leader cuts its log to KeepEntries behind its
// applied index every CompactEntries (maybeCompact), so a copy that takes
// longer than the log needs to grow by that much — seconds under a steady
// load with the defaults, a 1 GiB shard at the default snapshot rate
// takes about 16 s — arrived to find I+1 cut: the follower needed another
// snapshot, which took as long, and never caught up (bench-repair,
// 2026-12-06: a snapshot every 17 s for minutes, `cluster add --wait`
// never done). So the leader keeps, while a snapshot is being sent and
// until its follower has taken it, the entries after its index: a hold
// (one per follower) bounds every cut (compactLimit).
//
// A hold ends when the follower's log has reached its index (Raft saw the
// follower take the snapshot, or catch up otherwise), when the stream
// failed (Raft sends a new snapshot, with a hold of its own), when the
// follower left the group, when this node stops leading, or snapHoldAfter
// after a stream that ended well: a follower that died right after its
// copy must not keep the log from ever being cut. While a stream runs,
// its hold stands however long it takes; the log it keeps is the writes of
// those seconds, the price of a copy that can finish.

// snapHoldAfter is how long a hold outlives a stream that ended well.
const snapHoldAfter = time.Minute

// snapHold keeps the log after index for a follower being sent a
// snapshot at index (loop only).
type snapHold struct {
	index uint64
	ended time.Time // when the stream ended well; zero while it runs
}

// holdForSnapshot records that follower to is being sent a snapshot at
// index (loop only, sendSnapshot).
func (n *Node) holdForSnapshot(to, index uint64) {
	if n.snapHolds == nil {
		n.snapHolds = map[uint64]snapHold{}
	}
	n.snapHolds[to] = snapHold{index: index}
}

// snapshotEnded updates follower to's hold once its stream ended with st
// (loop only, reportSnapshots).
func (n *Node) snapshotEnded(to uint64, st raft.SnapshotStatus, now time.Time) {
	h, ok := n.snapHolds[to]
	switch {
	case !ok:
	case st == raft.SnapshotFailure:
		delete(n.snapHolds, to)
	default:
		h.ended = now
		n.snapHolds[to] = h
	}
}

// compactLimit is the highest index the log may be cut to for the holds
// (loop only): held reports whether any hold stands. It drops the holds
// that ended.
func (n *Node) compactLimit(now time.Time) (limit uint64, held bool) {
	if len(n.snapHolds) == 0 {
		return 0, false
	}
	if n.rn.BasicStatus().RaftState != raft.StateLeader {
		clear(n.snapHolds)
		return 0, false
	}
	match := make(map[uint64]uint64, len(n.snapHolds))
	n.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if _, ok := n.snapHolds[id]; ok {
			match[id] = pr.Match
		}
	})
	for id, h := range n.snapHolds {
		m, member := match[id]
		if !member || m >= h.index || (!h.ended.IsZero() && now.Sub(h.ended) >= snapHoldAfter) {
			delete(n.snapHolds, id)
			continue
		}
		if !held || h.index < limit {
			limit, held = h.index, true
		}
	}
	return limit, held
}
