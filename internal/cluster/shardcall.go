package cluster

import (
	"context"
	"fmt"
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
	k, ok := n.cachedRoute(name)
	if !ok {
		var err error
		if k, ok, err = n.locateQueue(ctx, name); err != nil {
			return nil, fmt.Errorf("cannot tell which shard holds queue %q: %w", name, err)
		}
		if ok {
			n.noteRoute(name, k)
		}
	}
	if !ok || k == own {
		return nil, server.ErrNotElsewhere
	}
	return n.shardRequest(ctx, k, http.MethodPost, path, body, maxShardCallReply, 0)
}
