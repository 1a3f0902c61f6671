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

// shardCreate places a new queue that shard own's AMQP server is asked to
// declare (server.Options.ShardCreate) as an SQS CreateQueue is placed
// (placeCreate: with the queue it is tied to, else on the shard its name
// hashes to, once that shard reserved the name for it). On shard own it
// returns server.ErrNotElsewhere: the server creates it itself. Elsewhere
// it posts body (the create) to that shard's leader and, once the leader
// created it, settles it here as a forwarded CreateQueue is
// (settleCreated), so that the server's next call for it finds it.
func (n *Node) shardCreate(ctx context.Context, own int, name string, body []byte) error {
	if !server.ValidQueueName(name) {
		return server.ErrNotElsewhere // AMQP-only names live on shard 0
	}
	k, err := n.placeCreate(ctx, server.SQSRoute{Queue: name, Create: true})
	if err != nil {
		return err
	}
	if k == own {
		return server.ErrNotElsewhere
	}
	out, err := n.shardRequest(ctx, k, http.MethodPost, server.ShardEnginePath, body, maxShardCallReply, 0)
	if err != nil {
		return err
	}
	if _, err := server.NameCallReply(out); err != nil {
		return err
	}
	n.settleCreated(ctx, created{shard: k, queue: name})
	n.noteRoute(name, k)
	return nil
}
