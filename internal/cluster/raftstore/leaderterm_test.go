package raftstore

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// TestLeaderTermOfAView: a view from Store is bound to the leadership of
// the moment it was made: LeaderTerm names that term, and keeps naming it
// after the node has moved on to a later term (the cluster stamps it on
// every answer of the engine opened on the view); a follower's view and
// any other store have none.
func TestLeaderTermOfAView(t *testing.T) {
	c := newCluster(t, 3)
	li := c.leader(-1)
	s := c.nodes[li].Store()
	term := c.nodes[li].Status().Term
	if got := LeaderTerm(s); got != term || got == 0 {
		t.Fatalf("leader's view: LeaderTerm %d, want the term it leads, %d", got, term)
	}
	fi := (li + 1) % 3
	if got := LeaderTerm(c.nodes[fi].Store()); got != 0 {
		t.Fatalf("follower's view: LeaderTerm %d, want 0", got)
	}
	if got := LeaderTerm(memstore.New()); got != 0 {
		t.Fatalf("a memory store: LeaderTerm %d, want 0", got)
	}
	// Cut the leader off until another node leads in a later term and the
	// old leader has noticed.
	c.nodes[li].tr.setBlocked(true)
	nl := c.leader(li)
	poll.CheckFor(t, 15*time.Second, poll.True("the old leader steps down", func() bool { return c.nodes[li].Status().Role != "leader" }))
	if nt := c.nodes[nl].Status().Term; nt <= term {
		t.Fatalf("new leader's term %d, not after %d", nt, term)
	}
	if got := LeaderTerm(s); got != term {
		t.Fatalf("the old view after the leadership moved: LeaderTerm %d, want still %d", got, term)
	}
	if err := writeKV(s, "k", "v"); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("write on the old view: %v, want store.ErrFailed", err)
	}
	c.nodes[li].tr.setBlocked(false)
}
