package raftstore

import (
	"maps"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Status is a node's view of the group.
type Status struct {
	ID      uint64
	Term    uint64
	Leader  uint64 // 0 if unknown
	Commit  uint64
	Applied uint64
	Role    string            // "leader", "follower", "candidate" or "removed"
	Match   map[uint64]uint64 // leader only: the highest log index known replicated on each member
	// Heard (leader only) is, for each member, when this leadership last
	// saw it active in Raft (Progress.RecentActive: it answered within an
	// election timeout); missing for a member not heard from since the
	// leadership began.
	Heard map[uint64]time.Time
	// Answered (leader only) is, for each other member, when a Raft
	// message of its last arrived: a live voter answers the leader's
	// heartbeat every tick, so unlike Heard (refreshed once an election
	// timeout) it tells within a few ticks that a member went silent.
	Answered map[uint64]time.Time
	// InSync (leader only) lists the members the leader replicates to
	// normally (not probing, no snapshot under way), heard from within an
	// election timeout, whose log holds every entry up to the commit index
	// minus Config.PromoteLagEntries: the learners among them could be
	// promoted at once.
	InSync map[uint64]bool
	// FirstIndex and LastIndex bound the entries this node's Raft log
	// holds (LastIndex < FirstIndex: none).
	FirstIndex, LastIndex uint64
	// LeaderChanges counts, since Open, the times this node learned of a
	// new leader (itself included).
	LeaderChanges uint64
	// FailedProposals counts, since Open, the writes this node proposed as
	// leader and failed because it lost the leadership (or Raft dropped
	// them) before they applied.
	FailedProposals uint64
	// Members is the applied membership (from the replicated log, not the
	// configuration), sorted by id.
	Members []Member
	// Joining: started with Config.Join, the leader has not sent the
	// membership yet. Removed: this node was removed from the group (Role
	// is then "removed"); it neither votes nor campaigns.
	Joining, Removed bool
	// Stopped: the node's loop stopped on an error it cannot continue
	// past (Failure: a write of its Raft log or state store failed); it
	// takes no part in its group until it is opened again.
	Stopped bool
	// SnapshotsSending and SnapshotsReceiving count this group's snapshot
	// streams in flight on this node, out and in (the node bounds those of
	// all its groups together: Config.SnapshotStreams).
	SnapshotsSending, SnapshotsReceiving int
	// SnapshotsSent and SnapshotsInstalled count, since this node opened
	// the group, the snapshot streams it sent whole to members and the
	// copies it installed (a node added to the group, or one too far
	// behind for the log, gets its state that way).
	SnapshotsSent, SnapshotsInstalled int
}

// updateStatus refreshes the status snapshot and publishes a change of
// leader or role on Changes.
func (n *Node) updateStatus() {
	bs := n.rn.BasicStatus()
	st := Status{ID: n.cfg.ID, Term: bs.GetTerm(), Leader: bs.Lead, Commit: bs.GetCommit()}
	switch bs.RaftState {
	case raft.StateLeader:
		st.Role = "leader"
		st.Match = map[uint64]uint64{}
		st.InSync = map[uint64]bool{}
		now := time.Now()
		if n.heard == nil || n.heardTerm != st.Term {
			n.heard, n.heardTerm, n.leadSince = map[uint64]time.Time{}, st.Term, now
		}
		n.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			st.Match[id] = pr.Match
			if pr.RecentActive {
				n.heard[id] = now
			}
			if id == st.ID || inSync(&pr, st.Commit, n.cfg.PromoteLagEntries) {
				st.InSync[id] = true
			}
		})
		st.Heard = maps.Clone(n.heard)
		st.Answered = maps.Clone(n.answered)
	case raft.StateCandidate, raft.StatePreCandidate:
		st.Role = "candidate"
	default:
		st.Role = "follower"
	}
	st.FirstIndex, _ = n.rl.FirstIndex() // never fails
	st.LastIndex, _ = n.rl.LastIndex()   // never fails
	n.mu.Lock()
	n.refreshLease(st.Term, st.Role == "leader")
	st.Applied = n.applied
	st.Members = n.membersLocked()
	st.Joining, st.Removed = n.mem.joining, n.removedLocked()
	if st.Removed {
		st.Role = raftStateRemoved
	}
	prev := n.status
	if st.Leader != 0 && st.Leader != prev.Leader {
		n.leaderChanges++
	}
	st.LeaderChanges, st.FailedProposals = n.leaderChanges, n.failedProposals
	n.status = st
	n.mu.Unlock()
	if prev.Leader != st.Leader || prev.Role != st.Role {
		select {
		case <-n.changes:
		default:
		}
		n.changes <- st
	}
}

// Status returns the node's latest view of the group.
func (n *Node) Status() Status {
	n.snaps.mu.Lock() // not under n.mu: no lock order between the two
	sent, installed := n.snaps.sent, n.snaps.installed
	n.snaps.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.status
	st.SnapshotsSent, st.SnapshotsInstalled = sent, installed
	st.LeaderChanges, st.FailedProposals = n.leaderChanges, n.failedProposals
	st.Stopped = n.err != nil
	st.SnapshotsSending, st.SnapshotsReceiving = int(n.tr.sending.Load()), int(n.tr.receiving.Load()) // n.tr is set before Open returns
	if st.Match != nil {
		st.Match, st.Heard, st.InSync = maps.Clone(st.Match), maps.Clone(st.Heard), maps.Clone(st.InSync)
	}
	st.Members = slices.Clone(st.Members)
	return st
}

// Changes delivers the node's Status after every change of leader or role,
// and once more (role "follower", no leader) if the node stops on an error
// it cannot continue past. Only the latest value is kept: a slow reader sees the newest state, not
// every step.
func (n *Node) Changes() <-chan Status { return n.changes }
