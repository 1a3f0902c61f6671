package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/sluicemq/sluice/internal/server"
)

// maxShardView bounds one shard's listing read by otherShards (a queue
// list or a dashboard overview with its sparkline series).
const maxShardView = 64 << 20

// otherShards reads path (server.ShardQueuesPath or ShardOverviewPath)
// from the leader of every shard but own, in parallel, over the node-only
// internal listeners: what shard 0's server adds to the admin API's queue
// list and the dashboard's overview (server.Options.OtherShards). A shard
// without a serving leader within the hold timeout, or whose leader does
// not answer 200, is reported with its error.
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
