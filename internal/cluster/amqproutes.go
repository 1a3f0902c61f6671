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
	"encoding/json"
	"errors"
	"fmt"
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
	t := time.NewTimer(placeFirstAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		names := srv.Engine().RoutedElsewhereQueues()
		for len(names) > 0 && ctx.Err() == nil {
			chunk := names[:min(len(names), server.MaxPlacementNames)]
			names = names[len(chunk):]
			if _, err := n.nameCall(ctx, 0, n.hold, server.AdoptSourcesCall(chunk), nil); err != nil {
				// An older build (ErrUnknownEngineCall), a shard 0 still
				// restoring its bindings or electing: the next round.
				log.Debug("queues with a dead-letter exchange not made known to shard 0; next round retries", "err", err)
				break
			}
		}
		t.Reset(adoptSourcesEvery)
	}
}

// amqpRoutes returns the queues shard 0's AMQP topology routes dead letters
// to, each with its sources (server.ShardAMQPRoutesPath), from shard 0's
// leader. An answer is used again for dlSourcesFresh, unless fresh; one
// that cannot be had is the last answer had, with the error logged, or
// none (a leader of an older build, 404: none, no error).
func (n *Node) amqpRoutes(fresh bool, log *slog.Logger) map[string][]string {
	n.mu.Lock()
	a, ok := n.routesAnswer, n.routesAnswerOK
	n.mu.Unlock()
	if ok && !fresh && time.Since(a.at) < dlSourcesFresh {
		return a.m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := n.readAMQPRoutes(ctx)
	var sa *shardAnswerError
	switch {
	case errors.As(err, &sa) && sa.status == http.StatusNotFound:
		m, err = nil, nil
	case err != nil:
		log.Debug("the AMQP dead-letter routes of shard 0 cannot be read; the last ones read are used", "err", err)
		return a.m
	}
	n.mu.Lock()
	n.routesAnswer, n.routesAnswerOK = dlSourcesAnswer{at: time.Now(), m: m}, true
	n.mu.Unlock()
	return m
}

// readAMQPRoutes asks shard 0's leader for its AMQP dead-letter routes.
func (n *Node) readAMQPRoutes(ctx context.Context) (map[string][]string, error) {
	b, err := n.shardRequest(ctx, 0, http.MethodGet, server.ShardAMQPRoutesPath, nil, 4<<20, 0)
	if err != nil {
		return nil, err
	}
	var m map[string][]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("shard 0's AMQP dead-letter routes: %w", err)
	}
	return m, nil
}
