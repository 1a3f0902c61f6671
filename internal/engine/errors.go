package engine

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/store"
)

// Sentinel errors. Front-ends map them to protocol errors (SQS codes, AMQP
// reply codes) at the edge; match them with errors.Is.
var (
	// ErrQueueNotFound: the named queue does not exist.
	ErrQueueNotFound = errors.New("engine: queue does not exist")
	// ErrQueueDeletedRecently: a queue of this name was deleted less than
	// NameReuseDelay ago.
	ErrQueueDeletedRecently = errors.New("engine: queue deleted recently")
	// ErrUnavailable: the change needs a part of the cluster that did not
	// answer in time (the leader of another shard: Options.HoldDeleted);
	// nothing was changed, and the request may be retried.
	ErrUnavailable = errors.New("engine: a part of the cluster this change needs did not answer")
	// ErrQueueElsewhere: a queue of this name lives outside this engine
	// (Options.NameTaken: another shard of a cluster).
	ErrQueueElsewhere = errors.New("engine: a queue of this name lives on another shard")
	// ErrPurgeInProgress: the queue was purged less than PurgeInterval ago.
	ErrPurgeInProgress = errors.New("engine: purge in progress")
	// ErrReceiptHandleInvalid: the receipt handle is malformed or belongs to
	// another queue.
	ErrReceiptHandleInvalid = errors.New("engine: receipt handle is invalid")
	// ErrReceiptHandleExpired: on a FIFO queue, the handle's lease ended and
	// the message may be redelivered, so the delete is refused.
	ErrReceiptHandleExpired = errors.New("engine: receipt handle has expired")
	// ErrMessageNotAvailable: ChangeVisibility on a message that was
	// deleted, or (FIFO) with a handle from an earlier receive.
	ErrMessageNotAvailable = errors.New("engine: message does not exist or is not available for visibility timeout change")
	// ErrMessageNotInflight: ChangeVisibility on a message that is waiting
	// out a retry backoff (and Requeue of one that is not in flight).
	ErrMessageNotInflight = errors.New("engine: message is not in flight")
	// ErrVisibilityLimit: a visibility change that would keep the message
	// in flight longer than MaxVisibility from the start of its lease.
	ErrVisibilityLimit = errors.New("engine: visibility timeout would exceed the 12 hour limit")
	// ErrOverLimit: too many messages in flight on the queue.
	ErrOverLimit = errors.New("engine: too many messages in flight")
	// ErrMissingGroupID: a FIFO send without a message group id.
	ErrMissingGroupID = errors.New("engine: message group id is required")
	// ErrMissingDedupID: a FIFO send without a deduplication id on a queue
	// without content-based deduplication.
	ErrMissingDedupID = errors.New("engine: deduplication id is required")
	// ErrQueueFull: the queue is at its length limit and its overflow
	// behaviour rejects new messages.
	ErrQueueFull = errors.New("engine: queue is full")
	// ErrDelayNotAllowed: a per-message delay on a FIFO queue.
	ErrDelayNotAllowed = errors.New("engine: per-message delay is not allowed on FIFO queues")
	// ErrInvalidConfig: a queue configuration value is out of range or
	// inconsistent. The wrapped message names the setting.
	ErrInvalidConfig = errors.New("engine: invalid queue configuration")
	// ErrTooManyTags: more than MaxTags tags on a queue.
	ErrTooManyTags = errors.New("engine: too many tags")
	// ErrDiskFull: the store's disk is nearly full, so new messages are
	// refused until space returns (see Engine.SetAdmission). Reads,
	// deletes and everything that frees space still work. Retry later.
	ErrDiskFull = errors.New("engine: disk nearly full; new messages refused until space returns")
	// ErrMemoryHigh: the broker holds more than its memory watermark
	// (Engine.MemoryHeld against the server's memory_high_watermark), so
	// new messages are refused until consumers drain the backlog (see
	// Engine.SetAdmission). Retry later.
	ErrMemoryHigh = errors.New("engine: memory high watermark reached; new messages refused until the backlog drains")
	// ErrClosed: the engine is closed.
	ErrClosed = errors.New("engine: closed")
	// ErrStorage: the store failed; the engine accepts no more changes.
	ErrStorage = errors.New("engine: storage failed")
	// ErrNotLeading is wrapped with ErrStorage when the store is
	// replicated and this node no longer leads it (cluster mode, a leader
	// change): the change may or may not take effect under the new
	// leader; the client should retry there. It is store.ErrNotLeading.
	ErrNotLeading = store.ErrNotLeading
	// ErrNotWritten is wrapped by the errors of changes certain to have
	// taken no effect: refused by an engine that had failed already, or
	// by a replicated store before they were proposed or entered its log.
	// With ErrNotLeading, the change may be made again through the new
	// leader without being made twice. It is store.ErrNotWritten.
	ErrNotWritten = store.ErrNotWritten
)

// MessageTooLargeError is returned for a message whose Size exceeds the
// queue's MaxMessageSize.
type MessageTooLargeError struct {
	Size, Limit int
}

func (e *MessageTooLargeError) Error() string {
	return fmt.Sprintf("engine: message of %d bytes exceeds the queue's limit of %d bytes", e.Size, e.Limit)
}

// ActiveTaskError is StartMoveTask's refusal while the source has an
// active task (RUNNING, CANCELLING or PAUSED): Task is that task as it was
// at the refusal, so a front-end can say which and what frees the slot
// without listing the tasks again. errors.Is(err, ErrTaskRunning) is true.
type ActiveTaskError struct {
	Task MoveTask
}

func (e *ActiveTaskError) Error() string {
	return fmt.Sprintf("%v (task %s is %s)", ErrTaskRunning, e.Task.ID, e.Task.Status)
}

// Unwrap makes errors.Is(err, ErrTaskRunning) true.
func (e *ActiveTaskError) Unwrap() error { return ErrTaskRunning }

// ConfigError describes an invalid queue setting; it wraps ErrInvalidConfig.
type ConfigError struct {
	Setting string // e.g. "VisibilityTimeout", "RedrivePolicy"
	Reason  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("engine: invalid %s: %s", e.Setting, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }
