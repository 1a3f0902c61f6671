package raftstore

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/tracker"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestNoTransferToAMemberOutOfSync: a balancer's request to hand the
// leadership to a member that is not in sync (here cut off, so behind and
// silent), made on a follower (forwarded over the network) or on the
// leader itself, is not started: the leader keeps leading and every write
// goes through, where Raft would have refused proposals until the
// transfer failed an election timeout later. Once the member is in sync
// again, the same request moves the leadership. The forwarded request,
// which names its target as its sender, does not count as a message from
// that member (Status.Answered).
func TestNoTransferToAMemberOutOfSync(t *testing.T) {
	c := newCluster(t, 3)
	li := c.leader(-1)
	lag, fwd := (li+1)%3, (li+2)%3
	c.nodes[lag].BlockTransport(true)
	s := c.nodes[li].Store()
	poll.CheckFor(t, 10*time.Second, func() error {
		if err := writeKV(s, "behind", "yes"); err != nil {
			return err
		}
		st := c.nodes[li].Status()
		if st.InSync[uint64(lag+1)] {
			return fmt.Errorf("node %d still in sync", lag+1)
		}
		if a := st.Answered[uint64(lag+1)]; time.Since(a) <= c.nodes[li].takeOverWindow() {
			return fmt.Errorf("node %d answered %v ago", lag+1, time.Since(a))
		}
		return nil
	})
	silentSince := time.Now() // lag is out of sync: silent for a while
	for _, asker := range []int{fwd, li} {
		c.nodes[asker].requestTransfer(uint64(lag + 1))
		deadline := time.Now().Add(3 * testTick * electionTicks) // past the timeout a started transfer would hold
		for i := 0; time.Now().Before(deadline); i++ {
			if err := writeKV(c.nodes[li].Store(), fmt.Sprint("k", i), "v"); err != nil {
				t.Fatalf("write %d after node %d asked to move the leadership to node %d, out of sync: %v", i, asker+1, lag+1, err)
			}
		}
	}
	if st := c.nodes[li].Status(); st.Role != "leader" {
		t.Fatalf("node %d no longer leads: %+v", li+1, st)
	}
	// The forwarded request names lag as its sender (Raft forwards it
	// unchanged): it is no sign of life of lag's.
	if a := c.nodes[li].Status().Answered[uint64(lag+1)]; a.After(silentSince) {
		t.Fatalf("node %d, cut off, counted as answering at %v (after %v): the forwarded request was taken for its message", lag+1, a, silentSince)
	}

	c.nodes[lag].BlockTransport(false)
	poll.CheckFor(t, 10*time.Second, poll.True("the cut member in sync again", func() bool {
		return c.nodes[li].Status().InSync[uint64(lag+1)]
	}))
	poll.CheckFor(t, 10*time.Second, func() error {
		if st := c.nodes[lag].Status(); st.Role == "leader" {
			return nil
		}
		c.nodes[fwd].requestTransfer(uint64(lag + 1))
		return fmt.Errorf("node %d does not lead yet", lag+1)
	})
}

// TestTransferableWithoutRecentActive: a member that answered a moment
// ago and holds the log is one a leadership may move to even while
// Raft's RecentActive is clear (CheckQuorum clears it at every election
// timeout until the next answer); one silent for longer than the window,
// one behind by more than the lag, and one Raft only probes are not.
func TestTransferableWithoutRecentActive(t *testing.T) {
	now := time.Now()
	const window = 500 * time.Millisecond
	live := tracker.Progress{State: tracker.StateReplicate, Match: 100, RecentActive: false}
	cases := []struct {
		name   string
		pr     tracker.Progress
		answer time.Time
		want   bool
	}{
		{"live, RecentActive just cleared", live, now.Add(-50 * time.Millisecond), true},
		{"within the lag", tracker.Progress{State: tracker.StateReplicate, Match: 95}, now, true},
		{"silent past the window", live, now.Add(-window - time.Millisecond), false},
		{"never answered", live, time.Time{}, false},
		{"behind past the lag", tracker.Progress{State: tracker.StateReplicate, Match: 80}, now, false},
		{"probed", tracker.Progress{State: tracker.StateProbe, Match: 100}, now, false},
	}
	for _, c := range cases {
		if got := transferable(&c.pr, 100, 10, c.answer, now, window); got != c.want {
			t.Errorf("%s: transferable = %v, want %v", c.name, got, c.want)
		}
	}
}
