package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	return n.shardRequest(ctx, k, http.MethodGet, path, nil, maxShardView, shardViewTimeout)
}

// shardRequest sends a request to path on the node-only internal
// listener of shard k's leader (waiting at most the hold timeout for one
// to serve) and returns its 200 answer's body, at most limit bytes. A
// timeout above 0 bounds the request once the leader is found.
//
// A request to a leader that another node replaces before it answers (a
// leader frozen or cut off, which keeps the connection open and never
// answers) ends then with an error, as a forwarded client request does
// (trackForward), instead of at its timeout: a remote queue's publish is
// nacked, and its consumer's receive tried again on the new leader,
// within the failover rather than after the call's 30 s.
func (n *Node) shardRequest(ctx context.Context, k int, method, path string, body []byte, limit int, timeout time.Duration) ([]byte, error) {
	n.mu.Lock()
	changed := n.changed // for trackForward
	hold := n.hold
	if n.done {
		// Stopping: the calls left (shard 0's AMQP server returning its
		// consumers' deliveries on its way out) do not wait for a leader
		// of a shard this node may itself be leaving; the leader there
		// returns a silent caller's leases (sessionExpiry).
		hold = 0
	}
	n.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, hold)
	ad, leader, err := n.route(rctx, k)
	cancel()
	if err != nil || ad.SQS == "" {
		return nil, fmt.Errorf("no leader of shard %d is serving", k)
	}
	ctx, done := n.trackForward(ctx, k, leader, changed)
	defer done()
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if body, err = bodyFor(ad, path, body); err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+ad.SQS+path, rd)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: n.transport}).Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errLeaderChanged) {
			err = errLeaderChanged
		}
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	}
	if f, ok := ctx.Value(forwardKey{}).(*forward); ok {
		// The answer is produced (a receive's messages are leased to
		// this caller): a leader change no longer cuts its copy.
		f.answered.Store(true)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	// Up to limit+1 bytes: more is refused below.
	reply, err := server.ReadPeerBody(resp.Body, resp.ContentLength, limit)
	switch {
	case err != nil:
		return nil, fmt.Errorf("shard %d's leader: %w", k, err)
	case resp.StatusCode != http.StatusOK:
		return nil, &shardAnswerError{k: k, status: resp.StatusCode, body: reply,
			msg: fmt.Sprintf("shard %d's leader answered %s: %s", k, resp.Status, bytes.TrimSpace(reply[:min(len(reply), 200)]))}
	case len(reply) > limit:
		return nil, fmt.Errorf("shard %d's answer is over %d bytes", k, limit)
	}
	return reply, nil
}

// bodyFor returns body as the leader advertising ad reads it at path: an
// engine call in gob to a leader of a build before the engine calls'
// binary wire (during a rolling upgrade), which reads gob alone.
func bodyFor(ad Advertisement, path string, body []byte) ([]byte, error) {
	if path == server.ShardEnginePath && !ad.EngineWire {
		return server.EngineCallAsGob(body)
	}
	return body, nil
}

// shardAnswerError is a shard leader's answer other than 200.
type shardAnswerError struct {
	k, status int
	body      []byte // the answer, at most the request's limit
	msg       string
}

func (e *shardAnswerError) Error() string { return e.msg }

// declareElsewhere is shard own's server.Options.DeclareElsewhere: it
// places qs as the config's queues are placed (placeDeclared), posts to
// each other shard's leader the queues placed there, in shard order, and
// returns those placed on own. Queues placed nowhere are left out (with
// placeDeclared's warning).
func (n *Node) declareElsewhere(ctx context.Context, own int, qs []server.QueueDeclaration) ([]server.QueueDeclaration, error) {
	at := n.placeDeclared(qs)
	parts := make([][]server.QueueDeclaration, n.shards.Len())
	for i, q := range qs {
		if at[i] >= 0 {
			parts[at[i]] = append(parts[at[i]], q)
		}
	}
	for k, part := range parts {
		if k == own || len(part) == 0 {
			continue
		}
		body, err := json.Marshal(server.Definitions{Queues: part})
		if err != nil {
			return nil, err
		}
		if _, err := n.shardRequest(ctx, k, http.MethodPost, server.ShardDefinitionsPath, body, 1<<20, 30*time.Second); err != nil {
			var ae *shardAnswerError
			if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
				var eb struct { // the admin API's error body (api.ErrorBody)
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if json.Unmarshal(ae.body, &eb) != nil || eb.Error.Message == "" {
					eb.Error.Message = err.Error()
				}
				return nil, fmt.Errorf("%w by shard %d: %s", server.ErrDefinitionsRefused, k, eb.Error.Message)
			}
			return nil, fmt.Errorf("shard %d: %w", k, err)
		}
	}
	return parts[own], nil
}
