package raftstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/tracker"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// roles maps each member of nd's applied membership to its role.
func roles(nd *Node) map[uint64]string {
	out := map[uint64]string{}
	for _, m := range nd.Members() {
		out[m.ID] = m.Membership
	}
	return out
}

// waitRole waits until every running node of c has applied id as role.
func (c *cluster) waitRole(id uint64, role string) {
	c.t.Helper()
	for i, nd := range c.nodes {
		if nd == nil {
			continue
		}
		poll.CheckFor(c.t, 20*time.Second, func() error {
			if got := roles(nd)[id]; got != role {
				return fmt.Errorf("node %d sees node %d as %q, want %q", i+1, id, got, role)
			}
			return nil
		})
	}
}

// TestAddedNodeDoesNotCountInQuorum adds a fourth node that is not
// running yet to a three-node group, then stops one of the original three:
// the group must keep committing, because the new node is a learner (it
// does not vote) until it has caught up. The one stopped is the leader
// that added it, so the promotion is left to the next leader. (When AddMember made it a voter
// at once, the quorum became 3 of 4 and the group stopped with 2 live
// nodes.) Then the fourth node starts, catches up and is promoted; the
// roles survive a restart of every node.
func TestAddedNodeDoesNotCountInQuorum(t *testing.T) {
	c := newCluster(t, 3)
	li := c.leader(-1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Node 4's address is reserved (the listener accepts into its backlog
	// and nobody reads) but the node is not started.
	ln4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[li].AddMember(ctx, 4, ln4.Addr().String()); err != nil {
		_ = ln4.Close()
		t.Fatalf("AddMember(4): %v", err)
	}
	c.waitRole(4, Learner)
	for id := uint64(1); id <= 3; id++ {
		if got := roles(c.nodes[li])[id]; got != Voter {
			t.Fatalf("node %d is %q, want voter", id, got)
		}
	}
	// A second add of the same id, learner or voter, is a conflict.
	if err := c.nodes[li].AddMember(ctx, 4, "127.0.0.1:1"); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("adding learner 4 again: %v, want ErrMemberExists", err)
	}
	if err := writeKV(c.nodes[li].Store(), "before-stop", "1"); err != nil {
		t.Fatal(err)
	}
	// The leader that added node 4 stops: the two left elect a leader,
	// which (not the one that added it) later promotes node 4.
	fi := li
	c.stop(fi)
	li = c.leader(fi)
	for i := range 5 {
		if err := writeKV(c.nodes[li].Store(), fmt.Sprint("two-of-three-", i), "1"); err != nil {
			t.Fatalf("write with one original node down and node 4 not started: %v", err)
		}
	}
	// An unreachable learner is never promoted (it has been well over an
	// election timeout: the stop and the new leader's election).
	if got := roles(c.nodes[li])[4]; got != Learner {
		t.Fatalf("node 4, never started, is %q, want learner", got)
	}

	// The learner stays a learner across a restart (its role is in the
	// "conf" record), here of the node that leads now.
	c.stop(li)
	c.restart(li)
	if got := roles(c.nodes[li])[4]; got != Learner {
		t.Fatalf("node %d restarted with node 4 as %q, want learner", li+1, got)
	}
	li = c.leader(fi)

	// Node 4 starts (joining), receives the state, and is promoted.
	c.peers = append(c.peers, Peer{ID: 4, RaftAddr: ln4.Addr().String()})
	c.dirs = append(c.dirs, filepath.Join(t.TempDir(), "node4"))
	c.fss = append(c.fss, crashfs.FS{})
	nd4, err := Open(Config{ID: 4, Peers: slices.Clone(c.peers), Dir: c.dirs[3], Listener: ln4,
		TickInterval: testTick, Logger: quietLogger(), Join: true})
	if err != nil {
		t.Fatalf("open node 4: %v", err)
	}
	c.nodes = append(c.nodes, nd4)
	c.waitRole(4, Voter)
	poll.CheckFor(t, 15*time.Second, func() error { return stateHas(nd4, "two-of-three-4", "1") })
	if err := writeKV(c.nodes[li].Store(), "after-promotion", "1"); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 15*time.Second, func() error { return stateHas(nd4, "after-promotion", "1") })

	// Four voters, one down: 3 of 4 still commit, and the roles survive a
	// restart of every node (the stopped one comes back too).
	c.restart(fi)
	for i := range c.nodes {
		c.stop(i)
	}
	for i := range c.nodes {
		c.restart(i)
	}
	for i, nd := range c.nodes {
		want := map[uint64]string{1: Voter, 2: Voter, 3: Voter, 4: Voter}
		poll.CheckFor(t, 10*time.Second, func() error {
			if got := roles(nd); !maps.Equal(got, want) {
				return fmt.Errorf("node %d restarted with roles %v", i+1, got)
			}
			return nil
		})
	}
	li = c.leader(-1)
	if err := writeKV(c.nodes[li].Store(), "after-restart", "1"); err != nil {
		t.Fatal(err)
	}
}

// TestCaughtUp: the promotion rule, case by case.
func TestCaughtUp(t *testing.T) {
	ok := tracker.Progress{IsLearner: true, RecentActive: true, State: tracker.StateReplicate, Match: 900}
	for _, tc := range []struct {
		name   string
		change func(*tracker.Progress)
		commit uint64
		want   bool
	}{
		{"within the lag", nil, 1000, true},
		{"exactly the lag behind", nil, 1100, true},
		{"one past the lag", nil, 1101, false},
		{"ahead of the commit index", nil, 10, true},
		{"a voter already", func(p *tracker.Progress) { p.IsLearner = false }, 1000, false},
		{"not heard from", func(p *tracker.Progress) { p.RecentActive = false }, 1000, false},
		{"probing", func(p *tracker.Progress) { p.State = tracker.StateProbe }, 1000, false},
		{"receiving a snapshot", func(p *tracker.Progress) { p.State = tracker.StateSnapshot }, 1000, false},
	} {
		pr := ok
		if tc.change != nil {
			tc.change(&pr)
		}
		if got := caughtUp(&pr, tc.commit, 200); got != tc.want {
			t.Errorf("%s: caughtUp = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestTransferSkipsLearners: a graceful stop hands leadership to the most
// up-to-date voter, never to a learner (Raft would ignore it, and the
// leader would keep leading until the stop's deadline).
func TestTransferSkipsLearners(t *testing.T) {
	match := map[uint64]uint64{1: 100, 2: 90, 3: 95, 4: 100}
	for _, tc := range []struct {
		voters []uint64
		want   uint64
	}{
		{[]uint64{1, 2, 3}, 3},    // 4, a learner, is ahead of both
		{[]uint64{1, 2, 3, 4}, 4}, // once promoted it is the target
		{[]uint64{1}, 0},          // no other voter
		{[]uint64{1, 2}, 2},
	} {
		var got uint64
		if c := bestVoters(1, match, tc.voters); len(c) > 0 {
			got = c[0] // transferTarget's choice
		}
		if got != tc.want {
			t.Errorf("voters %v: target %d, want %d", tc.voters, got, tc.want)
		}
	}
}
