package engine

import (
	"sync/atomic"
	"time"
)

// roomHints let a dead-letter move or a redrive, which hold the source's
// lock and never a second queue lock, respect a target's length limits
// (DLQ-97) instead of inserting and trimming after. ready and readyBytes
// mirror the target's ready count and bytes as of its last unlock;
// incoming counts moves reserved but not yet inserted, which the target's
// own sends count as occupied (fullLocked). A reservation is exact against
// other movers (compare-and-swap) and against the target's own sends
// (they see incoming). One race remains: a send in progress under the
// target's lock is published only at its unlock, so a mover and a sender
// racing for the last slot may both win, exceeding the limit by one
// message per racing mover.
//
// visible mirrors the queue's visible (receivable now) count as of its
// last unlock, and receivedAt the engine-clock time (Unix nanoseconds) of
// its last receive call, for flow control (Engine.VisibleHint,
// Engine.ReceivedAtHint). waiting counts the receives parked on the queue
// now, waiting for a message (QueueInfo.Waiting).
type roomHints struct {
	ready, readyBytes       atomic.Int64
	incoming, incomingBytes atomic.Int64
	visible                 atomic.Int64
	receivedAt              atomic.Int64
	waiting                 atomic.Int64
}

// publishRoomLocked updates the hints from the queue's counts.
func (q *queue) publishRoomLocked() {
	n, b := q.readyLocked()
	q.room.ready.Store(int64(n))
	q.room.readyBytes.Store(b)
	q.room.visible.Store(int64(q.nState[stateVisible] + q.cold.n))
}

// VisibleHint returns how many messages of the named queue were visible
// (ready to be received, ApproximateNumberOfMessages) when its lock was
// last released, without taking the lock; false when there is no such
// queue. It is a hint: sends and receives in progress are not counted
// until they finish. AMQP flow control reads it on every publish batch
// and consumer receive, where taking the queue's lock would contend with
// exactly the traffic it measures.
func (e *Engine) VisibleHint(name string) (int, bool) {
	q, err := e.lookup(name)
	if err != nil {
		return 0, false
	}
	return int(q.room.visible.Load()), true
}

// ReceivedAtHint returns when (on the engine's clock) the named queue was
// last asked for messages by a receive (SQS ReceiveMessage, an AMQP
// consumer's fetch, basic.get), found or not; zero when never since the
// engine opened, false when there is no such queue. Lock-free, for flow
// control: a queue receivers are polling is one whose backlog they are
// expected to drain.
func (e *Engine) ReceivedAtHint(name string) (time.Time, bool) {
	q, err := e.lookup(name)
	if err != nil {
		return time.Time{}, false
	}
	ns := q.room.receivedAt.Load()
	if ns == 0 {
		return time.Time{}, true
	}
	return time.Unix(0, ns), true
}

// pending returns the reserved, not yet inserted, moves.
func (r *roomHints) pending() (int64, int64) {
	return r.incoming.Load(), r.incomingBytes.Load()
}

// reserve takes room for one message of size bytes in a queue with
// configuration cfg, or reports that there is none. Without length limits
// there is always room. With a drop-head overflow (the default) there is
// always room too unless hard is set: the target's own policy drops its
// oldest message, as for a send. A redrive sets hard: it must not push
// the destination's own messages out, so it waits for room instead.
func (r *roomHints) reserve(cfg *QueueConfig, size int64, hard bool) bool {
	limited := cfg.MaxLength > 0 || cfg.MaxLengthBytes > 0
	dropHead := cfg.Overflow == "" || cfg.Overflow == OverflowDropHead
	if !limited || (dropHead && !hard) {
		r.incoming.Add(1)
		r.incomingBytes.Add(size)
		return true
	}
	for {
		in := r.incoming.Load()
		if cfg.MaxLength > 0 && r.ready.Load()+in+1 > int64(cfg.MaxLength) {
			return false
		}
		if cfg.MaxLengthBytes > 0 && r.readyBytes.Load()+r.incomingBytes.Load()+size > cfg.MaxLengthBytes {
			return false
		}
		if r.incoming.CompareAndSwap(in, in+1) {
			r.incomingBytes.Add(size)
			return true
		}
	}
}

// release gives back a reservation once the move is inserted (or its
// target is gone).
func (r *roomHints) release(size int64) {
	r.incoming.Add(-1)
	r.incomingBytes.Add(-size)
}
