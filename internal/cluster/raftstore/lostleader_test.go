package raftstore

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
)

// TestLostLeadershipFailsQueuedWritesAsNotWritten: when a leadership ends,
// a write still queued for the loop (never handed to Raft) fails as
// certainly not written — so a caller may make it again on the next
// leader (the AMQP router's retry, instead of a nack) — while one already
// proposed fails as ambiguous (it may yet be committed). Both count as
// failed proposals, and nothing is left waiting.
func TestLostLeadershipFailsQueuedWritesAsNotWritten(t *testing.T) {
	n := &Node{waiters: map[uint64]*waiter{}, leaderTerm: 7}
	proposed, queued, change := newWaiter(), newWaiter(), newWaiter()
	n.waiters[1], n.waiters[2], n.waiters[3] = proposed, queued, change
	n.props = []proposal{{data: []byte("x"), term: 7, seq: 2, w: queued}, {term: 7, seq: 3, w: change}}
	n.mu.Lock()
	n.failLostLeadershipLocked()
	n.mu.Unlock()
	for name, w := range map[string]*waiter{"queued": queued, "queued change": change} {
		if err := w.Wait(); !errors.Is(err, ErrNotLeader) || !errors.Is(err, store.ErrNotLeading) || !errors.Is(err, store.ErrNotWritten) {
			t.Fatalf("the %s write: %v; want ErrNotLeader with store.ErrNotWritten", name, err)
		}
	}
	if err := proposed.Wait(); !errors.Is(err, ErrNotLeader) || errors.Is(err, store.ErrNotWritten) {
		t.Fatalf("the proposed write: %v; want ErrNotLeader without store.ErrNotWritten (ambiguous)", err)
	}
	if len(n.waiters) != 0 || len(n.props) != 0 || n.failedProposals != 3 {
		t.Fatalf("after: %d waiters, %d queued, %d failed proposals; want 0, 0, 3", len(n.waiters), len(n.props), n.failedProposals)
	}
}
