package engine

import "errors"

// Broker-wide limits on what clients can make the engine hold: a cap on
// the number of queues (20,000 queues created in seconds grew memory
// without bound and made /metrics 124 MB) and caps on every queue's
// messages and bytes (SQS has none; a broker on one machine needs them).
// They apply to queue creation and to sends (SQS SendMessage, AMQP
// publish), whatever the protocol; dead letters and move tasks are not
// refused by them (refusing would lose or strand a message already held).

// Defaults for Options.MaxQueues and Options.MaxQueueMessages.
const (
	DefaultMaxQueues        = 10000
	DefaultMaxQueueMessages = 10_000_000
)

// ErrTooManyQueues: creating the queue would pass Options.MaxQueues.
var ErrTooManyQueues = errors.New("engine: too many queues")

// limits are the engine's resolved caps; 0 means none.
type limits struct {
	maxQueues        int
	maxQueueMessages int
	maxQueueBytes    int64
}

func resolveLimits(o *Options) limits {
	l := limits{maxQueues: o.MaxQueues, maxQueueMessages: o.MaxQueueMessages, maxQueueBytes: o.MaxQueueBytes}
	switch {
	case l.maxQueues == 0:
		l.maxQueues = DefaultMaxQueues
	case l.maxQueues < 0:
		l.maxQueues = 0
	}
	switch {
	case l.maxQueueMessages == 0:
		l.maxQueueMessages = DefaultMaxQueueMessages
	case l.maxQueueMessages < 0:
		l.maxQueueMessages = 0
	}
	l.maxQueueBytes = max(l.maxQueueBytes, 0)
	return l
}

// checkQueueCount reports ErrTooManyQueues when one more queue would pass
// the cap. Called with adminMu held, so creations are counted one by one.
func (e *Engine) checkQueueCount() error {
	if e.limits.maxQueues == 0 {
		return nil
	}
	e.mu.RLock()
	n := len(e.queues)
	e.mu.RUnlock()
	if n >= e.limits.maxQueues {
		return ErrTooManyQueues
	}
	return nil
}

// MaxQueues is the queue cap in force (0: none), for error messages.
func (e *Engine) MaxQueues() int { return e.limits.maxQueues }

// overCapLocked reports whether a message of size bytes would pass the
// engine-wide per-queue caps, counting every message the queue holds
// (ready, delayed and in flight, hot or cold). q.mu is held.
func (q *queue) overCapLocked(size int) bool {
	l := &q.eng.limits
	if l.maxQueueMessages == 0 && l.maxQueueBytes == 0 {
		return false
	}
	n, bytes := q.cold.n, q.cold.bytes
	for i := range q.nState {
		n += q.nState[i]
		bytes += q.nBytes[i]
	}
	return (l.maxQueueMessages > 0 && n+1 > l.maxQueueMessages) ||
		(l.maxQueueBytes > 0 && bytes+int64(size) > l.maxQueueBytes)
}
