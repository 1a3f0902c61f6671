package raftstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

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

// TestLateMessageDoesNotRenewTheLease: a leader's lease rests on when a
// majority acknowledged its leadership, not on when their messages
// arrived. A follower's message of the leader's term that reaches it late
// (it sat in a socket buffer while the leader was paused by SIGSTOP, or on
// a congested link) says nothing about the present: it must not give a
// lease back to a leader that has heard from nobody since its lease ran
// out. The cluster's fault harness found the difference: a leader resumed
// after a pause delivered messages that its successor had already
// deleted.
func TestLateMessageDoesNotRenewTheLease(t *testing.T) {
	// Slow ticks: the lease lasts 1 s after the last acknowledgement and
	// CheckQuorum deposes a leader cut off for 2 to 4 s, so there is a
	// second between the two in which to deliver the late message.
	c := startClusterTuned(t, 3, false, func(_ int, cfg *Config) { cfg.TickInterval = 200 * time.Millisecond })
	li := c.leader(-1)
	l := c.nodes[li]
	term := l.Status().Term
	poll.CheckFor(t, 15*time.Second, poll.True("the leader holds the lease", func() bool { return l.leased(term) }))
	f := c.nodes[(li+1)%3].cfg.ID

	l.tr.setBlocked(true)
	poll.CheckFor(t, 15*time.Second, poll.True("the cut-off leader's lease ran out", func() bool { return !l.leased(term) }))
	// A heartbeat response of the leader's term from a follower, as it was
	// sent before the cut.
	l.recvc <- &pb.Message{Type: pb.MessageType_MsgHeartbeatResp.Enum(), From: new(f), To: new(l.cfg.ID), Term: new(term)}
	// Once the loop has taken it, a send on the unbuffered transfer
	// channel completes only at the loop's next turn, after the Ready
	// cycle (and lease refresh) that followed the message. (A transfer to
	// the leader itself is ignored.)
	poll.CheckFor(t, 15*time.Second, poll.True("the loop took the message", func() bool { return len(l.recvc) == 0 }))
	l.transferc <- transferRequest{to: l.cfg.ID}
	if st := l.Status(); st.Role != "leader" || st.Term != term {
		t.Fatalf("the cut-off leader stepped down (%s, term %d) before the test could judge it", st.Role, st.Term)
	}
	if l.leased(term) {
		t.Fatal("a late message of the leader's term gave it the lease again, though no member has heard from it since its lease ran out")
	}
	l.tr.setBlocked(false)
}
