// The Ready cycle of the Raft loop: save, send, apply, advance.

package raftstore

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// handleReadies runs etcd raft's Ready cycle until nothing is ready.
func (n *Node) handleReadies() error {
	for n.rn.HasReady() {
		// Advance steps this node's own votes and append acks, so the
		// role can change there too: check it before applying.
		n.checkRole()
		rd := n.rn.Ready()
		n.leaseAcknowledged(rd.ReadStates)
		n.barriersAnswered(rd.ReadStates)
		if !raft.IsEmptySnap(rd.Snapshot) {
			if err := n.installSnapshot(rd.Snapshot); err != nil {
				return err
			}
		}
		early := n.leaderSendsFirst(rd)
		if early {
			// The leader writes its log in parallel with replicating it
			// (Raft thesis §10.2.1, as etcd's server does): its appends
			// and heartbeats leave before its fsync, so a commit waits
			// for one fsync on each side at once rather than two in a
			// row. Safe: an entry commits only once a majority have it
			// on disk, and the leader counts itself in that majority
			// only after this save (its own append is acknowledged at
			// Advance); a term or vote change is never sent early.
			n.sendAll(rd.Messages, isEarly)
		}
		if err := n.rl.save(rd.Entries, rd.HardState, rd.MustSync); err != nil {
			return err
		}
		n.sendAll(rd.Messages, func(m *pb.Message) bool { return !early || !isEarly(m) })
		if err := n.apply(rd.CommittedEntries); err != nil {
			return err
		}
		n.rn.Advance(rd)
		n.mu.Lock()
		applied := n.applied
		n.mu.Unlock()
		n.rl.applied = applied
		n.rl.trim(applied)
	}
	if err := n.maybeCompact(); err != nil {
		return err
	}
	n.checkRole()
	n.updateStatus()
	return nil
}

// leaderSendsFirst reports whether rd's messages to followers may leave
// before rd is saved: this node leads, and rd changes neither its term nor
// its vote (those must be durable before any message that follows from
// them).
func (n *Node) leaderSendsFirst(rd raft.Ready) bool {
	if n.rn.BasicStatus().RaftState != raft.StateLeader {
		return false
	}
	if raft.IsEmptyHardState(rd.HardState) {
		return true
	}
	prev := n.rl.hs
	return prev != nil && rd.HardState.GetTerm() == prev.GetTerm() && rd.HardState.GetVote() == prev.GetVote()
}

// sendAll sends those of msgs that pass, snapshots through sendSnapshot.
func (n *Node) sendAll(msgs []*pb.Message, pass func(*pb.Message) bool) {
	for _, m := range msgs {
		if !pass(m) {
			continue
		}
		if m.GetType() == pb.MessageType_MsgSnap {
			n.sendSnapshot(m)
			continue
		}
		n.tr.send(m)
	}
}

// isEarly reports whether a leader may send m before saving the Ready it
// came in: appends and heartbeats to followers. The rest (snapshots,
// leadership transfer, anything a non-leader sends) waits for the save.
func isEarly(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgHeartbeat:
		return true
	}
	return false
}
