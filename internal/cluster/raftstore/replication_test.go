package raftstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// votersOf lists the voters in nd's applied membership, sorted.
func votersOf(nd *Node) []uint64 {
	var out []uint64
	for _, m := range nd.Members() {
		if m.Membership == Voter {
			out = append(out, m.ID)
		}
	}
	return out
}

// startFourOfFactorThree starts four nodes with a replication factor of 3
// and the given ReplaceAfter, and waits until the leader (its index is
// returned) has demoted one of them.
func startFourOfFactorThree(t *testing.T, replaceAfter time.Duration) (*cluster, int) {
	t.Helper()
	c := startClusterTuned(t, 4, false, func(_ int, cfg *Config) {
		cfg.ReplicationFactor = 3
		cfg.ReplaceAfter = replaceAfter
	})
	li := c.leader(-1)
	poll.CheckFor(t, 20*time.Second, func() error {
		if v := votersOf(c.nodes[li]); len(v) != 3 {
			return fmt.Errorf("voters %v, want 3 of them", v)
		}
		return nil
	})
	return c, li
}

// TestReplicationFactorKeepsVotersAndReplacesSilentOnes boots four nodes
// with a replication factor of 3: the leader demotes one to learner. Then
// it stops voters one at a time, never the leader. After the first stop
// the leader replaces the silent voter with the learner (ReplaceAfter),
// so the group still commits once a second original voter stops, with
// only two of its four nodes running. Without the replacement (every
// member a voter, or a factor of 3 and no swap) two of four cannot commit.
// The stopped nodes come back as learners and catch up.
func TestReplicationFactorKeepsVotersAndReplacesSilentOnes(t *testing.T) {
	c, li := startFourOfFactorThree(t, time.Second)
	if err := writeKV(c.nodes[li].Store(), "k1", "1"); err != nil {
		t.Fatal(err)
	}
	voters := votersOf(c.nodes[li])
	var learner uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(voters, id) {
			learner = id
		}
	}
	// Every node, the learner included, holds the write: a learner is a
	// full copy.
	for _, nd := range c.nodes {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(nd, "k1", "1") })
	}

	// Stop a voter other than the leader; the learner takes its place.
	first := -1
	for _, id := range voters {
		if int(id-1) != li {
			first = int(id - 1)
			break
		}
	}
	c.stop(first)
	poll.CheckFor(t, 20*time.Second, func() error {
		li = c.leader(first)
		v := votersOf(c.nodes[li])
		if len(v) != 3 || !slices.Contains(v, learner) || slices.Contains(v, uint64(first+1)) {
			return fmt.Errorf("voters %v: want 3, with node %d in place of node %d", v, learner, first+1)
		}
		return nil
	})

	// Stop the other original voter that does not lead: two of four nodes
	// run, two of the three voters, and the group still commits.
	second := -1
	for _, id := range votersOf(c.nodes[li]) {
		if i := int(id - 1); i != li && id != learner {
			second = i
		}
	}
	if second < 0 {
		t.Fatalf("no second voter to stop among %v (leader %d)", votersOf(c.nodes[li]), li+1)
	}
	c.stop(second)
	li = c.leader(-1)
	if err := writeKV(c.nodes[li].Store(), "k2", "2"); err != nil {
		t.Fatalf("write with two of four nodes running: %v", err)
	}

	// Both come back as learners (the group already has three voters once
	// the second is replaced, or two voters and a learner to promote) and
	// catch up.
	c.restart(first)
	c.restart(second)
	li = c.leader(-1)
	poll.CheckFor(t, 20*time.Second, func() error {
		v := votersOf(c.nodes[li])
		if len(v) != 3 {
			return fmt.Errorf("voters %v, want 3", v)
		}
		for _, nd := range c.nodes {
			if err := stateHas(nd, "k2", "2"); err != nil {
				return err
			}
		}
		return nil
	})
	// The leader counts every member in sync once they have caught up.
	poll.CheckFor(t, 20*time.Second, func() error {
		st := c.nodes[li].Status()
		for id := uint64(1); id <= 4; id++ {
			if !st.InSync[id] {
				return fmt.Errorf("node %d not in sync: %v", id, st.InSync)
			}
		}
		return nil
	})
}

// TestDemotionPicksTheSilentVoter boots four voters with a replication
// factor of 3 and node 2 stopped at once: the leader must demote node 2
// (silent), not node 4 (the highest id, alive). A leader that chose on
// its first tick, before any follower could answer it, took node 4 and
// kept the dead voter.
func TestDemotionPicksTheSilentVoter(t *testing.T) {
	c := startClusterTuned(t, 4, false, func(_ int, cfg *Config) {
		cfg.ReplicationFactor = 3
		cfg.ReplaceAfter = time.Hour // no replacement: only the demotion is under test
	})
	c.stop(1)
	li := c.leader(1)
	poll.CheckFor(t, 20*time.Second, func() error {
		if v := votersOf(c.nodes[li]); !slices.Equal(v, []uint64{1, 3, 4}) {
			return fmt.Errorf("voters %v, want [1 3 4] (node 2, stopped, demoted)", v)
		}
		return nil
	})
	if err := writeKV(c.nodes[li].Store(), "k", "v"); err != nil {
		t.Fatal(err)
	}
}

// TestReplicationFactorOne: three boot members with a factor of 1 keep
// one voter, the leader, which commits on its own log alone; the two
// learners still receive every write, and stopping both does not stop
// the leader committing.
func TestReplicationFactorOne(t *testing.T) {
	c := startClusterTuned(t, 3, false, func(_ int, cfg *Config) { cfg.ReplicationFactor = 1 })
	li := c.leader(-1)
	poll.CheckFor(t, 20*time.Second, func() error {
		if v := votersOf(c.nodes[li]); !slices.Equal(v, []uint64{uint64(li + 1)}) {
			return fmt.Errorf("voters %v, want only the leader, node %d", v, li+1)
		}
		return nil
	})
	if err := writeKV(c.nodes[li].Store(), "k1", "1"); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(nd, "k1", "1") })
	}
	for i := range c.nodes {
		if i != li {
			c.stop(i)
		}
	}
	if err := writeKV(c.nodes[li].Store(), "k2", "2"); err != nil {
		t.Fatalf("the only voter alone: %v", err)
	}
}

// TestRemovedVoterIsReplacedAtOnce: four nodes with a factor of 3;
// removing a voter leaves two, and the leader promotes the standby
// learner without waiting for ReplaceAfter.
func TestRemovedVoterIsReplacedAtOnce(t *testing.T) {
	c, li := startFourOfFactorThree(t, time.Hour)
	voters := votersOf(c.nodes[li])
	var victim uint64
	for _, id := range voters {
		if int(id-1) != li {
			victim = id
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.nodes[li].RemoveMember(ctx, victim); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		v := votersOf(c.nodes[li])
		if len(v) != 3 || slices.Contains(v, victim) {
			return fmt.Errorf("voters %v: want 3 without node %d", v, victim)
		}
		return nil
	})
}
