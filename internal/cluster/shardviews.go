package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/server"
)

// Bounds on one shard's listing read by otherShards (a queue list, or a
// dashboard overview with its sparkline series): its size, and the time
// its leader has to send it once found.
const (
	maxShardView     = 64 << 20
	shardViewTimeout = 10 * time.Second
)

// otherShards reads path (one of the server.Shard*Path) from the leader
// of every shard but own, in parallel, over the node-only internal
// listeners: what shard 0's server adds to the operator's listings
// (server.Options.OtherShards). A shard without a serving leader within
// the hold timeout, whose leader does not answer 200 within
// shardViewTimeout, is reported with its error.
func (n *Node) otherShards(ctx context.Context, own int, path string) []server.ShardAnswer {
	out := make([]server.ShardAnswer, 0, n.shards.Len()-1)
	for k := range n.shards.Len() {
		if k != own {
			out = append(out, server.ShardAnswer{Shard: k})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			out[i].Body, out[i].Err = n.readShardView(ctx, out[i].Shard, path)
		})
	}
	wg.Wait()
	return out
}

// readShardView reads path from the leader of shard k.
func (n *Node) readShardView(ctx context.Context, k int, path string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, n.hold)
	ad, _, err := n.route(rctx, k)
	cancel()
	if err != nil || ad.SQS == "" {
		return nil, fmt.Errorf("no leader of shard %d is serving", k)
	}
	ctx, cancel = context.WithTimeout(ctx, shardViewTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ad.SQS+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: n.transport}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxShardView+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("shard %d's leader answered %s", k, resp.Status)
	case len(body) > maxShardView:
		return nil, fmt.Errorf("shard %d's listing is over %d bytes", k, maxShardView)
	}
	return body, nil
}
