package raftstore

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// The leadership lease.
//
// A leader cut off from the others goes on believing it leads until
// CheckQuorum makes it step down, which etcd raft checks once an election
// timeout: up to two election timeouts after it last heard from a
// majority. Another node can be elected after one. In between, the old
// leader's engine would still hand out messages from its state, messages
// the new leader may already have deleted. Writes are safe (they cannot
// commit), deliveries are not.
//
// So the leader holds a lease: it runs until half an election timeout
// after the moment by which a majority of the voters (this node counting
// as one, always current) had each sent it a message of its term. A
// voter that sent such a message had heard from this leader, and with
// CheckQuorum etcd raft's voters refuse to vote for another candidate
// until an election timeout has passed since they last heard from their
// leader; so no other leader can be elected before the lease runs out, as
// long as a message takes less than half an election timeout to arrive
// and the nodes' clocks run at about the same rate. The store views
// report it (store.Leaser), and the engine delivers nothing outside it.
//
// The lease is kept on the monotonic clock (offsets from leaseBase), not
// the wall clock: a wall clock stepped back (NTP, an operator) would
// otherwise stretch a lease past the moment another node can be elected.

// noteReceived records, while this node leads, that m arrived from a
// member in the current term. Loop only.
func (n *Node) noteReceived(m *pb.Message) {
	bs := n.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || m.GetTerm() != bs.GetTerm() {
		return
	}
	if n.recv == nil || n.recvTerm != bs.GetTerm() {
		n.recv, n.recvTerm = map[uint64]time.Time{}, bs.GetTerm()
	}
	n.recv[m.GetFrom()] = time.Now()
}

// refreshLease recomputes the lease after the loop's work (updateStatus).
// Loop only; voters is the applied membership's.
func (n *Node) refreshLease(term uint64, leader bool, voters []uint64) {
	if !leader {
		n.leaseUntil.Store(0)
		n.leaseTerm.Store(0)
		return
	}
	now := time.Now()
	var times []time.Time
	for _, id := range voters {
		switch at, ok := n.recv[id]; {
		case id == n.cfg.ID:
			times = append(times, now)
		case ok && n.recvTerm == term:
			times = append(times, at)
		}
	}
	need := len(voters)/2 + 1
	if len(times) < need {
		n.leaseUntil.Store(0)
		n.leaseTerm.Store(term)
		return
	}
	// The need-th most recent: by then a majority had been heard.
	slices.SortFunc(times, func(a, b time.Time) int { return b.Compare(a) })
	until := times[need-1].Add(n.cfg.TickInterval * electionTicks / 2)
	n.leaseTerm.Store(term)
	n.leaseUntil.Store(int64(until.Sub(n.leaseBase)))
}

// leased reports whether this node holds the lease of its leadership of
// term now.
func (n *Node) leased(term uint64) bool {
	return n.leaseTerm.Load() == term && int64(time.Since(n.leaseBase)) < n.leaseUntil.Load()
}
