package cluster

// AMQP dead-letter routes across shards. The dead letters of an AMQP queue
// with a dead-letter exchange are routed by shard 0's AMQP topology, which
// alone knows the exchange and its bindings, into queues that may live on
// any shard. Those queues are the source's dead-letter queues (DLQ alerts,
// metrics, advice, redrive, ListDeadLetterSourceQueues), which their own
// shard's engine learns from shard 0's leader
// (server.ShardAMQPRoutesPath, through engine.Options.SourcesElsewhere);
// and the sources placed on other shards are made known to shard 0's
// topology by their own shard's leader (keepSourcesAdopted), not only at
// their first dead letter.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicemq/sluice/internal/server"
)

// adoptSourcesEvery is how often a shard's leader tells shard 0's leader
// of its queues whose dead letters shard 0 routes (a new leader of shard 0
// knows none of them until told, or until their next dead letter).
const adoptSourcesEvery = 10 * time.Second

// keepSourcesAdopted tells shard 0's leader, soon after this node starts
// serving shard k (k above 0) with srv and then every adoptSourcesEvery
// until ctx ends, which of srv's queues have a dead-letter exchange
// (engine.RoutedElsewhereQueues): shard 0's AMQP server adopts them
// (server.AdoptSourcesCall).
func (n *Node) keepSourcesAdopted(ctx context.Context, k int, srv *server.Server, log *slog.Logger) {
	if k == 0 {
		return
	}
	everyRound(ctx, func() time.Duration { return adoptSourcesEvery }, func() {
		names := srv.Engine().RoutedElsewhereQueues()
		for len(names) > 0 && ctx.Err() == nil {
			chunk := names[:min(len(names), server.MaxPlacementNames)]
			names = names[len(chunk):]
			if _, err := n.nameCall(ctx, 0, n.hold, server.AdoptSourcesCall(chunk), nil); err != nil {
				// An older build (ErrUnknownEngineCall), a shard 0 still
				// restoring its bindings or electing: the next round.
				log.Debug("queues with a dead-letter exchange not made known to shard 0; next round retries", "err", err)
				return
			}
		}
	})
}

// amqpRoutes returns the queues shard 0's AMQP topology routes dead letters
// to, each with its sources (server.ShardAMQPRoutesPath), from shard 0's
// leader (shardMap: used again for dlSourcesFresh, unless fresh). One that
// cannot be had is the last answer had, with the error logged, or none (a
// leader of an older build, 404: none, no error).
func (n *Node) amqpRoutes(fresh bool) map[string][]string {
	m, err := n.shardMap(0, server.ShardAMQPRoutesPath, fresh)
	var sa *shardAnswerError
	switch {
	case errors.As(err, &sa) && sa.status == http.StatusNotFound:
		return nil
	case err != nil:
		n.log.Debug("the AMQP dead-letter routes of shard 0 cannot be read; the last ones read are used", "err", err)
	}
	return m
}
