package raftstore

import (
	"encoding/binary"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
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
// after a moment at which a majority of the voters (this node counting as
// one) had each acknowledged its leadership. Every tick the leader starts
// a lease round: it notes the time on its monotonic clock and asks etcd
// raft for a read index (ReadIndex, ReadOnlySafe), whose heartbeat
// carries the round's context; once a majority has answered that
// heartbeat, Raft reports the round (Ready.ReadStates), and the lease runs
// until the round's start plus half an election timeout. A voter that
// answered had heard from this leader after the round began, and with
// CheckQuorum etcd raft's voters refuse to vote for another candidate
// until an election timeout has passed since they last heard from their
// leader; so no other leader can be elected before the lease runs out, as
// long as the nodes' clocks run at about the same rate. The store views
// report it (store.Leaser), and the engine delivers nothing outside it.
//
// The lease rests on when a round began, not on when answers arrived: an
// answer that arrives late (it sat in a socket buffer while this node was
// paused, SIGSTOP, or behind a congested link) can only renew the lease
// from the start of the round it answers. (Until 2026-11-29 the lease ran
// from the arrival of any message of the term, and a leader resumed after
// a pause could take a lease from answers sent before it: the cluster
// fault harness saw such a leader deliver messages its successor had
// deleted; TestLateMessageDoesNotRenewTheLease.)
//
// The lease is kept on the monotonic clock (offsets from leaseBase), not
// the wall clock: a wall clock stepped back (NTP, an operator) would
// otherwise stretch a lease past the moment another node can be elected.

// leaseRound is a lease round under way: its context's sequence number,
// the term it was started in and when.
type leaseRound struct {
	seq, term uint64
	at        time.Time
}

// maxLeaseRounds bounds the rounds awaiting a majority (one per tick; a
// leader cut off steps down within two election timeouts). A round
// dropped from the list grants nothing when its answer comes.
const maxLeaseRounds = 4 * electionTicks

// leaseCtxTag starts every lease round's read context.
const leaseCtxTag = 'L'

// startLeaseRound starts a lease round if this node leads. Loop only,
// once per tick.
func (n *Node) startLeaseRound() {
	bs := n.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		n.leaseRounds = n.leaseRounds[:0]
		return
	}
	if len(n.leaseRounds) >= maxLeaseRounds {
		n.leaseRounds = append(n.leaseRounds[:0], n.leaseRounds[1:]...)
	}
	n.leaseSeq++
	r := leaseRound{seq: n.leaseSeq, term: bs.GetTerm(), at: time.Now()}
	n.leaseRounds = append(n.leaseRounds, r)
	n.rn.ReadIndex(binary.BigEndian.AppendUint64([]byte{leaseCtxTag}, r.seq))
}

// leaseAcknowledged takes the read states of a Ready: the latest round a
// majority answered renews the lease of its term from the round's start.
// Loop only.
func (n *Node) leaseAcknowledged(states []raft.ReadState) {
	for _, rs := range states {
		ctx := rs.RequestCtx
		if len(ctx) != 9 || ctx[0] != leaseCtxTag {
			continue
		}
		seq := binary.BigEndian.Uint64(ctx[1:])
		i := slices.IndexFunc(n.leaseRounds, func(r leaseRound) bool { return r.seq == seq })
		if i < 0 {
			continue // dropped, or of an earlier leadership
		}
		r := n.leaseRounds[i]
		// Raft answers rounds in order: the earlier ones are done too.
		n.leaseRounds = append(n.leaseRounds[:0], n.leaseRounds[i+1:]...)
		bs := n.rn.BasicStatus()
		if bs.RaftState != raft.StateLeader || bs.GetTerm() != r.term {
			continue
		}
		until := int64(r.at.Add(n.cfg.TickInterval * electionTicks / 2).Sub(n.leaseBase))
		if n.leaseTerm.Load() != r.term {
			n.leaseTerm.Store(r.term)
			n.leaseUntil.Store(until)
		} else if until > n.leaseUntil.Load() {
			n.leaseUntil.Store(until)
		}
	}
}

// refreshLease drops the lease of a node that no longer leads its term,
// after the loop's work (updateStatus). Loop only.
func (n *Node) refreshLease(term uint64, leader bool) {
	if !leader {
		n.leaseUntil.Store(0)
		n.leaseTerm.Store(0)
		return
	}
	if n.leaseTerm.Load() != term {
		n.leaseUntil.Store(0)
		n.leaseTerm.Store(term)
	}
}

// leased reports whether this node holds the lease of its leadership of
// term now.
func (n *Node) leased(term uint64) bool {
	return n.leaseTerm.Load() == term && int64(time.Since(n.leaseBase)) < n.leaseUntil.Load()
}
