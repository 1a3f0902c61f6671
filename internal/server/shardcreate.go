package server

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/engine"
)

// AMQP queues placed on other shards (ADR 0015 step 4, ADR 0016 decision
// 6). Shard 0's AMQP server declares a new durable queue of vhost "/"
// without arguments where the cluster's placement puts a queue of that
// name (Options.ShardCreate): with the queue it is tied to, else on the
// shard its name hashes to. One placed on another shard is created there
// by an engine call (opCreate, below) with the configuration the AMQP
// server would have given it here, and is from then on a queue that
// lives elsewhere, used as the AMQP server uses another shard's SQS
// queue (remote.go).

var _ amqp.Placer = (*remoteEngine)(nil)

// createCall is the body of the engine call that creates queue name with
// cfg on the called leader's shard. The configuration travels gob-encoded
// as the call's only handle: the wire has no field for it, and one added
// would break older nodes' decoding of every call (an older leader
// answers the call unknown: ErrUnknownEngineCall).
func createCall(name string, cfg engine.QueueConfig) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&cfg); err != nil {
		return nil, fmt.Errorf("encoding queue %q's configuration: %w", name, err)
	}
	return encodeEngineCall(&engineCall{Op: opCreate, Queue: name, Handles: []string{b.String()}}), nil
}

// createCalled runs an opCreate call on this server's engine and reports
// whether it created the queue (false: it existed with that
// configuration).
func (s *Server) createCalled(c engineCall) (bool, error) {
	if len(c.Handles) != 1 {
		return false, fmt.Errorf("%s carries %d configurations, want 1", c.Op, len(c.Handles))
	}
	var cfg engine.QueueConfig
	if err := gob.NewDecoder(bytes.NewReader([]byte(c.Handles[0]))).Decode(&cfg); err != nil {
		return false, fmt.Errorf("%s: malformed configuration: %w", c.Op, err)
	}
	if !engine.ValidQueueName(c.Queue) {
		return false, fmt.Errorf("%s: %q is not a queue name this shard places", c.Op, c.Queue)
	}
	_, created, err := s.eng.CreateQueue(c.Queue, cfg, nil)
	return created, err
}

// CreateElsewhere creates queue name with cfg on the shard the cluster's
// placement puts it on, when that is not this server's (amqp.Placer), and
// reports whether it did. The queue is then one found elsewhere.
func (r *remoteEngine) CreateElsewhere(name string, cfg engine.QueueConfig) (bool, error) {
	if r.create == nil || !engine.ValidQueueName(name) {
		return false, nil
	}
	body, err := createCall(name, cfg)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	switch err := retryMoved(ctx, func() error { return r.create(ctx, name, body) }); {
	case errors.Is(err, ErrNotElsewhere):
		return false, nil // placed on this server's shard
	case errors.Is(err, ErrUnknownEngineCall):
		// The shard's leader is of an older build (a rolling upgrade):
		// the queue is made here, as that build does.
		r.log.Warn("cannot create an AMQP queue on the shard it was placed on (its leader is of an older build); creating it on shard 0", "queue", name, "err", err)
		return false, nil
	case err != nil:
		return false, err
	}
	r.found(name)
	return true, nil
}
