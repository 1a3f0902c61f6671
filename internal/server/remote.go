package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/engine"
)

// remoteEngine is the amqp.Engine of shard 0's server in a cluster with
// shards: its own *engine.Engine for the queues it holds, and, for a queue
// another shard holds, engine calls to that shard's leader
// (shardengine.go). A queue is known to live elsewhere once Config or
// GetQueue found it there (the AMQP server asks one of them before it uses
// a queue it has not declared); a call answered "no such queue" forgets it,
// and any call that this server's engine answers "no such queue" for a
// name placed on another shard finds it again (refound).
// "No such queue" is an answer only when it is certain (ShardCall's
// ErrNotElsewhere, or the leader's engine): a shard that cannot be asked,
// or a copy that cannot be read, is an error of its own, so that a publish
// is nacked rather than dropped as unroutable.
//
// It embeds *engine.Engine, so every method the AMQP server may call on
// its engine (amqp.Engine, and the optional ones it asserts: DeleteLeased,
// DeleteLeasedUnsynced) that names a queue is overridden here; the others
// are the local engine's (Sync among them: a queue elsewhere is never
// acked without a sync).
//
// What does not cross: UpdateQueue (a function), metadata, and Browse,
// which stay local (the AMQP server declares a queue of another shard
// only without arguments, amqp.Elsewhere); creates cross only as
// CreateElsewhere (shardcreate.go); a
// receive's OnTake runs after the call, not under that queue's lock; and
// VisibleHint answers, for such a queue, the ready count its leader
// reported with the last answer of any call for it (publisher flow
// control sees its backlog as of this server's last send, receive or
// settlement there, at most a consumer's poll old while one consumes).
type remoteEngine struct {
	*engine.Engine
	call func(ctx context.Context, name, path string, body []byte) ([]byte, error)
	// create is Options.ShardCreate (nil: new queues are made here).
	create func(ctx context.Context, name string, body []byte) error
	holds  func(name string) bool
	log    *slog.Logger
	base   string // this server's sessions' prefix

	// ctx is every call's: ended (end) a moment after the server
	// starts shutting down, so that its AMQP connections' teardown — the
	// requeues of their deliveries elsewhere, a publish waiting for a
	// leader — cannot hold the shutdown for a call's 30 s each, and with
	// it this node's next term as shard 0's leader. What such a call
	// would have returned comes back anyway: a caller session not heard
	// from expires at its leader (sessionExpiry), its leases with it.
	ctx context.Context
	end context.CancelFunc

	// mu guards queues; every engine call the AMQP server makes looks
	// here first (a read), so it is a read-write lock.
	mu     sync.RWMutex
	queues map[string]*remoteQueue // by name: queues found elsewhere
}

// remoteQueue is a queue found on another shard: the generation of this
// server's session with it (a receive whose answer was lost starts a new
// one, so that the leases it may have granted end with the old one).
type remoteQueue struct {
	gen int
	// hint is the ready count the queue's leader last reported; -1:
	// none yet.
	hint atomic.Int64
}

var (
	_ amqp.Engine    = (*remoteEngine)(nil)
	_ amqp.Elsewhere = (*remoteEngine)(nil)
)

// newRemoteEngine returns the amqp.Engine of opts for eng: eng itself
// without ShardCall, else a remoteEngine.
func newRemoteEngine(eng *engine.Engine, opts Options, log *slog.Logger) (amqp.Engine, *remoteEngine) {
	if opts.NameTaken == nil || opts.ShardCall == nil {
		return eng, nil
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand does not fail
	r := &remoteEngine{Engine: eng, call: opts.ShardCall, create: opts.ShardCreate, holds: opts.NameTaken, log: log,
		base: hex.EncodeToString(b), queues: make(map[string]*remoteQueue)}
	r.ctx, r.end = context.WithCancel(context.Background())
	return r, r
}

// remoteGrace is how long a shutting-down server's calls elsewhere may
// still run (closing).
const remoteGrace = 2 * time.Second

// closing ends every call elsewhere, in flight or to come, after grace;
// it returns the function that ends them at once.
func (r *remoteEngine) closing(grace time.Duration) context.CancelFunc {
	t := time.AfterFunc(grace, r.end)
	return func() { t.Stop(); r.end() }
}

// Holds reports whether queue name lives on another shard (amqp.Elsewhere).
func (r *remoteEngine) Holds(name string) bool { return r.holds(name) }

// remote reports whether name is a queue found elsewhere, and its session.
func (r *remoteEngine) remote(name string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	q := r.queues[name]
	if q == nil {
		return "", false
	}
	return r.base + "/" + strconv.Itoa(q.gen) + "/" + name, true
}

func (r *remoteEngine) found(name string) {
	r.mu.Lock()
	if r.queues[name] == nil {
		q := &remoteQueue{}
		q.hint.Store(-1)
		r.queues[name] = q
	}
	r.mu.Unlock()
}

// newSession ends this server's session with queue name (its leases come
// back when that shard's leader expires it) and starts another.
func (r *remoteEngine) newSession(name string) {
	r.mu.Lock()
	if q := r.queues[name]; q != nil {
		q.gen++
	}
	r.mu.Unlock()
}

// do runs c on the leader of the shard holding c.Queue. A queue that is
// not there (any longer) is forgotten.
func (r *remoteEngine) do(ctx context.Context, c engineCall) (engineReply, error) {
	out, err := r.call(ctx, c.Queue, ShardEnginePath, encodeEngineCall(&c))
	if errors.Is(err, ErrNotElsewhere) {
		err = engine.ErrQueueNotFound
	}
	var rep engineReply
	if err == nil {
		rep, err = decodeEngineReply(out)
	}
	switch {
	case errors.Is(err, engine.ErrQueueNotFound):
		r.mu.Lock()
		delete(r.queues, c.Queue)
		r.mu.Unlock()
	case err == nil:
		r.noteHint(c.Queue, rep)
	}
	return rep, err
}

// Backoff between the tries of a call that a leadership change failed
// (retryMoved).
const (
	movedBackoff    = 20 * time.Millisecond
	movedBackoffMax = 500 * time.Millisecond
)

// leaderMoved reports whether err is the failure of a call that a
// leadership change explains and that certainly did nothing: no
// connection to the shard's leader could be made (ErrShardUnreachable), or
// its engine no longer led and wrote nothing (engine.ErrNotLeading with
// engine.ErrNotWritten: refused, or its proposal dropped). A call that
// may have taken effect — cut on its way, or whose write was in the log
// when the leadership ended — is not: sent again, a message would be
// stored twice (the fault harness saw such a second copy delivered after
// the first was deleted, a resurrection), so its publish is nacked, and
// the publisher decides.
func leaderMoved(err error) bool {
	return errors.Is(err, ErrShardUnreachable) || errors.Is(err, engine.ErrNotLeading) && errors.Is(err, engine.ErrNotWritten)
}

// retryMoved runs f until it returns anything but a leadership change's
// failure (leaderMoved) or ctx ends, backing off between tries; it returns
// f's last error. So a confirm waits for the new leader, as RabbitMQ's
// does for a quorum queue's, where it was a nack.
func retryMoved(ctx context.Context, f func() error) error {
	wait := movedBackoff
	for {
		err := f()
		if err == nil || !leaderMoved(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, movedBackoffMax)
	}
}

// noteHint keeps the ready count rep reports for queue name, when it is a
// queue found elsewhere.
func (r *remoteEngine) noteHint(name string, rep engineReply) {
	r.mu.RLock()
	if q := r.queues[name]; q != nil {
		if rep.VisibleOK {
			q.hint.Store(int64(rep.Visible))
		} else {
			q.hint.Store(-1)
		}
	}
	r.mu.RUnlock()
}

// callTimeout bounds every call but a receive's (whose wait it adds to).
const callTimeout = 30 * time.Second

// settleAt settles handles of queue name: with local on this server's
// engine when name is not a queue known elsewhere and local finds it
// (refound), else as op on its shard's leader (settle, with f's fields).
func (r *remoteEngine) settleAt(name string, handles []string, local func() ([]error, error), op string, f func(*engineCall)) ([]error, error) {
	if _, ok := r.remote(name); !ok {
		errs, err := local()
		if !r.refound(name, err) {
			return errs, err
		}
	}
	return r.settle(op, name, handles, f)
}

func (r *remoteEngine) settle(op, queue string, handles []string, f func(*engineCall)) ([]error, error) {
	session, _ := r.remote(queue)
	c := engineCall{Op: op, Queue: queue, Session: session, Handles: handles}
	if f != nil {
		f(&c)
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	rep, err := r.do(ctx, c) // rep.Err, the call's own error, is err
	if err != nil {
		return nil, err
	}
	if len(rep.Errs) != len(handles) {
		return nil, fmt.Errorf("another shard's leader: %d answers for %d handles", len(rep.Errs), len(handles))
	}
	errs := make([]error, len(rep.Errs))
	for i, e := range rep.Errs {
		errs[i] = e.err()
	}
	return errs, nil
}

// Config is the queue's configuration, from its shard's leader when it
// lives elsewhere.
func (r *remoteEngine) Config(name string) (*engine.QueueConfig, error) {
	if _, ok := r.remote(name); !ok {
		cfg, err := r.Engine.Config(name)
		if !errors.Is(err, engine.ErrQueueNotFound) {
			return cfg, err
		}
	}
	info, err := r.getRemote(name)
	if err != nil {
		return nil, err
	}
	return &info.Config, nil
}

// GetQueue is Engine.GetQueue, from the queue's shard's leader when it
// lives elsewhere.
func (r *remoteEngine) GetQueue(name string) (engine.QueueInfo, error) {
	if _, ok := r.remote(name); !ok {
		info, err := r.Engine.GetQueue(name)
		if !errors.Is(err, engine.ErrQueueNotFound) {
			return info, err
		}
	}
	return r.getRemote(name)
}

func (r *remoteEngine) getRemote(name string) (engine.QueueInfo, error) {
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	var rep engineReply
	err := retryMoved(ctx, func() (err error) {
		rep, err = r.do(ctx, engineCall{Op: opGetQueue, Queue: name})
		return err
	})
	if err != nil {
		return engine.QueueInfo{}, err
	}
	r.found(name)
	r.noteHint(name, rep)
	return rep.Info, nil
}

// Send is Engine.Send; for a queue elsewhere, in calls of at most
// ShardSendChunk bytes of messages, one after the other: a call that fails
// fails its messages and those not yet sent.
func (r *remoteEngine) Send(name string, msgs []engine.Message) ([]engine.SendResult, error) {
	if _, ok := r.remote(name); !ok {
		res, err := r.Engine.Send(name, msgs)
		if !r.refound(name, err) {
			return res, err
		}
	}
	out := make([]engine.SendResult, 0, len(msgs))
	for len(msgs) > 0 {
		end, size := 0, 0
		for end < len(msgs) && (end == 0 || size+msgs[end].Size()+len(msgs[end].Envelope) <= ShardSendChunk) {
			size += msgs[end].Size() + len(msgs[end].Envelope)
			end++
		}
		res, err := r.sendChunk(name, msgs[:end])
		switch {
		case err != nil && len(out) == 0:
			return nil, err
		case err != nil:
			for range msgs {
				out = append(out, engine.SendResult{Err: err})
			}
			return out, nil
		}
		out = append(out, res...)
		msgs = msgs[end:]
	}
	return out, nil
}

func (r *remoteEngine) sendChunk(name string, msgs []engine.Message) ([]engine.SendResult, error) {
	if len(msgs) == 1 && msgs[0].Size() > engine.MaxMaxMessageSize {
		// Every queue another shard holds is an SQS queue, whose limit
		// is at most this: its engine would refuse the message.
		return []engine.SendResult{{Err: &engine.MessageTooLargeError{Size: msgs[0].Size(), Limit: engine.MaxMaxMessageSize}}}, nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	var rep engineReply
	err := retryMoved(ctx, func() (err error) {
		rep, err = r.do(ctx, engineCall{Op: opSend, Queue: name, Msgs: msgs})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(rep.Results) != len(msgs) {
		return nil, fmt.Errorf("another shard's leader: %d results for %d messages", len(rep.Results), len(msgs))
	}
	out := make([]engine.SendResult, len(msgs))
	for i, x := range rep.Results {
		out[i] = engine.SendResult{MessageID: x.MessageID, SequenceNumber: x.SequenceNumber, Err: x.Err.err()}
	}
	return out, nil
}

// SendMany is Engine.SendMany: the queues held here in one batch, each
// queue elsewhere in its own calls (no atomicity across shards).
func (r *remoteEngine) SendMany(sends []engine.QueueSend) ([]engine.QueueSendResult, error) {
	var local []engine.QueueSend
	var at []int
	out := make([]engine.QueueSendResult, len(sends))
	for i, s := range sends {
		if _, ok := r.remote(s.Queue); ok {
			res, err := r.Send(s.Queue, s.Msgs)
			out[i] = engine.QueueSendResult{Results: res, Err: err}
			continue
		}
		local = append(local, s)
		at = append(at, i)
	}
	if len(local) == 0 {
		return out, nil
	}
	res, err := r.Engine.SendMany(local)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = res[j]
		if r.refound(sends[i].Queue, res[j].Err) {
			res, err := r.Send(sends[i].Queue, sends[i].Msgs)
			out[i] = engine.QueueSendResult{Results: res, Err: err}
		}
	}
	return out, nil
}

// refound reports, for a call on queue name that this engine answered
// with err, whether name is a queue of another shard after all, and then
// notes it as one; every call that names a queue not known elsewhere
// asks it after its local miss. A queue this router used on another shard
// and forgot when its leader answered "no such queue" (deleted there) may
// have been made again on some shard since; the AMQP topology still names
// it (a binding, an adopted queue, a consumer's queue), so without this
// its publishes would be dropped as unroutable, and its receives, settles
// and purges answered "no such queue", until shard 0's next leadership.
func (r *remoteEngine) refound(name string, err error) bool {
	if !errors.Is(err, engine.ErrQueueNotFound) || !r.holds(name) {
		return false
	}
	r.found(name)
	return true
}

// remoteWait bounds the wait of one receive call elsewhere: a consumer
// that is cancelled waits at most this for its call to return.
const remoteWait = time.Second

// Receive is Engine.Receive; for a queue elsewhere, one call whose wait is
// at most remoteWait (a consumer loops). Deliveries that arrive after ctx
// ended go back to the front of the queue. A call whose answer is lost
// starts a new session with the queue, so that the leases it may have
// granted end with the old one.
func (r *remoteEngine) Receive(ctx context.Context, name string, req engine.ReceiveRequest) ([]engine.Delivery, error) {
	session, ok := r.remote(name)
	if !ok {
		ds, err := r.Engine.Receive(ctx, name, req)
		if !r.refound(name, err) {
			return ds, err
		}
		session, _ = r.remote(name)
	}
	wait := req.Wait
	if !req.WaitSet {
		wait = remoteWait
	}
	wait = min(wait, remoteWait)
	c := engineCall{Op: opReceive, Queue: name, Session: session, Max: req.Max, Visibility: req.Visibility,
		VisibilitySet: req.VisibilitySet, Wait: wait, WaitSet: true, SessionLease: req.Session}
	// Not ctx: the answer must be read whatever the caller does meanwhile.
	cctx, cancel := context.WithTimeout(r.ctx, callTimeout+wait)
	defer cancel()
	rep, err := r.do(cctx, c)
	if err != nil {
		if !errors.Is(err, engine.ErrQueueNotFound) && req.Session {
			r.newSession(name)
		}
		return nil, err
	}
	ds := rep.Deliveries
	if ctx.Err() != nil && len(ds) > 0 {
		hs := make([]string, len(ds))
		for i := range ds {
			hs[i] = ds[i].ReceiptHandle
		}
		if _, err := r.Requeue(name, hs, true); err != nil {
			r.log.Warn("amqp: cannot return deliveries of a cancelled receive", "queue", name, "err", err)
		}
		return nil, ctx.Err()
	}
	if req.OnTake != nil && len(ds) > 0 {
		req.OnTake(len(ds))
	}
	if len(ds) == 0 && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return ds, nil
}

// Delete is Engine.Delete, elsewhere for a queue elsewhere.
func (r *remoteEngine) Delete(name string, handles []string) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.Delete(name, handles) }, opDelete, nil)
}

// DeleteLeased is Engine.DeleteLeased (the AMQP server's acks), elsewhere
// for a queue elsewhere.
func (r *remoteEngine) DeleteLeased(name string, handles []string) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.DeleteLeased(name, handles) }, opDeleteLeased, nil)
}

// DeleteLeasedUnsynced is Engine.DeleteLeasedUnsynced for a queue of this
// server's own, and DeleteLeased (durable when it returns) for a queue
// elsewhere: Sync, the local engine's, covers only local writes.
func (r *remoteEngine) DeleteLeasedUnsynced(name string, handles []string) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.DeleteLeasedUnsynced(name, handles) }, opDeleteLeased, nil)
}

// Requeue is Engine.Requeue, elsewhere for a queue elsewhere.
func (r *remoteEngine) Requeue(name string, handles []string, front bool) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.Requeue(name, handles, front) }, opRequeue, func(c *engineCall) { c.Front = front })
}

// Nack is Engine.Nack, elsewhere for a queue elsewhere.
func (r *remoteEngine) Nack(name string, handles []string) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.Nack(name, handles) }, opNack, nil)
}

// Abandon is Engine.Abandon, elsewhere for a queue elsewhere.
func (r *remoteEngine) Abandon(name string, handles []string) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.Abandon(name, handles) }, opAbandon, nil)
}

// Reject is Engine.Reject, elsewhere for a queue elsewhere.
func (r *remoteEngine) Reject(name string, handles []string, f engine.Failure) ([]error, error) {
	return r.settleAt(name, handles, func() ([]error, error) { return r.Engine.Reject(name, handles, f) }, opReject, func(c *engineCall) { c.Failure = f })
}

// LeaseEnd is Engine.LeaseEnd, elsewhere for a queue elsewhere.
func (r *remoteEngine) LeaseEnd(name, handle string) (time.Time, error) {
	if _, ok := r.remote(name); !ok {
		t, err := r.Engine.LeaseEnd(name, handle)
		if !r.refound(name, err) {
			return t, err
		}
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	rep, err := r.do(ctx, engineCall{Op: opLeaseEnd, Queue: name, Handles: []string{handle}})
	return rep.Time, err
}

// PurgeReady is Engine.PurgeReady, elsewhere for a queue elsewhere.
func (r *remoteEngine) PurgeReady(name string) (int, error) {
	if _, ok := r.remote(name); !ok {
		n, err := r.Engine.PurgeReady(name)
		if !r.refound(name, err) {
			return n, err
		}
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	rep, err := r.do(ctx, engineCall{Op: opPurgeReady, Queue: name})
	return rep.N, err
}

// DeleteQueue is Engine.DeleteQueue, elsewhere for a queue elsewhere.
func (r *remoteEngine) DeleteQueue(name string) error {
	if _, ok := r.remote(name); !ok {
		if err := r.Engine.DeleteQueue(name); !r.refound(name, err) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	_, err := r.do(ctx, engineCall{Op: opDeleteQueue, Queue: name})
	return err
}

// DropQueue is Engine.DropQueue; a queue elsewhere (an SQS queue, which
// AMQP deletes as SQS does) is deleted there.
func (r *remoteEngine) DropQueue(name string) error {
	if _, ok := r.remote(name); !ok {
		if err := r.Engine.DropQueue(name); !r.refound(name, err) {
			return err
		}
	}
	return r.DeleteQueue(name)
}

// UpdateQueue is Engine.UpdateQueue; a queue elsewhere is refused.
func (r *remoteEngine) UpdateQueue(name string, fn func(cfg *engine.QueueConfig) error) error {
	if _, ok := r.remote(name); ok {
		return engine.ErrQueueElsewhere
	}
	if err := r.Engine.UpdateQueue(name, fn); !r.refound(name, err) {
		return err
	}
	return engine.ErrQueueElsewhere
}

// VisibleHint is Engine.VisibleHint; for a queue elsewhere, the ready
// count its leader reported last (none before its first answer).
func (r *remoteEngine) VisibleHint(name string) (int, bool) {
	r.mu.RLock()
	q := r.queues[name]
	r.mu.RUnlock()
	if q == nil {
		return r.Engine.VisibleHint(name)
	}
	n := q.hint.Load()
	return int(max(n, 0)), n >= 0
}

// keepaliveParallel bounds the keepalive calls in flight at once.
const keepaliveParallel = 16

// keepalive pings, every engineKeepalive until ctx ends, the session of
// every queue found elsewhere, so that their leaders keep its leases.
func (r *remoteEngine) keepalive(ctx context.Context) {
	tick := time.NewTicker(engineKeepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		names := make([]string, 0, len(r.queues))
		for name := range r.queues {
			names = append(names, name)
		}
		r.mu.Unlock()
		// In parallel (at most keepaliveParallel at once): a shard whose
		// leader does not answer holds its pings for engineKeepalive, not
		// the other shards' past their sessions' expiry.
		sem := make(chan struct{}, keepaliveParallel)
		var wg sync.WaitGroup
		for _, name := range names {
			session, ok := r.remote(name)
			if !ok {
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				cctx, cancel := context.WithTimeout(ctx, engineKeepalive)
				defer cancel()
				if _, err := r.do(cctx, engineCall{Op: opKeepalive, Queue: name, Session: session}); err != nil && ctx.Err() == nil && !errors.Is(err, engine.ErrQueueNotFound) {
					r.log.Debug("amqp: a session's keepalive failed", "queue", name, "err", err)
				}
			})
		}
		wg.Wait()
	}
}
