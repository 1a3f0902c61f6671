package raftstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
)

// Read barriers: a node, follower or leader, catches its local copy up
// with everything its group had committed when it asked.
//
// ReadBarrier asks Raft for a read index (ReadIndex, ReadOnlySafe, as the
// lease does): a follower forwards the request to its leader, which
// answers with its commit index once a majority has acknowledged its
// leadership with a heartbeat, so the index covers every write any node
// had acknowledged when the barrier began. The caller then waits until its
// own state store has applied that index. A cluster node uses it before it
// decides that a queue is in none of its shards' copies (a create
// acknowledged through another node a moment ago may not have reached this
// one yet).
//
// Callers that ask while a round is being asked for join the next round,
// so a flood of barriers costs one heartbeat round per loop iteration,
// not one per caller.

// barrierCtxTag starts every barrier round's read context.
const barrierCtxTag = 'B'

// maxBarrierRounds bounds the rounds awaiting an answer; a round dropped
// from the list (its answer lost: no leader, a leader change) answers no
// one, and its callers' contexts end their wait.
const maxBarrierRounds = 64

// appliedWait is a barrier caller waiting for the local store to apply
// index.
type appliedWait struct {
	index uint64
	done  chan struct{}
}

// ReadBarrier returns once this node's state store has applied every
// entry its group had committed when ReadBarrier was called. It fails
// with ctx's error when no answer comes in time (no leader, this node cut
// off from it), and when the node stops.
func (n *Node) ReadBarrier(ctx context.Context) error {
	ch := make(chan uint64, 1)
	n.mu.Lock()
	switch {
	case n.closed:
		n.mu.Unlock()
		return ErrNodeClosed
	case n.err != nil:
		err := n.err
		n.mu.Unlock()
		return err
	}
	n.mu.Unlock()
	// A round can go unanswered: a follower that knows no leader yet (just
	// started, an election) drops it, and a leader change loses it. So the
	// caller asks again every other tick until one answers.
	retry := time.NewTicker(2 * n.cfg.TickInterval)
	defer retry.Stop()
	var index uint64
	for asked := false; !asked; {
		n.mu.Lock()
		n.barrierWaiting = append(n.barrierWaiting, ch)
		n.mu.Unlock()
		select {
		case n.barrierc <- struct{}{}:
		default: // the loop has been told already
		}
		select {
		case index = <-ch:
			asked = true
		case <-retry.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.donec:
			return fmt.Errorf("raftstore: read barrier: %w", ErrNodeClosed)
		}
	}
	n.mu.Lock()
	if n.applied >= index {
		n.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	n.appliedWaits = append(n.appliedWaits, appliedWait{index: index, done: done})
	n.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.donec:
		return fmt.Errorf("raftstore: read barrier: %w", ErrNodeClosed)
	}
}

// startBarrierRound asks Raft for a read index for every caller waiting.
// Loop only.
func (n *Node) startBarrierRound() {
	n.mu.Lock()
	waiting := n.barrierWaiting
	n.barrierWaiting = nil
	n.mu.Unlock()
	if len(waiting) == 0 {
		return
	}
	if n.barrierRounds == nil {
		n.barrierRounds = map[uint64][]chan uint64{}
	}
	n.barrierSeq++
	if old := n.barrierSeq - maxBarrierRounds; n.barrierSeq > maxBarrierRounds {
		delete(n.barrierRounds, old)
	}
	n.barrierRounds[n.barrierSeq] = waiting
	n.rn.ReadIndex(binary.BigEndian.AppendUint64([]byte{barrierCtxTag}, n.barrierSeq))
}

// barriersAnswered hands the read indexes of a Ready to the rounds they
// answer. Loop only.
func (n *Node) barriersAnswered(states []raft.ReadState) {
	for _, rs := range states {
		ctx := rs.RequestCtx
		if len(ctx) != 9 || ctx[0] != barrierCtxTag {
			continue
		}
		seq := binary.BigEndian.Uint64(ctx[1:])
		for _, ch := range n.barrierRounds[seq] {
			select {
			case ch <- rs.Index:
			default: // answered by an earlier round already
			}
		}
		delete(n.barrierRounds, seq)
	}
}

// appliedLocked wakes the barrier callers whose index is applied; with
// n.mu held, after n.applied moved.
func (n *Node) appliedLocked() {
	if len(n.appliedWaits) == 0 {
		return
	}
	kept := n.appliedWaits[:0]
	for _, w := range n.appliedWaits {
		if w.index <= n.applied {
			close(w.done)
			continue
		}
		kept = append(kept, w)
	}
	clear(n.appliedWaits[len(kept):])
	n.appliedWaits = kept
}
