package engine

import (
	"strings"

	"github.com/sluicemq/sluice/internal/store"
)

// The Engine's public methods. Every method is safe for concurrent use.
//
// Durability: a method that changes state returns only after the change is
// durable in the store (group-committed fsync), except Receive, whose
// receive-count and lease updates, and DeleteLeasedUnsynced, whose deletes,
// are written without waiting for a sync and become durable with the next
// synced write (see docs/guarantees.md).

// CreateQueue creates the queue, or, when a queue of that name exists,
// returns it with created=false and changes nothing: the caller decides
// whether the existing settings are equivalent (SQS compares only the
// attributes the request names). Fails with ErrQueueDeletedRecently within
// NameReuseDelay of a delete of the same name, and with a *ConfigError for
// out-of-range settings.
func (e *Engine) CreateQueue(name string, cfg QueueConfig, tags map[string]string) (info QueueInfo, created bool, err error) {
	return e.createQueue(name, cfg, tags, nil)
}

// CreateQueueWithMeta is CreateQueue that also stores front-end metadata
// records (PutMeta's) in the same batch as the queue's own record, with
// one fsync: after a crash both exist or neither does (an AMQP
// queue.declare and its topology record). The records are written only
// when the queue is created; with created=false nothing is written and
// the caller decides what to record.
func (e *Engine) CreateQueueWithMeta(name string, cfg QueueConfig, tags map[string]string, meta []MetaRecord) (info QueueInfo, created bool, err error) {
	for _, m := range meta {
		if m.Namespace == "" || strings.IndexByte(m.Namespace, 0) >= 0 {
			return QueueInfo{}, false, errMetaName
		}
	}
	return e.createQueue(name, cfg, tags, meta)
}

// Config returns the queue's current settings without taking the queue's
// lock; front-ends use it to validate requests on the hot path. The result
// is shared: callers must not modify it (or its maps and pointers).
func (e *Engine) Config(name string) (*QueueConfig, error) {
	q, err := e.lookup(name)
	if err != nil {
		return nil, err
	}
	return q.snap.Load(), nil
}

// UpdateQueue changes the queue's settings atomically: fn receives a copy of
// the current settings and edits it; if fn returns an error nothing changes.
// Changing FIFO is refused with a *ConfigError. fn runs with the queue's
// lock held, so it must not call the Engine.
func (e *Engine) UpdateQueue(name string, fn func(cfg *QueueConfig) error) error {
	return e.updateQueue(name, fn)
}

// DropQueue deletes the queue like DeleteQueue but without blocking its
// name for NameReuseDelay: AMQP clients redeclare a queue right after
// deleting it, which RabbitMQ allows.
func (e *Engine) DropQueue(name string) error {
	_, err := e.removeQueue(name, false)
	return err
}

// TagQueue adds or replaces tags; more than MaxTags in all fails with
// ErrTooManyTags.
func (e *Engine) TagQueue(name string, tags map[string]string) error {
	return e.tagQueue(name, tags, nil)
}

// UntagQueue removes tags; missing keys are ignored.
func (e *Engine) UntagQueue(name string, keys []string) error {
	return e.tagQueue(name, nil, keys)
}

// DeadLetterSources returns, sorted, the queues whose DeadLetterPolicy names
// dlq, or whose Routed policy can reach it (see DeadLetterTargeter).
func (e *Engine) DeadLetterSources(dlq string) ([]string, error) {
	return e.deadLetterSources(dlq)
}

// DeleteLeased deletes the messages only while the given lease is current
// and still in flight: AMQP's basic.ack. After a failure report ended the
// lease (a retry is scheduled, or the message was dead-lettered), the ack
// that follows settles nothing and deletes nothing; the result is nil for
// it too. Malformed handles fail with ErrReceiptHandleInvalid. Durable when
// it returns.
func (e *Engine) DeleteLeased(queue string, handles []string) ([]error, error) {
	return e.deleteMessagesIf(queue, handles, true, true)
}

// DeleteLeasedUnsynced is DeleteLeased without waiting for a sync: the
// deletes take effect at once and are written to the store, and they
// become durable with the next synced write of this engine — any
// acknowledged change, a Sync, or the background sync at the latest
// DefaultSyncInterval plus one fsync later, as a receive's lease. A crash
// before then brings the messages back, which at-least-once delivery
// allows. It is AMQP's basic.ack, which has no reply: the front-end calls
// Sync before it answers anything that must prove the acks durable.
func (e *Engine) DeleteLeasedUnsynced(queue string, handles []string) ([]error, error) {
	return e.deleteMessagesIf(queue, handles, true, false)
}

// Sync is a sync barrier: it returns once everything this engine wrote
// before it is durable (in a cluster, committed), or with an error
// wrapping ErrStorage if that cannot be promised, which fails the engine.
// It shares its fsync with any concurrent durable write.
func (e *Engine) Sync() error {
	p, err := e.write(&store.Batch{}, true)
	if err != nil {
		return err
	}
	return e.wait(p)
}
