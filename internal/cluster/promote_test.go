package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// TestLowDiskLearnerIsNotPromoted: three nodes with a replication factor
// of 2 keep one standby learner. Its disk goes below min_free_disk, and
// the leader removes the other voter, which leaves one voter where the
// factor asks for two: the caught-up learner must not be promoted while
// its reports say its disk is low, and is promoted once they say it has
// room again.
func TestLowDiskLearnerIsNotPromoted(t *testing.T) {
	const minFree = 1 << 30
	var free [4]atomic.Uint64 // by node id
	for i := range free {
		free[i].Store(10 << 30)
	}
	nodes := threeNodesWith(t, func(o *server.Options) {
		o.MinFreeDisk = minFree
		o.Cluster.ReplicationFactor = 2
	}, func(n *Node) {
		id := n.opts.Cluster.NodeID
		n.freeBytes = func(string) (uint64, error) { return free[id].Load(), nil }
	})
	leader, _ := leaderAndFollowers(t, nodes)
	membership := func() map[uint64]string {
		out := map[uint64]string{}
		for _, m := range leader.raft.Status().Members {
			out[m.ID] = m.Membership
		}
		return out
	}
	var voter, learner uint64
	poll.CheckFor(t, 20*time.Second, func() error {
		voter, learner = 0, 0
		for id, kind := range membership() {
			switch {
			case id == leader.opts.Cluster.NodeID:
			case kind == raftstore.Voter:
				voter = id
			default:
				learner = id
			}
		}
		if voter == 0 || learner == 0 {
			return fmt.Errorf("membership %v: want the leader, one more voter and a learner", membership())
		}
		return nil
	})
	free[learner].Store(minFree / 2)
	poll.CheckFor(t, 20*time.Second, func() error {
		v, ok := leader.view()
		if !ok {
			return fmt.Errorf("node %d no longer leads", leader.opts.Cluster.NodeID)
		}
		for _, m := range v.Members {
			if m.ID == learner && m.DiskLow && m.InSync {
				return nil
			}
		}
		return fmt.Errorf("the leader does not see learner %d in sync with a low disk yet: %+v", learner, v.Members)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := leader.raft.RemoveMember(ctx, voter); err != nil {
		t.Fatal(err)
	}
	// A negative: the leader reconciles on every 10 ms tick; 100 ticks
	// without the promotion.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if kind := membership()[learner]; kind != raftstore.Learner {
			t.Fatalf("learner %d with a low disk became %q", learner, kind)
		}
		time.Sleep(10 * time.Millisecond)
	}
	free[learner].Store(10 << 30)
	poll.CheckFor(t, 20*time.Second, func() error {
		if kind := membership()[learner]; kind != raftstore.Voter {
			return fmt.Errorf("node %d is %q, want voter once its disk has room", learner, kind)
		}
		return nil
	})
}
