package raftstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestLeaseFollowsTheMajority: a leader holds the lease while a majority
// answers it, loses it once cut off from the others (before CheckQuorum
// has made it step down: it still says it leads), and the leader elected
// in its place takes a lease of its own term.
func TestLeaseFollowsTheMajority(t *testing.T) {
	c := newCluster(t, 3)
	li := c.leader(-1)
	old := c.nodes[li]
	term := old.Status().Term
	poll.CheckFor(t, 15*time.Second, poll.True("the leader holds the lease", func() bool { return old.leased(term) }))

	old.tr.setBlocked(true)
	var stillLeading bool
	poll.CheckFor(t, 15*time.Second, func() error {
		if old.leased(term) {
			return errors.New("the cut-off leader still holds the lease")
		}
		st := old.Status()
		stillLeading = st.Role == "leader" && st.Term == term
		return nil
	})
	nl := c.leader(li)
	nt := c.nodes[nl].Status().Term
	poll.CheckFor(t, 15*time.Second, func() error {
		if !c.nodes[nl].leased(nt) {
			return fmt.Errorf("the new leader (node %d, term %d) holds no lease", nl+1, nt)
		}
		return nil
	})
	if old.leased(term) || old.leased(nt) {
		t.Fatal("the old leader holds a lease while cut off")
	}
	old.tr.setBlocked(false)
	t.Logf("the old leader had lost its lease while it still led term %d by its own account: %v", term, stillLeading)
}
