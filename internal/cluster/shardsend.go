package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicemq/sluice/internal/server"
)

// maxShardSendReply bounds the answer to one ShardSendPath request: a
// result per message, each a message id and an error's text.
const maxShardSendReply = 16 << 20

// shardSend posts body, a server.ShardSendPath request for queue name, to
// the leader of the shard other than own whose copy on this node holds
// that queue (once caught up, when none did at first), and returns the
// leader's answer (server.Options.ShardSend: the AMQP server of shard own
// publishes to the other shards' SQS queues through it). It returns
// server.ErrNotElsewhere when no other shard holds the queue.
func (n *Node) shardSend(ctx context.Context, own int, name string, body []byte) ([]byte, error) {
	if !server.ValidQueueName(name) {
		return nil, server.ErrNotElsewhere // AMQP-only names are no SQS queue's
	}
	k, ok := n.findQueue(name)
	if !ok {
		n.catchUp(ctx)
		k, ok = n.findQueue(name)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ad.SQS+server.ShardSendPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: n.transport}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxShardSendReply+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("shard %d's leader answered %s: %s", k, resp.Status, bytes.TrimSpace(reply[:min(len(reply), 200)]))
	case len(reply) > maxShardSendReply:
		return nil, fmt.Errorf("shard %d's answer is over %d bytes", k, maxShardSendReply)
	}
	return reply, nil
}
