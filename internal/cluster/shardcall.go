package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicemq/sluice/internal/server"
)

// maxShardCallReply bounds the answer to one call: a receive's
// deliveries, or a result per message sent.
const maxShardCallReply = 64 << 20

// shardCall posts body to path (a server.Shard*Path) on the leader of the
// shard other than own whose copy on this node holds queue name (once
// caught up, when none did at first), and returns the leader's answer
// (server.Options.ShardCall: the AMQP server of shard own uses the other
// shards' SQS queues through it). It returns server.ErrNotElsewhere when
// no other shard holds the queue.
func (n *Node) shardCall(ctx context.Context, own int, name, path string, body []byte) ([]byte, error) {
	if !server.ValidQueueName(name) {
		return nil, server.ErrNotElsewhere // AMQP-only names are no SQS queue's
	}
	k, ok, err := n.locateQueue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("cannot tell which shard holds queue %q: %w", name, err)
	}
	if !ok || k == own {
		return nil, server.ErrNotElsewhere
	}
	rctx, cancel := context.WithTimeout(ctx, n.hold)
	ad, _, err := n.route(rctx, k)
	cancel()
	if err != nil || ad.SQS == "" {
		return nil, fmt.Errorf("no leader of shard %d is serving", k)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ad.SQS+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: n.transport}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxShardCallReply+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("shard %d's leader answered %s: %s", k, resp.Status, bytes.TrimSpace(reply[:min(len(reply), 200)]))
	case len(reply) > maxShardCallReply:
		return nil, fmt.Errorf("shard %d's answer is over %d bytes", k, maxShardCallReply)
	}
	return reply, nil
}
