package cluster

// Queue placements and leader records (ADR 0016,
// docs/adr/0016-shards-on-a-subset.md): with several shards, shard 0's
// engine keeps an entry per queue name of every shard
// (engine.UpdatePlacements, through server.PlacementsCall) and a record
// of every shard's leader (engine.RecordLeader, server.ShardLeaderPath),
// by which a node that holds no copy of a shard ([cluster] placement
// "subset") finds its queues and its leader. The leader of each shard
// keeps its queues' entries true: soon after it starts serving and then
// once a round, it compares its engine's queues with the entries naming
// its shard in this node's copy of shard 0, and sends the difference to
// shard 0's leader; a create writes its entry before it is answered
// (shards.go, placeCreated). With every shard on every node both are
// kept and read by nothing.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicemq/sluice/internal/server"
)

// DefaultPlacementInterval is how often a shard's leader compares its
// queues with their placements.
const DefaultPlacementInterval = time.Minute

// placeFirstAfter is how long a new leader serves before its first
// comparison: a term's first moments are its clients' retries.
const placeFirstAfter = 2 * time.Second

// keepPlacements runs, while this node serves shard k with srv, the
// comparisons of srv's queues with their placements, until ctx ends.
func (n *Node) keepPlacements(ctx context.Context, k int, srv *server.Server, log *slog.Logger) {
	everyRound(ctx, func() time.Duration { return cmp.Or(n.placeEvery, DefaultPlacementInterval) }, func() {
		changed, err := n.syncPlacements(ctx, k, srv.Engine().ListQueues(""))
		switch {
		case errors.Is(err, server.ErrUnknownEngineCall):
			// Shard 0's leader is of an older build (a rolling upgrade).
			log.Debug("the placements of this shard's queues are not updated: shard 0's leader does not keep them", "err", err)
		case err != nil && ctx.Err() == nil:
			log.Info("the placements of this shard's queues are not updated; next round retries", "err", err)
		case changed > 0:
			log.Debug("placements of this shard's queues updated", "changed", changed)
		}
	})
}

// everyRound runs round placeFirstAfter after a leader starts serving and
// then every interval() after each round ends, until ctx ends: a shard
// leader's rounds with shard 0's leader (keepPlacements,
// keepSourcesAdopted).
func everyRound(ctx context.Context, interval func() time.Duration, round func()) {
	t := time.NewTimer(placeFirstAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		round()
		t.Reset(interval())
	}
}

// syncPlacements sends shard 0's leader what differs between held, the
// queues of shard k, and the entries naming k in this node's copy of
// shard 0, and returns how many entries changed.
func (n *Node) syncPlacements(ctx context.Context, k int, held []string) (int, error) {
	st := n.shards.Shard(0).Store()
	ps, err := server.StoredPlacements(st, k)
	_ = st.Close() // a view: closing it ends nothing beneath
	if err != nil {
		return 0, fmt.Errorf("reading this node's copy of shard 0: %w", err)
	}
	add, gone := placementDiff(held, ps)
	changed := 0
	for _, part := range []struct {
		names []string
		gone  bool
	}{{add, false}, {gone, true}} {
		for names := part.names; len(names) > 0; {
			chunk := names[:min(len(names), server.MaxPlacementNames)]
			names = names[len(chunk):]
			c, err := n.nameCall(ctx, 0, n.hold, server.PlacementsCall(k, chunk, part.gone), nil)
			if err != nil {
				return changed, err
			}
			changed += c
		}
	}
	return changed, nil
}

// placementDiff returns the names of held (a shard's queues) that ps (the
// entries naming that shard) lacks or holds as gone, and the names of the
// entries of ps not gone whose queue held lacks.
func placementDiff(held []string, ps []server.QueuePlacement) (add, gone []string) {
	live := make(map[string]bool, len(ps))
	for _, p := range ps {
		live[p.Name] = p.Gone.IsZero()
	}
	has := make(map[string]bool, len(held))
	for _, name := range held {
		has[name] = true
		if !live[name] {
			add = append(add, name)
		}
	}
	for _, p := range ps {
		if p.Gone.IsZero() && !has[p.Name] {
			gone = append(gone, p.Name)
		}
	}
	return add, gone
}

// recordLeadership records, on shard 0's leader, that this node leads
// shard k in term advertising ad, with the group's membership
// (shardRecord; server.ShardLeaderPath): at once, retrying once a second
// until it is recorded, and again each time the membership changes,
// until ctx ends. A node that holds no copy of shard k finds its leader
// there (recordedTarget); a node the placement controller added to the
// shard, or moved out of it, learns it there (follow.go). A leader of
// shard 0 of an older build (404) records nothing; that is left as it is.
func (n *Node) recordLeadership(ctx context.Context, k int, term uint64, ad Advertisement, log *slog.Logger) {
	r := n.shards.Shard(k)
	if r == nil {
		return
	}
	var last string // the membership last recorded
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
		retry.Reset(time.Second)
		rec := recordOfGroup(ad, r)
		shape := fmt.Sprint(rec.Voters, rec.Learners)
		if shape == last {
			continue
		}
		adb, err := json.Marshal(rec)
		if err != nil {
			log.Error("cannot encode this leader's advertisement", "err", err)
			return
		}
		body, err := server.LeaderRecordCall(k, term, n.opts.Cluster.NodeID, adb)
		if err != nil {
			log.Error("cannot encode this leader's record", "err", err)
			return
		}
		_, err = n.shardRequest(ctx, 0, http.MethodPost, server.ShardLeaderPath, body, 1<<10, n.hold)
		var ae *shardAnswerError
		switch {
		case err == nil:
			last = shape
		case errors.As(err, &ae) && (ae.status == http.StatusNotFound || ae.status == http.StatusBadRequest):
			log.Debug("this shard's leadership is not recorded in shard 0", "err", err)
			return
		case ctx.Err() == nil:
			log.Debug("recording this shard's leadership in shard 0; retrying", "err", err)
		}
	}
}

// recordedLeader is the leader of shard k recorded in this node's copy of
// shard 0 (0: none, or the node is not open yet): the balancer's
// raftstore.ShardPlan.Leader with [cluster] placement "subset".
func (n *Node) recordedLeader(k int) uint64 {
	n.mu.Lock()
	open := n.raft != nil
	n.mu.Unlock()
	if !open {
		return 0
	}
	_, id, ok := n.recordedTarget(k)
	if !ok {
		return 0
	}
	return id
}

// recordedTarget is target for a shard this node holds no copy of: the
// leader recorded for shard k in this node's copy of shard 0, if any.
// The record may be of a leader that has since lost the shard; a request
// sent there is refused, and retried once a newer record arrives.
func (n *Node) recordedTarget(k int) (Advertisement, uint64, bool) {
	l, ok := n.storedLeader(k)
	if !ok {
		return Advertisement{}, 0, false
	}
	ad, ok := decodeAd(&n.recs[k], l.Ad) // as shardRecordOf, without its membership
	if !ok || ad.Term != l.Term {
		return Advertisement{}, 0, false
	}
	return ad, l.Node, true
}
