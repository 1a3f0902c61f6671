package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// TestBalanceMoveEach: with each shard's own list of the nodes that may
// lead it, a leadership moves only to one of them, and a shard without a
// list (a group shard 0's leader does not hold) is neither counted nor
// moved.
func TestBalanceMoveEach(t *testing.T) {
	cases := []struct {
		name     string
		leaders  []uint64
		eligible [][]uint64
		shard    int
		to       uint64
		ok       bool
	}{
		{"to a member of the shard", []uint64{1, 1, 1}, [][]uint64{{1, 2, 3}, {1, 2}, {1, 3}}, 2, 3, true},
		{"the highest shard with a member to take it", []uint64{1, 1, 1}, [][]uint64{{1, 2, 3}, {1, 2}, {1}}, 1, 2, true},
		{"a shard not held is not counted", []uint64{1, 1, 0}, [][]uint64{{1, 2}, {1, 2}, nil}, 1, 2, true},
		{"nor waited for", []uint64{1, 2, 0}, [][]uint64{{1, 2}, {1, 2}, nil}, 0, 0, false},
		{"an election under way in a held shard", []uint64{1, 0, 1}, [][]uint64{{1, 2}, {1, 2}, {1, 2}}, 0, 0, false},
		{"no member may take it", []uint64{1, 1, 1}, [][]uint64{{1}, {1}, {1}}, 0, 0, false},
	}
	for _, c := range cases {
		k, to, ok := balanceMoveEach(c.leaders, c.eligible)
		if k != c.shard || to != c.to || ok != c.ok {
			t.Errorf("%s: balanceMoveEach(%v, %v) = %d, %d, %v; want %d, %d, %v", c.name, c.leaders, c.eligible, k, to, ok, c.shard, c.to, c.ok)
		}
	}
}

// onLeader runs f on shard k's leader among holders, again on the next
// leader while it fails with ErrNotLeader (for up to 30 s): the
// balancer runs in these tests and may hand the leadership over between
// the lookup and the call, or while a proposal waits. again tells f the
// call is a retry, so that a change that may have applied before the
// old leader answered can be recognised. It returns the leader's 0-based
// index.
func (c *shardCluster) onLeader(k int, holders []uint64, f func(r *Node, again bool) error) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for again := false; ; again = true {
		l := c.subsetLeader(k, holders)
		err := f(c.nodes[l].Shard(k), again)
		if err == nil {
			return l
		}
		if !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			c.t.Fatalf("shard %d on node %d: %v", k, l+1, err)
		}
	}
}

// writeShard writes n keys prefix0..prefix(n-1) to shard k through its
// leader among holders, following the leadership when it moves; a key
// written again on the new leader is harmless, each write setting it to
// the same value.
func (c *shardCluster) writeShard(k int, holders []uint64, prefix string, n int) {
	c.t.Helper()
	for i := range n {
		c.onLeader(k, holders, func(r *Node, _ bool) error {
			return writeKV(r.Store(), fmt.Sprint(prefix, i), value(i))
		})
	}
}

// subsetLeader waits until the nodes holding shard k (by 1-based id)
// agree on a leader among them, and returns its 0-based index.
func (c *shardCluster) subsetLeader(k int, holders []uint64) int {
	c.t.Helper()
	var leader uint64
	poll.CheckFor(c.t, 20*time.Second, func() error {
		leader = 0
		for _, id := range holders {
			s := c.nodes[id-1]
			if s == nil {
				continue
			}
			r := s.Shard(k)
			if r == nil {
				return fmt.Errorf("node %d does not hold shard %d", id, k)
			}
			l := r.Status().Leader
			if l == 0 || leader != 0 && l != leader {
				return fmt.Errorf("shard %d: node %d sees leader %d, another %d", k, id, l, leader)
			}
			leader = l
		}
		if !slices.Contains(holders, leader) {
			return fmt.Errorf("shard %d is led by node %d, not one of %v", k, leader, holders)
		}
		return nil
	})
	return int(leader - 1)
}

// memberPlan is node id's plan when shard k ≥ 1 lives on members[k] and
// shard 0 on every node, with leader as ShardPlan.Leader.
func memberPlan(id uint64, members map[int][]uint64, leader func(int) uint64) ShardPlan {
	return ShardPlan{
		Held: func(k int) bool { return k == 0 || slices.Contains(members[k], id) },
		Peers: func(k int, all []Peer) []Peer {
			if k == 0 {
				return all
			}
			return slices.DeleteFunc(slices.Clone(all), func(p Peer) bool { return !slices.Contains(members[k], p.ID) })
		},
		Leader: leader,
	}
}

// shardLogKeyCount counts shard k's keys in node i's shared log store.
func (c *shardCluster) shardLogKeyCount(i, k int) int {
	c.t.Helper()
	keys := shardLogKeys(k)
	end := append(slices.Clone(keys.prefix[:len(keys.prefix)-1]), keys.prefix[len(keys.prefix)-1]+1)
	n := 0
	if err := c.nodes[i].logs.ScanRange(keys.prefix, end, func(_, _ []byte) error { n++; return nil }); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// TestShardsOnASubset (ADR 0016 step 2): four nodes, three shards, shard
// 1 on nodes 1–3 and shard 2 on nodes 2–4. A node opens only its
// shards' groups; a shard's writes reach its members. Node 4 joins shard
// 1 (AddMember on its leader, Join on node 4), gets its state by a
// snapshot and votes; node 1 is removed from it and leaves it, its state
// deleted (directory and log keys); the shard goes on committing on
// nodes 2–4, and node 1 restarts holding shard 0 alone. Throughout, no
// shard is led by a node that is not its member (the balancer moves
// leaderships within each shard's voters).
func TestShardsOnASubset(t *testing.T) {
	members := map[int][]uint64{1: {1, 2, 3}, 2: {2, 3, 4}}
	holds := func(id uint64, k int) bool { return k == 0 || slices.Contains(members[k], id) }
	c := newPlannedShardCluster(t, 4, 3, lowThresholds, func(i int) ShardPlan { return memberPlan(uint64(i+1), members, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.subsetLeader(0, []uint64{1, 2, 3, 4})
	for k := 1; k <= 2; k++ {
		c.subsetLeader(k, members[k])
	}
	for i, s := range c.nodes {
		for k := range 3 {
			if got := s.Held(k); got != holds(uint64(i+1), k) {
				t.Fatalf("node %d holds shard %d: %v", i+1, k, got)
			}
		}
	}
	if _, err := os.Stat(ShardDir(c.dirs[3], 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("node 4 has a directory for shard 1, which it does not hold: %v", err)
	}
	// A connection for a shard node 4 does not hold is closed once its
	// handshake is done, and holds up no other shard's.
	conn, err := net.Dial("tcp", c.peers[3].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := nodeauth.DialConn(conn, []byte("a cluster secret of 32 bytes...."), nodeauth.RaftSurface(1), 1, 4); err != nil {
		t.Fatalf("handshake for shard 1 with node 4: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection for a shard node 4 does not hold: read %v, want EOF", err)
	}

	c.writeShard(1, members[1], "one-", 60)
	for _, id := range members[1] {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[id-1].Shard(1), "one-59", value(59)) })
	}

	// Node 4 joins shard 1.
	if _, err := c.nodes[3].Join(1, c.peers); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[3].Join(1, c.peers); !errors.Is(err, ErrShardHeld) {
		t.Fatalf("a second join: %v, want ErrShardHeld", err)
	}
	l1 := c.onLeader(1, members[1], func(r *Node, again bool) error {
		err := r.AddMember(ctx, 4, c.peers[3].RaftAddr)
		if again && errors.Is(err, ErrMemberExists) {
			return nil // the first try applied before its leader lost the lead
		}
		return err
	})
	poll.CheckFor(t, 20*time.Second, func() error {
		r := c.nodes[3].Shard(1)
		if err := sameState(c.nodes[l1].Shard(1), r); err != nil {
			return err
		}
		for _, m := range r.Members() {
			if m.ID == 4 && m.Membership == Voter {
				return nil
			}
		}
		return fmt.Errorf("node 4 is not a voter of shard 1 yet: %+v", r.Members())
	})
	if installed(c.nodes[3].Shard(1)) == 0 {
		t.Fatal("node 4 caught up on shard 1 without a snapshot")
	}
	// Status counts it (sluice_raft_snapshots_total), and the sender's.
	if got, want := c.nodes[3].Shard(1).Status().SnapshotsInstalled, installed(c.nodes[3].Shard(1)); got != want {
		t.Fatalf("node 4's status counts %d snapshots installed, want %d", got, want)
	}
	sent := 0
	for _, id := range members[1] {
		sent += c.nodes[id-1].Shard(1).Status().SnapshotsSent
	}
	if sent == 0 {
		t.Fatal("no member of shard 1 counts a snapshot sent")
	}

	// Node 1 is removed from shard 1 and leaves it.
	members[1] = []uint64{2, 3, 4}
	c.onLeader(1, []uint64{1, 2, 3, 4}, func(r *Node, again bool) error {
		if r == c.nodes[0].Shard(1) {
			// Node 1 hands over first (the balancer may hand it
			// back: then this runs again).
			// A short wait: an abandoned transfer would wait out ctx;
			// onLeader asks again.
			tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
			err := r.TransferLeadershipTo(tctx, 2)
			tcancel()
			return fmt.Errorf("%w: node 1 handed shard 1 over (%v)", ErrNotLeader, err)
		}
		err := r.RemoveMember(ctx, 1)
		if again && errors.Is(err, ErrUnknownMember) {
			return nil // the first try applied before its leader lost the lead
		}
		return err
	})
	poll.CheckFor(t, 10*time.Second, poll.True("node 1 learns it was removed from shard 1", func() bool {
		return c.nodes[0].Shard(1).Status().Removed
	}))
	if c.shardLogKeyCount(0, 1) == 0 {
		t.Fatal("node 1 has no log keys of shard 1 before it leaves: the count below proves nothing")
	}
	if err := c.nodes[0].Leave(1); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[0].Leave(1); !errors.Is(err, ErrShardNotHeld) {
		t.Fatalf("a second leave: %v, want ErrShardNotHeld", err)
	}
	if err := c.nodes[0].Leave(0); !errors.Is(err, ErrShardZero) {
		t.Fatalf("leaving shard 0: %v, want ErrShardZero", err)
	}
	if c.nodes[0].Held(1) {
		t.Fatal("node 1 still holds shard 1")
	}
	for _, dir := range []string{ShardDir(c.dirs[0], 1), ShardDir(c.dirs[0], 1) + leftSuffix} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("node 1 left shard 1 but %s is there: %v", dir, err)
		}
	}
	if n := c.shardLogKeyCount(0, 1); n != 0 {
		t.Fatalf("node 1 left shard 1 but its shared log holds %d of its keys", n)
	}
	c.writeShard(1, members[1], "two-", 10)
	for _, id := range members[1] {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[id-1].Shard(1), "two-9", value(9)) })
	}

	// Node 1 restarts with shard 0 alone; every shard's leader stays
	// among its members while the balancer runs.
	c.stop(0)
	c.restart(0)
	if c.nodes[0].Held(1) || c.nodes[0].Held(2) || !c.nodes[0].Held(0) {
		t.Fatal("node 1 restarted with the wrong groups")
	}
	c.subsetLeader(0, []uint64{1, 2, 3, 4})
	for k := 1; k <= 2; k++ {
		c.subsetLeader(k, members[k])
	}
}

// TestOwnMove: a shard's leader moves it to the live voter of that shard
// leading the fewest shards, only when it leads two more.
func TestOwnMove(t *testing.T) {
	cases := []struct {
		name     string
		leaders  []uint64
		self     uint64
		eligible []uint64
		to       uint64
		ok       bool
	}{
		{"two more", []uint64{2, 2, 3}, 2, []uint64{1, 2, 3}, 1, true},
		{"one more is spread enough", []uint64{2, 2, 1, 3}, 2, []uint64{1, 2, 3}, 0, false},
		{"only to a voter of the shard", []uint64{2, 2, 2}, 2, []uint64{2, 3}, 3, true},
		{"no other voter", []uint64{2, 2, 2}, 2, []uint64{2}, 0, false},
		{"the least loaded, lowest id on a tie", []uint64{2, 2, 2, 1, 4}, 2, []uint64{1, 2, 3, 4}, 3, true},
	}
	for _, c := range cases {
		to, ok := ownMove(c.leaders, c.self, c.eligible)
		if to != c.to || ok != c.ok {
			t.Errorf("%s: ownMove(%v, %d, %v) = %d, %v; want %d, %v", c.name, c.leaders, c.self, c.eligible, to, ok, c.to, c.ok)
		}
	}
}

// TestShardsOnASubsetSpreadLeaders: four nodes, three shards (shard 1 on
// nodes 1–3, shard 2 on 2–4), each shard's leader spreading its own
// leadership (ShardPlan.Leader): all three handed to node 2, which holds
// them all, they spread until no node leads two more than another that
// could take one, each shard led by one of its members.
func TestShardsOnASubsetSpreadLeaders(t *testing.T) {
	members := map[int][]uint64{1: {1, 2, 3}, 2: {2, 3, 4}}
	// cp is set once the cluster is made (the balancers ask before) and
	// cleared before the cluster's cleanup stops its nodes, both under
	// mu: the balancers, which call leaderOf, run until their own node
	// stops, and must not read c.nodes while the cleanup writes it.
	var (
		mu sync.Mutex
		cp *shardCluster
	)
	leaderOf := func(k int) uint64 { // as a node without the shard would learn it
		mu.Lock()
		defer mu.Unlock()
		c := cp
		if c == nil {
			return 0
		}
		for _, id := range members[k] {
			if s := c.nodes[id-1]; s != nil && s.Shard(k) != nil {
				if l := s.Shard(k).Status().Leader; l != 0 {
					return l
				}
			}
		}
		return 0
	}
	c := newPlannedShardCluster(t, 4, 3, nil, func(i int) ShardPlan { return memberPlan(uint64(i+1), members, leaderOf) })
	mu.Lock()
	cp = c
	mu.Unlock()
	t.Cleanup(func() { // runs before the cluster's own cleanup (last in, first out)
		mu.Lock()
		cp = nil
		mu.Unlock()
	})
	for k, holders := range map[int][]uint64{0: {1, 2, 3, 4}, 1: members[1], 2: members[2]} {
		c.subsetLeader(k, holders)
	}
	for _, s := range c.nodes {
		s.hold.Store(true) // no balancing while the leaderships are gathered
	}
	for k := range 3 {
		holders := []uint64{1, 2, 3, 4}
		if k > 0 {
			holders = members[k]
		}
		led := func() bool { return c.nodes[1].Shard(k).Status().Leader == 2 }
		if l := c.subsetLeader(k, holders); l != 1 {
			handOver(t, c.nodes[l].Shard(k), 2, led)
		}
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("node 2 leads shard %d", k), led))
	}
	for _, s := range c.nodes {
		s.hold.Store(false)
	}
	poll.CheckFor(t, 30*time.Second, func() error {
		l := []uint64{leaderOf(0), leaderOf(1), leaderOf(2)}
		if l[0] == 0 {
			l[0] = c.nodes[0].Shard(0).Status().Leader
		}
		count := map[uint64]int{}
		for _, id := range l {
			count[id]++
		}
		if count[2] > 1 || !slices.Contains(members[1], l[1]) || !slices.Contains(members[2], l[2]) {
			return fmt.Errorf("leaders by shard %v are not spread", l)
		}
		return nil
	})
}

// TestShardsFinishALeaveACrashCut: a Leave cut short after its rename
// (the crash it allows for) is finished at the next open: the renamed
// directory is removed and the shard's keys leave the shared log, so the
// group opened again starts empty rather than replaying its old log.
func TestShardsFinishALeaveACrashCut(t *testing.T) {
	c := newShardCluster(t, 1, 2)
	c.subsetLeader(1, []uint64{1})
	writeMany(t, c.nodes[0].Shard(1).Store(), "old-", 3)
	c.stop(0)
	dir := ShardDir(c.dirs[0], 1)
	if err := os.Rename(dir, dir+leftSuffix); err != nil {
		t.Fatal(err)
	}
	c.restart(0)
	if _, err := os.Stat(dir + leftSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the left directory is still there: %v", err)
	}
	c.subsetLeader(1, []uint64{1})
	if err := stateHas(c.nodes[0].Shard(1), "old-2", value(2)); err == nil {
		t.Fatal("shard 1 opened again holds a write of the group it left: its log was not deleted")
	}
}

// TestRetireMovesAMemberOut (ADR 0016 step 3): shard 1 on nodes 1 and 2,
// replication factor 2. Node 3 joins it as a learner; once a voter is
// marked (Retire) on the shard's leader, the learner is promoted when it
// has caught up, the marked voter is demoted and then removed, and the group keeps
// two voters throughout. A leader marked itself stays a voter until it
// hands its leadership over; its successor, marking it, moves it out.
// Once it has left, AddMember refuses its id and AddMemberAgain takes it
// back as a learner that catches up. A mark that expired moves nothing.
func TestRetireMovesAMemberOut(t *testing.T) {
	members := map[int][]uint64{1: {1, 2}}
	tune := func(i int, cfg *Config) {
		lowThresholds(i, cfg)
		cfg.ReplicationFactor = 2
		cfg.ReplaceAfter = time.Hour
	}
	c := newPlannedShardCluster(t, 3, 2, tune, func(i int) ShardPlan { return memberPlan(uint64(i+1), members, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range c.nodes {
		s.hold.Store(true) // the balancer moves no leadership here
	}
	l1 := c.subsetLeader(1, members[1])
	writeMany(t, c.nodes[l1].Shard(1).Store(), "one-", 40)
	if _, err := c.nodes[2].Join(1, c.peers); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[l1].Shard(1).AddMember(ctx, 3, c.peers[2].RaftAddr); err != nil {
		t.Fatal(err)
	}
	shape := func(r *Node) string {
		var s []string
		for _, m := range r.Members() {
			s = append(s, fmt.Sprint(m.ID, m.Membership[:1]))
		}
		return fmt.Sprint(s)
	}
	// Caught up, node 3 stays a learner: the factor's two voters are there.
	poll.CheckFor(t, 20*time.Second, func() error {
		return sameState(c.nodes[l1].Shard(1), c.nodes[2].Shard(1))
	})
	if got := shape(c.nodes[l1].Shard(1)); got != "[1v 2v 3l]" {
		t.Fatalf("shard 1 before any mark: %s", got)
	}
	// The leader marked itself keeps its vote.
	self := uint64(l1 + 1)
	if err := c.nodes[l1].Shard(1).Retire([]uint64{self}, time.Minute); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		if got := shape(c.nodes[l1].Shard(1)); got != "[1v 2v 3v]" {
			return fmt.Errorf("shard 1 with its leader marked: %s", got)
		}
		return nil
	})
	// It hands over to the other old voter, which is told to move it out.
	other := 3 - self
	handOver(t, c.nodes[l1].Shard(1), other, func() bool { return c.nodes[other-1].Shard(1).Status().Role == "leader" })
	if err := c.nodes[2].Shard(1).Retire([]uint64{self}, time.Minute); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Retire on a follower: %v, want ErrNotLeader", err)
	}
	lead := c.nodes[other-1].Shard(1)
	// The new leader, with a voter too many and no mark, demotes the
	// highest id, as without a placement.
	poll.CheckFor(t, 10*time.Second, func() error {
		if got := shape(lead); got != "[1v 2v 3l]" {
			return fmt.Errorf("shard 1 under its new leader: %s", got)
		}
		return nil
	})
	// A mark that expired moves nothing.
	if err := lead.Retire([]uint64{self}, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * testTick) // the absence of a change: a bounded wait is the test
	if got := shape(lead); got != "[1v 2v 3l]" {
		t.Fatalf("an expired mark changed shard 1: %s", got)
	}
	if err := lead.Retire([]uint64{self}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := lead.Retiring(); !slices.Equal(got, []uint64{self}) {
		t.Fatalf("Retiring = %v, want [%d]", got, self)
	}
	want := fmt.Sprintf("[%dv 3v]", other)
	poll.CheckFor(t, 20*time.Second, func() error {
		if got := shape(lead); got != want {
			return fmt.Errorf("shard 1 with node %d marked: %s, want %s", self, got, want)
		}
		return nil
	})
	writeMany(t, lead.Store(), "two-", 10)
	poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[2].Shard(1), "two-9", value(9)) })

	// The node moved out leaves, its copy deleted. AddMember refuses its
	// id; AddMemberAgain takes it back as a learner, which catches up.
	if err := c.nodes[self-1].Leave(1); err != nil {
		t.Fatal(err)
	}
	if err := lead.AddMember(ctx, self, c.peers[self-1].RaftAddr); !errors.Is(err, ErrIDRemoved) {
		t.Fatalf("AddMember of a node the group removed: %v, want ErrIDRemoved", err)
	}
	if _, err := c.nodes[self-1].Join(1, c.peers); err != nil {
		t.Fatal(err)
	}
	if err := lead.AddMemberAgain(ctx, self, c.peers[self-1].RaftAddr); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		if err := sameState(lead, c.nodes[self-1].Shard(1)); err != nil {
			return fmt.Errorf("%w: leader %s %+v, node %d %s %+v", err, shape(lead), lead.Status(), self, shape(c.nodes[self-1].Shard(1)), c.nodes[self-1].Shard(1).Status())
		}
		return nil
	})
	if err := stateHas(c.nodes[self-1].Shard(1), "two-9", value(9)); err != nil {
		t.Fatalf("the node taken back: %v", err)
	}
	want = fmt.Sprintf("[%dv %dl 3v]", other, self)
	if self < other {
		want = fmt.Sprintf("[%dl %dv 3v]", self, other)
	}
	if got := shape(lead); got != want {
		t.Fatalf("shard 1 with node %d back: %s, want %s", self, got, want)
	}
}

// handOver has r, a group's leader, transfer its leadership to node to
// until led reports it done, within 30 s. Raft abandons a transfer that
// its target did not complete within an election timeout, and the leader
// goes on leading: a test that asked once waited out its context (CI,
// loaded, saw TestRetireMovesAMemberOut do so).
func handOver(t *testing.T, r *Node, to uint64, led func() bool) {
	t.Helper()
	poll.CheckFor(t, 30*time.Second, func() error {
		if led() {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.TransferLeadershipTo(ctx, to)
		cancel()
		if err == nil && led() {
			return nil
		}
		return fmt.Errorf("the leadership is not on node %d yet (%v)", to, err)
	})
}
