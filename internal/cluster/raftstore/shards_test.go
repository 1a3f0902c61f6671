package raftstore

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

func TestBalanceMove(t *testing.T) {
	cases := []struct {
		name     string
		leaders  []uint64
		eligible []uint64
		shard    int
		to       uint64
		ok       bool
	}{
		{"spread", []uint64{1, 2, 3}, []uint64{1, 2, 3}, 0, 0, false},
		{"one leads all", []uint64{1, 1, 1}, []uint64{1, 2, 3}, 2, 2, true},
		{"two and none", []uint64{2, 1, 2}, []uint64{1, 2, 3}, 2, 3, true},
		{"off by one is fine", []uint64{1, 1, 2, 3}, []uint64{1, 2, 3}, 0, 0, false},
		{"election under way", []uint64{1, 0, 1}, []uint64{1, 2, 3}, 0, 0, false},
		{"the idle node is not heard", []uint64{1, 1, 2}, []uint64{1, 2}, 0, 0, false},
		{"a lone node", []uint64{1, 1, 1}, []uint64{1}, 0, 0, false},
		{"shard 0 moves last", []uint64{1, 2, 2, 2, 1, 3}, []uint64{1, 2, 3, 4}, 3, 4, true},
		{"an unheard leader's shard still moves", []uint64{4, 4, 1}, []uint64{1, 2, 3}, 1, 2, true},
	}
	for _, c := range cases {
		k, to, ok := balanceMove(c.leaders, c.eligible)
		if k != c.shard || to != c.to || ok != c.ok {
			t.Errorf("%s: balanceMove(%v, %v) = %d, %d, %v; want %d, %d, %v", c.name, c.leaders, c.eligible, k, to, ok, c.shard, c.to, c.ok)
		}
	}
}

// shardCluster is n nodes in this process, each hosting count shards.
type shardCluster struct {
	t      *testing.T
	peers  []Peer
	dirs   []string
	count  int
	nodes  []*Shards // nil while down
	authNo atomic.Int64
	tune   func(i int, cfg *Config) // nil: none
	plan   func(i int) ShardPlan    // nil: every node holds every shard
}

func newShardCluster(t *testing.T, n, count int) *shardCluster {
	t.Helper()
	return newTunedShardCluster(t, n, count, nil)
}

func newTunedShardCluster(t *testing.T, n, count int, tune func(int, *Config)) *shardCluster {
	t.Helper()
	return newPlannedShardCluster(t, n, count, tune, nil)
}

// newPlannedShardCluster is newTunedShardCluster with each node's shard
// plan (nil: every shard on every node).
func newPlannedShardCluster(t *testing.T, n, count int, tune func(int, *Config), plan func(int) ShardPlan) *shardCluster {
	t.Helper()
	c := &shardCluster{t: t, count: count, nodes: make([]*Shards, n), tune: tune, plan: plan}
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		c.peers = append(c.peers, Peer{ID: uint64(i + 1), RaftAddr: ln.Addr().String()})
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), fmt.Sprint("node", i+1)))
	}
	for i := range n {
		c.open(i, lns[i])
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

func (c *shardCluster) open(i int, ln net.Listener) {
	c.t.Helper()
	cfg := Config{
		ID: uint64(i + 1), Peers: c.peers, Dir: c.dirs[i], Listener: ln,
		TickInterval: testTick, Logger: quietLogger(), Secret: []byte("a cluster secret of 32 bytes...."),
		OnAuthFailure: func() { c.authNo.Add(1) },
	}
	if c.tune != nil {
		c.tune(i, &cfg)
	}
	var plan ShardPlan
	if c.plan != nil {
		plan = c.plan(i)
	}
	s, err := OpenShardsPlan(cfg, c.count, 100*time.Millisecond, plan)
	if err != nil {
		c.t.Fatalf("open node %d: %v", i+1, err)
	}
	c.nodes[i] = s
}

func (c *shardCluster) stop(i int) {
	if c.nodes[i] != nil {
		_ = c.nodes[i].Close()
		c.nodes[i] = nil
	}
}

func (c *shardCluster) restart(i int) {
	c.t.Helper()
	c.open(i, relisten(c.t, c.peers[i].RaftAddr))
}

// leaders is each shard's leader as every running node sees it, once
// they agree and every shard has one.
func (c *shardCluster) leaders() ([]uint64, error) {
	var seen []uint64
	for i, s := range c.nodes {
		if s == nil {
			continue
		}
		l := s.Leaders()
		if slices.Contains(l, 0) {
			return nil, fmt.Errorf("node %d sees leaders %v", i+1, l)
		}
		if seen != nil && !slices.Equal(seen, l) {
			return nil, fmt.Errorf("node %d sees leaders %v, another %v", i+1, l, seen)
		}
		seen = l
	}
	return seen, nil
}

// spreadOver waits until the shards' leaders are the running nodes, each
// leading as many shards as any other, give or take one, and returns them.
func (c *shardCluster) spreadOver(up []uint64, within time.Duration) []uint64 {
	c.t.Helper()
	var got []uint64
	poll.CheckFor(c.t, within, func() error {
		l, err := c.leaders()
		if err != nil {
			return err
		}
		count := map[uint64]int{}
		for _, id := range l {
			if !slices.Contains(up, id) {
				return fmt.Errorf("leaders %v: node %d is down", l, id)
			}
			count[id]++
		}
		lo, hi := len(l), 0
		for _, id := range up {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if hi-lo > 1 {
			return fmt.Errorf("leaders %v are not spread over nodes %v", l, up)
		}
		got = l
		return nil
	})
	return got
}

// TestShardsSpreadLeaders: three nodes with three shards each (ADR 0015
// step 2): every shard is a group of its own on one listener a node, the
// balancer leaves each node leading one, a killed node's shard is led
// elsewhere within an election or two, and the node back gets one again.
func TestShardsSpreadLeaders(t *testing.T) {
	c := newShardCluster(t, 3, 3)
	leaders := c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	t.Logf("leaders by shard: %v", leaders)

	// Each shard's writes land in its own group only.
	for k, l := range leaders {
		if err := writeKV(c.nodes[l-1].Shard(k).Store(), fmt.Sprint("k", k), fmt.Sprint("v", k)); err != nil {
			t.Fatalf("shard %d: write on its leader %d: %v", k, l, err)
		}
	}
	for i := range c.nodes {
		for k := range c.count {
			for j := range c.count {
				err := stateHas(c.nodes[i].Shard(k), fmt.Sprint("k", j), fmt.Sprint("v", j))
				if j == k && err != nil {
					poll.CheckFor(t, 10*time.Second, func() error {
						return stateHas(c.nodes[i].Shard(k), fmt.Sprint("k", j), fmt.Sprint("v", j))
					})
				}
				if j != k && err == nil {
					t.Fatalf("node %d shard %d holds shard %d's write", i+1, k, j)
				}
			}
		}
	}

	// Hand every leadership to node 1: the balancer spreads them again.
	for _, s := range c.nodes {
		s.hold.Store(true)
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		l, err := c.leaders()
		if err != nil {
			return err
		}
		if !slices.Equal(l, []uint64{1, 1, 1}) {
			for k := range c.count {
				c.nodes[0].Shard(k).requestTransfer(1)
			}
			return fmt.Errorf("leaders %v, want node 1 leading every shard", l)
		}
		return nil
	})
	for _, s := range c.nodes {
		s.hold.Store(false)
	}
	leaders = c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	t.Logf("leaders by shard after all were handed to node 1: %v", leaders)

	// Kill the leader of shard 1: another node leads it, the two left
	// share the three shards, and shard 1 takes writes again.
	dead := leaders[1]
	c.stop(int(dead - 1))
	start := time.Now()
	var up []uint64
	for _, p := range c.peers {
		if p.ID != dead {
			up = append(up, p.ID)
		}
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		l, err := c.leaders()
		if err != nil {
			return err
		}
		if l[1] == dead {
			return fmt.Errorf("shard 1 still led by node %d", dead)
		}
		return nil
	})
	t.Logf("shard 1 led by another node %v after its leader, node %d, was killed", time.Since(start).Round(time.Millisecond), dead)
	after := c.spreadOver(up, 20*time.Second)
	poll.CheckFor(t, 10*time.Second, func() error {
		l, err := c.leaders()
		if err != nil {
			return err
		}
		return writeKV(c.nodes[l[1]-1].Shard(1).Store(), "after", "kill")
	})
	t.Logf("leaders by shard with node %d down: %v", dead, after)

	// The node back leads one shard again.
	c.restart(int(dead - 1))
	final := c.spreadOver([]uint64{1, 2, 3}, 30*time.Second)
	t.Logf("leaders by shard after node %d came back: %v", dead, final)
	if n := c.authNo.Load(); n != 0 {
		t.Fatalf("%d handshakes or frames refused between the nodes", n)
	}
}

// TestShardsOneShardIsAPlainNode: a node with one shard speaks to nodes
// opened without shards, on the same wire and directory layout.
func TestShardsOneShardIsAPlainNode(t *testing.T) {
	c := startClusterTuned(t, 3, false, nil)
	c.stop(0)
	ln, err := net.Listen("tcp", c.peers[0].RaftAddr)
	if err != nil {
		t.Skipf("cannot bind node 1's address again: %v", err)
	}
	s, err := OpenShards(Config{ID: 1, Peers: c.peers, Dir: c.dirs[0], Listener: ln, TickInterval: testTick, Logger: quietLogger()}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	// Whoever leads (the node with shards or one without), the write
	// reaches all three.
	all := []*Node{s.Shard(0), c.nodes[1], c.nodes[2]}
	poll.CheckFor(t, 15*time.Second, func() error {
		for _, nd := range all {
			if nd.Status().Role == "leader" {
				return writeKV(nd.Store(), "mixed", "yes")
			}
		}
		return errors.New("no leader")
	})
	for _, nd := range all {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(nd, "mixed", "yes") })
	}
}

// TestShardsRefuseAnUnknownShard: a connection for a shard this node does
// not serve fails its handshake and is counted.
func TestShardsRefuseAnUnknownShard(t *testing.T) {
	c := newShardCluster(t, 1, 2)
	conn, err := net.Dial("tcp", c.peers[0].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, err = nodeauth.DialConn(conn, []byte("a cluster secret of 32 bytes...."), nodeauth.RaftSurface(2), 9, 1)
	if !errors.Is(err, nodeauth.ErrRefused) && !errors.Is(err, nodeauth.ErrAuth) {
		t.Fatalf("handshake for shard 2 of a two-shard node: %v, want refused", err)
	}
	poll.CheckFor(t, 5*time.Second, func() error {
		if c.authNo.Load() == 0 {
			return errors.New("refusal not counted")
		}
		return nil
	})
	conn2, err := net.Dial("tcp", c.peers[0].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn2.Close() }()
	if _, err := nodeauth.DialConn(conn2, []byte("a cluster secret of 32 bytes...."), nodeauth.RaftSurface(1), 9, 1); err != nil {
		t.Fatalf("handshake for shard 1: %v", err)
	}
}

// TestShardsSnapshotReachesItsShard: a follower that missed more than a
// shard's log keeps catches up by a snapshot streamed on a connection of
// that shard, and ends with that shard's state, not another's.
func TestShardsSnapshotReachesItsShard(t *testing.T) {
	c := newTunedShardCluster(t, 3, 2, lowThresholds)
	leaders := c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	// A node that leads neither shard falls behind.
	fi := -1
	for i := range 3 {
		if !slices.Contains(leaders, uint64(i+1)) {
			fi = i
		}
	}
	catchUpBySnapshots(t, c, fi, leaders, 60)
	for k := range leaders {
		if err := stateHas(c.nodes[fi].Shard(k), fmt.Sprint("s", 1-k, "-", 59), value(59)); err == nil {
			t.Fatalf("shard %d holds shard %d's writes", k, 1-k)
		}
	}
}

// TestShardsConfigRefused: no shards, and a shard other than 0 without
// OpenShards' listener, are refused at open, and the listener is closed.
func TestShardsConfigRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(ln net.Listener) error
	}{
		{"no shards", func(ln net.Listener) error {
			_, err := OpenShards(Config{ID: 1, Peers: []Peer{{ID: 1}}, Dir: t.TempDir(), Listener: ln}, 0, 0)
			return err
		}},
		{"shard 1 on a plain listener", func(ln net.Listener) error {
			_, err := Open(Config{ID: 1, Peers: []Peer{{ID: 1}}, Dir: t.TempDir(), Listener: ln, Shard: 1})
			return err
		}},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.open(ln); err == nil {
			t.Errorf("%s: opened", c.name)
		}
		if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: the listener is still open (accept: %v)", c.name, err)
		}
	}
}

// TestEligibleNeedsARecentAnswer: a leadership goes only to a voter that
// answered shard 0's leader within half an election timeout, not to one
// merely heard from within a timeout (Heard is refreshed once a timeout,
// so a node killed a moment ago is still "heard"), nor to a learner.
func TestEligibleNeedsARecentAnswer(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const election = time.Second
	members := []Member{{ID: 1, Membership: Voter}, {ID: 2, Membership: Voter}, {ID: 3, Membership: Voter}, {ID: 4, Membership: Learner}}
	st := Status{ID: 1,
		Heard:    map[uint64]time.Time{2: now.Add(-100 * time.Millisecond), 3: now.Add(-100 * time.Millisecond), 4: now},
		Answered: map[uint64]time.Time{2: now.Add(-50 * time.Millisecond), 3: now.Add(-700 * time.Millisecond), 4: now},
	}
	if got := eligibleAt(members, st, now, election); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("eligible = %v, want [1 2] (3 silent for 700ms, 4 a learner)", got)
	}
	delete(st.Answered, 2)
	if got := eligibleAt(members, st, now, election); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("eligible = %v, want [1] (2 never answered)", got)
	}
}
