package cluster

// Following the placement (ADR 0016 step 3, [cluster] placement
// "subset"): a node holds the groups of the shards whose members it is,
// and nothing else. The placement controller (controller.go) changes a
// shard's members on that shard's leader; the leader records its
// group's membership in shard 0, with its leadership (recordLeadership);
// and every node, from its copy of shard 0, joins a shard whose record
// lists it and leaves one whose record no longer does (followPlacement).
//
// A record may be older than this node's own copy of the group: it was
// read before this node was added. A node therefore leaves a group only
// when the record that leaves it out was made at a later applied index
// than its own copy has reached (a member the group removed receives
// nothing more), or when its copy says it was removed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// shardRecord is what a shard's leader records in shard 0
// (engine.RecordLeader's advertisement, opaque to the engine): its
// Advertisement, and its group's membership as it had applied it at
// Applied. A record of a build before 2026-12-06 has no membership.
type shardRecord struct {
	Advertisement
	Voters   []uint64 `json:"voters,omitempty"`
	Learners []uint64 `json:"learners,omitempty"`
	Applied  uint64   `json:"applied,omitempty"`
}

// members lists the record's voters and learners.
func (r shardRecord) members() []uint64 {
	return append(slices.Clone(r.Voters), r.Learners...)
}

// has reports whether id is a voter or learner of the record.
func (r shardRecord) has(id uint64) bool {
	return slices.Contains(r.Voters, id) || slices.Contains(r.Learners, id)
}

// known reports whether the record carries a membership.
func (r shardRecord) known() bool { return len(r.Voters) > 0 }

// shardRecordOf is the record of shard k in this node's copy of shard 0,
// and the node it names as leader.
func (n *Node) shardRecordOf(k int) (shardRecord, uint64, bool) {
	l, ok := n.storedLeader(k)
	if !ok {
		return shardRecord{}, 0, false
	}
	var rec shardRecord
	if json.Unmarshal(l.Ad, &rec) != nil || rec.Term != l.Term {
		return shardRecord{}, 0, false
	}
	return rec, l.Node, true
}

// storedLeader reads shard k's leader record (engine.RecordLeader) in this
// node's copy of shard 0; false when there is none or it cannot be read.
func (n *Node) storedLeader(k int) (server.ShardLeader, bool) {
	st := n.raft.Store()
	l, ok, err := server.StoredLeader(st, k)
	_ = st.Close() // a view: closing it ends nothing beneath
	return l, err == nil && ok
}

// recordOfGroup is the record of this node's member r of a shard it
// leads: ad and the group's applied membership.
func recordOfGroup(ad Advertisement, r *raftstore.Node) shardRecord {
	rec := shardRecord{Advertisement: ad}
	st := r.Status()
	for _, m := range st.Members {
		if m.Membership == raftstore.Voter {
			rec.Voters = append(rec.Voters, m.ID)
		} else {
			rec.Learners = append(rec.Learners, m.ID)
		}
	}
	rec.Applied = st.Applied
	return rec
}

// followEvery is how often a node compares the groups it holds with
// the records in its copy of shard 0.
const followEvery = time.Second

// followPlacement joins and leaves shards' groups as the records in this
// node's copy of shard 0 list it, once a second, until ctx ends.
func (n *Node) followPlacement(ctx context.Context) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for k := 1; k < n.shards.Len() && ctx.Err() == nil; k++ {
			if err := n.followShardRecord(k); err != nil {
				n.shardLog(k).Warn("following the shard's placement; next round retries", "err", err)
			}
		}
	}
}

// followShardRecord joins or leaves shard k as its record says.
func (n *Node) followShardRecord(k int) error {
	self := n.opts.Cluster.NodeID
	rec, leader, ok := n.shardRecordOf(k)
	r := n.shards.Shard(k)
	switch {
	case !ok || !rec.known():
		return nil
	case r == nil && rec.has(self):
		peers := n.peersOf(rec.members())
		r, err := n.shards.Join(k, peers)
		if errors.Is(err, raftstore.ErrShardHeld) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("joining: %w", err)
		}
		n.shardLog(k).Info("joined the shard: its leader added this node", "leader", leader, "voters", rec.Voters, "learners", rec.Learners)
		n.followShard(k, r)
	case r != nil && leader != self && !rec.has(self):
		st := r.Status()
		if !st.Removed && rec.Applied <= st.Applied {
			return nil // a record older than this node's copy
		}
		n.unfollowShard(k)
		if err := n.shards.Leave(k); err != nil && !errors.Is(err, raftstore.ErrShardNotHeld) {
			return fmt.Errorf("leaving: %w", err)
		}
		n.shardLog(k).Info("left the shard: its leader moved this node out; its copy is deleted", "leader", leader, "voters", rec.Voters, "learners", rec.Learners)
	}
	return nil
}

// peersOf lists ids, and this node, with their Raft addresses as shard
// 0's membership knows them (an id it does not know is left out).
func (n *Node) peersOf(ids []uint64) []raftstore.Peer {
	addrs := map[uint64]string{}
	for _, m := range n.raft.Members() {
		addrs[m.ID] = m.RaftAddr
	}
	self := n.opts.Cluster.NodeID
	out := []raftstore.Peer{{ID: self, RaftAddr: n.opts.Cluster.Self().Raft}}
	for _, id := range ids {
		if a := addrs[id]; a != "" && id != self {
			out = append(out, raftstore.Peer{ID: id, RaftAddr: a})
		}
	}
	return out
}

// shardRun is the goroutine that follows the leader changes of one
// shard above 0 this node holds.
type shardRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// followShard starts following shard k's leader changes on this node's
// member r of it (leadership.onStatus), under the context Run gave
// (startShards); it does nothing once Run is stopping.
func (n *Node) followShard(k int, r *raftstore.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.shardsCtx == nil || n.shardsCtx.Err() != nil || n.shardRuns[k] != nil {
		return
	}
	ctx, cancel := context.WithCancel(n.shardsCtx)
	run := &shardRun{cancel: cancel, done: make(chan struct{})}
	n.shardRuns[k] = run
	go func() {
		defer close(run.done)
		l := &leadership{n: n, k: k}
		defer l.end()
		l.onStatus(ctx, r.Status())
		for {
			select {
			case <-ctx.Done():
				return
			case st := <-r.Changes():
				l.onStatus(ctx, st)
			}
		}
	}()
}

// unfollowShard stops following shard k and waits until this node's
// server for it, if it led it, has stopped.
func (n *Node) unfollowShard(k int) {
	n.mu.Lock()
	run := n.shardRuns[k]
	delete(n.shardRuns, k)
	n.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
}

// startShards follows the leader changes of every shard above 0 this
// node holds, and of those it joins later, until ctx ends; stopShards
// waits for them.
func (n *Node) startShards(ctx context.Context) {
	n.mu.Lock()
	n.shardsCtx, n.shardRuns = ctx, map[int]*shardRun{}
	n.mu.Unlock()
	for k := 1; k < n.shards.Len(); k++ {
		if r := n.shards.Shard(k); r != nil {
			n.followShard(k, r)
		}
	}
}

// stopShards waits for every shard's follower to end (its context, the
// one startShards was given, ended).
func (n *Node) stopShards() {
	n.mu.Lock()
	runs := make([]*shardRun, 0, len(n.shardRuns))
	for _, run := range n.shardRuns {
		runs = append(runs, run)
	}
	n.mu.Unlock()
	for _, run := range runs {
		<-run.done
	}
}

// dlSourcesFresh is how long a shard leader's listing of dead-letter
// queues (shardMap), as it answered it, is used again by the engine's
// periodic readers (every scrape of its DLQ metrics, every alert round).
const dlSourcesFresh = 5 * time.Second

// shardMapKey names one shard leader's listing: the shard and the path.
type shardMapKey struct {
	shard int
	path  string
}

// shardMapAnswer is one shard leader's answer to a shardMapKey's path.
type shardMapAnswer struct {
	at time.Time
	m  map[string][]string
}

// shardMap returns the map of queue names to queue names that the leader
// of shard j answers on path (a node-only GET, as JSON): for a shard this
// node holds no copy of ([cluster] placement "subset"),
// server.ShardDLSourcesPath, each queue a RedrivePolicy there names with
// the queues naming it; for shard 0, ShardAMQPRoutesPath (amqpRoutes). An answer is used
// again for dlSourcesFresh, unless fresh. On an error it also returns the
// last answer had, if any (the caller chooses whether a stale one will
// do).
func (n *Node) shardMap(j int, path string, fresh bool) (map[string][]string, error) {
	key := shardMapKey{j, path}
	n.mu.Lock()
	a := n.shardMaps[key]
	n.mu.Unlock()
	if !a.at.IsZero() && !fresh && time.Since(a.at) < dlSourcesFresh {
		return a.m, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, err := n.shardRequest(ctx, j, http.MethodGet, path, nil, 4<<20, 0)
	if err != nil {
		return a.m, err
	}
	var m map[string][]string
	if err := json.Unmarshal(b, &m); err != nil {
		return a.m, fmt.Errorf("shard %d's answer to %s: %w", j, path, err)
	}
	n.mu.Lock()
	if n.shardMaps == nil {
		n.shardMaps = map[shardMapKey]shardMapAnswer{}
	}
	n.shardMaps[key] = shardMapAnswer{at: time.Now(), m: m}
	n.mu.Unlock()
	return m, nil
}
