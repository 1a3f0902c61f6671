package raftstore

import (
	"context"
	"slices"
	"time"
)

// TransferLeadership hands this node's leadership to the member whose
// log is most up to date, and waits until another member leads or ctx
// ends. It is meant for a graceful stop (a rolling restart): the new
// leader takes over at once instead of after an election timeout. It
// returns nil at once if this node does not lead or is the only voter.
//
// The caller must have stopped writing: while the transfer runs, Raft
// refuses proposals, and once it completes, every write still waiting
// fails with ErrNotLeader (never a false success). If the target does not
// take over within Raft's election timeout, Raft abandons the transfer and
// this node keeps leading; TransferLeadership then waits on until ctx
// ends and returns ctx's error.
func (n *Node) TransferLeadership(ctx context.Context) error {
	return n.TransferLeadershipTo(ctx, n.transferTarget())
}

// TransferLeadershipTo is TransferLeadership to the voter to, which the
// caller chose (0: return nil at once). Raft ignores a transfer to a
// node that is not a voter or is this node; the call then waits until ctx
// ends.
func (n *Node) TransferLeadershipTo(ctx context.Context, to uint64) error {
	if to == 0 || to == n.cfg.ID {
		return nil
	}
	select {
	case n.transferc <- transferRequest{to: to}:
	case <-n.donec:
		return ErrNodeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	n.log.Info("raftstore: transferring leadership", "to", to)
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for {
		n.mu.Lock()
		st, ch, closed := n.status, n.changed, n.closed
		n.mu.Unlock()
		switch {
		case closed:
			return ErrNodeClosed
		case st.Leader != 0 && st.Leader != n.cfg.ID:
			return nil
		}
		// Leadership ending is broadcast on changed; the new leader's id
		// arrives with its first message, between two broadcasts.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.donec:
			return ErrNodeClosed
		case <-ch:
		case <-tick.C:
		}
	}
}

// transferTarget is the voter with the highest replicated index (the
// lowest id on a tie), if this node leads and has another voter; 0
// otherwise.
func (n *Node) transferTarget() uint64 {
	if c := n.TransferCandidates(); len(c) > 0 {
		return c[0]
	}
	return 0
}

// TransferCandidates lists, while this node leads, the other voters whose
// replicated index is the highest (sorted by id): the members a transfer
// of leadership can go to without a wait for them to catch up. nil when
// this node does not lead or is the only voter.
func (n *Node) TransferCandidates() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leaderTerm == 0 || n.status.Role != "leader" {
		return nil
	}
	return bestVoters(n.cfg.ID, n.status.Match, n.mem.conf.GetVoters())
}

// bestVoters lists, among voters other than self, those with the highest
// match index, sorted by id. A learner is never one: Raft ignores a
// transfer to one, and the leader would then keep leading until the
// caller's deadline.
func bestVoters(self uint64, match map[uint64]uint64, voters []uint64) []uint64 {
	var best []uint64
	var bestMatch uint64
	for id, m := range match {
		if id == self || !slices.Contains(voters, id) {
			continue
		}
		switch {
		case len(best) == 0 || m > bestMatch:
			best, bestMatch = []uint64{id}, m
		case m == bestMatch:
			best = append(best, id)
		}
	}
	slices.Sort(best)
	return best
}

// transferRequest is a transfer for the Raft loop: to the voter to, and,
// when ifInSync, only if this node does not lead or to is in sync with it
// (canTakeOver), as a request from the network is (step): the balancer's
// (requestTransfer) are; a graceful stop's (TransferLeadershipTo) hands
// over to the best it has.
type transferRequest struct {
	to       uint64
	ifInSync bool
}

// requestTransfer asks the group's leader to hand its leadership to the
// voter to, without waiting for it: on the leader Raft starts the
// transfer if to is in sync (canTakeOver; else nothing happens), on a
// follower Raft forwards the request to the leader it knows, which checks
// the same (step), and drops it while it knows none. Raft ignores a request for a
// learner or for the leader itself, and abandons a transfer the target
// does not complete within an election timeout.
func (n *Node) requestTransfer(to uint64) {
	select {
	case n.transferc <- transferRequest{to: to, ifInSync: true}:
	case <-n.donec:
	case <-n.stopc:
	}
}

// BlockTransport makes this group's transport on this node drop every
// Raft message in both directions (blocked), or deliver again. Tests of
// the layers above use it to cut one shard's group on some nodes while the
// node's other groups and its HTTP surfaces go on: a shard without a
// leader in a cluster that otherwise serves.
func (n *Node) BlockTransport(blocked bool) { n.tr.setBlocked(blocked) }
