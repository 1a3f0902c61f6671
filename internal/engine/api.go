package engine

import (
	"context"
	"strings"
)

// The Engine's public methods. Every method is safe for concurrent use.
//
// Durability: a method that changes state returns only after the change is
// durable in the store (group-committed fsync), except Receive, whose
// receive-count and lease updates are written without waiting for a sync and
// become durable with the next synced write (see docs/guarantees.md).

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

// GetQueue returns a snapshot of the queue's settings and counters.
func (e *Engine) GetQueue(name string) (QueueInfo, error) {
	return e.getQueue(name)
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

// DeleteQueue removes the queue and all its messages. The name cannot be
// reused for NameReuseDelay.
func (e *Engine) DeleteQueue(name string) error {
	return e.deleteQueue(name)
}

// DropQueue deletes the queue like DeleteQueue but without blocking its
// name for NameReuseDelay: AMQP clients redeclare a queue right after
// deleting it, which RabbitMQ allows.
func (e *Engine) DropQueue(name string) error {
	return e.removeQueue(name, false)
}

// PurgeReady deletes the queue's ready messages (visible and delayed, not
// those in flight) with no rate limit, as AMQP's queue.purge does, and
// returns how many. The deletes are durable when it returns.
func (e *Engine) PurgeReady(name string) (int, error) {
	return e.purgeReady(name)
}

// ListQueues returns the names of all queues starting with prefix, sorted.
func (e *Engine) ListQueues(prefix string) []string {
	return e.listQueues(prefix)
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

// PurgeQueue deletes every message (visible, in flight and delayed) and
// clears the FIFO deduplication cache. At most once per PurgeInterval:
// otherwise ErrPurgeInProgress.
func (e *Engine) PurgeQueue(name string) error {
	return e.purgeQueue(name)
}

// DeadLetterSources returns, sorted, the queues whose DeadLetterPolicy names
// dlq, or whose Routed policy can reach it (see DeadLetterTargeter).
func (e *Engine) DeadLetterSources(dlq string) ([]string, error) {
	return e.deadLetterSources(dlq)
}

// Send stores messages in the queue. Each message gets its own SendResult;
// a message that fails validation (size, FIFO ids, delay) fails alone. The
// returned error is for the whole call (queue missing, storage failed).
//
// When Send returns, every successful message is durable: it survives a
// crash and will be delivered at least once (unless deleted, purged or
// expired). A FIFO message whose deduplication id was seen within
// DedupWindow is accepted (with the original MessageID) but not stored again.
func (e *Engine) Send(queue string, msgs []Message) ([]SendResult, error) {
	return e.send(queue, msgs)
}

// Receive leases up to req.Max messages. It waits up to the long-poll time
// for the first message and returns as soon as at least one is available.
// Every receive issues a new receipt handle and increments the message's
// receive count. A message whose receive count has already reached its
// queue's DeadLetterPolicy.MaxReceiveCount is moved to the dead-letter queue
// instead of being returned. An empty result is not an error.
func (e *Engine) Receive(ctx context.Context, queue string, req ReceiveRequest) ([]Delivery, error) {
	return e.receive(ctx, queue, req)
}

// Delete removes the messages leased with the given receipt handles. The
// result has one entry per handle (nil on success). Deleting an already
// deleted message succeeds. A stale handle (the message was leased again
// since) succeeds without deleting on a standard queue; on a FIFO queue a
// handle whose lease has expired fails with ErrReceiptHandleExpired. When
// Delete returns, successful deletes are durable.
func (e *Engine) Delete(queue string, handles []string) ([]error, error) {
	return e.deleteMessages(queue, handles)
}

// DeleteLeased deletes the messages only while the given lease is current
// and still in flight: AMQP's basic.ack. After a failure report ended the
// lease (a retry is scheduled, or the message was dead-lettered), the ack
// that follows settles nothing and deletes nothing; the result is nil for
// it too. Malformed handles fail with ErrReceiptHandleInvalid. Durable when
// it returns.
func (e *Engine) DeleteLeased(queue string, handles []string) ([]error, error) {
	return e.deleteMessagesIf(queue, handles, true)
}

// ReleaseInFlight ends every lease of the queue now: in-flight messages
// become visible again at once (no retry backoff), keeping their receive
// counts. The AMQP front-end calls it at start-up: its deliveries' leases
// last as long as the consumer timeout, but every AMQP connection died with
// the previous process, so their unacknowledged messages must be requeued
// at once, as RabbitMQ does. It returns how many were released; durable
// when it returns.
func (e *Engine) ReleaseInFlight(queue string) (int, error) {
	return e.releaseInFlight(queue)
}

// ChangeVisibility sets, counting from now, the remaining lease of each
// message to its Timeout; 0 makes it visible at once. As on SQS it works
// after the lease lapsed (a visible message is leased again for Timeout,
// so a worker that extends late keeps its job), and on a standard queue
// any receipt handle of the message applies to its current state, even
// one from an earlier receive. On a FIFO queue a handle from an earlier
// receive fails with ErrMessageNotAvailable, as does any handle of a
// deleted message; a message waiting out a retry backoff fails with
// ErrMessageNotInflight.
func (e *Engine) ChangeVisibility(queue string, changes []VisibilityChange) ([]error, error) {
	return e.changeVisibility(queue, changes)
}
