package cluster

// Queue placements (ADR 0016, docs/adr/0016-shards-on-a-subset.md, step
// 1): with several shards, shard 0's engine keeps an entry per queue name
// of every shard (engine.UpdatePlacements, through server.PlacementsCall), which a node that holds no
// copy of a queue's shard will route by. The leader of each shard keeps
// the entries of its queues true: soon after it starts serving and then
// once a round, it compares its engine's queues with the entries naming
// its shard in this node's copy of shard 0, and sends the difference to
// shard 0's leader. Nothing routes by them yet: every node still holds a
// copy of every shard (shards.go).

import (
	"cmp"
	"context"
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
	t := time.NewTimer(placeFirstAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
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
		t.Reset(cmp.Or(n.placeEvery, DefaultPlacementInterval))
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
			out, err := n.shardRequest(ctx, 0, http.MethodPost, server.ShardEnginePath,
				server.PlacementsCall(k, chunk, part.gone), maxShardCallReply, n.hold)
			if err != nil {
				return changed, err
			}
			c, err := server.NameCallReply(out)
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
