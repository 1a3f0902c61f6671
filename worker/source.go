package worker

import (
	"context"
	"errors"
	"time"
)

// Message is one delivery of a message, as a Source hands it to the
// worker. The worker owns it until it is settled (acked, failed or
// released); handlers must not keep it after they return.
type Message struct {
	// ID is the transport's message id (SQS MessageId). A redrive creates
	// a new message with a new ID.
	ID string
	// OriginalID is the id the message had before it was first redriven
	// (Sluice's SluiceOriginalMessageId system attribute), or "" when the
	// message was never redriven or the broker does not say.
	OriginalID string
	Body       []byte
	// Attributes are the user attributes with a string value (SQS String
	// and Number message attributes). Binary ones are only in Raw.
	Attributes map[string]string
	// Attempt is the delivery count, starting at 1 (SQS
	// ApproximateReceiveCount).
	Attempt int
	SentAt  time.Time
	// Lease is how long the delivery stays hidden from other consumers
	// unless extended (the SQS visibility timeout). The worker extends it
	// at half of it while the handler runs. 0: the transport has no lease
	// to extend.
	Lease time.Duration
	// Raw is the transport's own message (types.Message for SQSSource).
	Raw any
	// Receipt is the Source's handle for settling this delivery (the SQS
	// receipt handle). It is opaque to the worker.
	Receipt any
}

// Source is a message transport: what the worker needs from a broker. An
// implementation must be safe for concurrent use; the worker calls every
// method from several goroutines. SQSSource is the SQS implementation; an
// AMQP one maps Receive to basic.consume with basic.qos, Ack to basic.ack,
// Release to basic.nack(requeue=true) and Fail to nack/reject with Sluice's
// failure headers.
type Source interface {
	// Receive returns up to max deliveries (1 ≤ max ≤ 10), waiting for
	// some to arrive (long polling). It may return none. It must return
	// promptly once ctx is done; a delivery leased by a Receive whose
	// result is lost that way is redelivered when its lease runs out.
	Receive(ctx context.Context, max int) ([]*Message, error)
	// Ack settles a delivery that was processed: the message is deleted.
	Ack(ctx context.Context, m *Message) error
	// Extend renews the lease of a delivery by its full Lease.
	Extend(ctx context.Context, m *Message) error
	// Release ends the lease now so that the message is delivered again
	// at once, to any consumer. It is not a failure.
	Release(ctx context.Context, m *Message) error
	// Fail settles a delivery whose processing failed, as f says (see
	// Failure). It returns ErrNoDeadLetterQueue for a terminal failure
	// that cannot be dead-lettered, leaving the message as it was.
	Fail(ctx context.Context, m *Message, f Failure) (Outcome, error)
}

// Failure is what the worker asks a Source to do with a failed delivery,
// with the context to record.
type Failure struct {
	// Terminal: dead-letter the message now, whatever its delivery count.
	Terminal bool
	// Retry delay for a non-terminal failure: the message should be
	// delivered again after Backoff. When Hold is false a Source whose
	// broker has its own backoff policy for the queue may use that
	// instead; when Hold is true (the retry budget is spent, or the error
	// said when to retry) Backoff is used as given.
	Backoff time.Duration
	Hold    bool

	// Context recorded with the message (and shown on it in the
	// dead-letter queue) when the transport can carry it.
	ErrorClass      string
	ErrorMessage    string // at most MaxErrorMessage bytes
	Trace           string // at most MaxTrace bytes
	ConsumerID      string
	ConsumerVersion string
}

// Outcome is what a Source did with a failed delivery.
type Outcome struct {
	// DeadLettered: the message is now in the dead-letter queue Target.
	DeadLettered bool
	Target       string
	// VisibleAt is when the message will be delivered again, when it was
	// not dead-lettered (zero when the Source does not know).
	VisibleAt time.Time
	// Reported: the broker recorded the failure context (the Sluice
	// failure-report extension). False on plain SQS.
	Reported bool
}

// Limits on the failure context the worker sends; they match Sluice's.
const (
	MaxErrorMessage = 1 << 10
	MaxTrace        = 16 << 10
)

// Errors a Source returns.
var (
	// ErrNoDeadLetterQueue: a terminal failure on a queue without a
	// dead-letter queue. The message was left as it was; the worker then
	// retries it with the longest backoff instead of dropping it.
	ErrNoDeadLetterQueue = errors.New("worker: queue has no dead-letter queue")
	// ErrLeaseLost: the delivery's lease ended (it timed out or the
	// message was received again) before it could be settled. The message
	// is, or will be, delivered again.
	ErrLeaseLost = errors.New("worker: lease lost")
)

// Handler processes one message. What happens to the message depends on
// what Handle does:
//
//   - returns nil: the message is acked (deleted) and, with a Deduper,
//     its key is marked done;
//   - returns an error: it is classified (see Classify) and the message is
//     retried later (transient) or dead-lettered now (terminal), with the
//     error as its failure context;
//   - panics: the panic is recovered and treated as a *PanicError, which
//     is terminal unless Options.PanicIsTerminal is false;
//   - runs while the worker shuts down: ctx stays live until
//     Options.ShutdownTimeout; then ctx is cancelled and the message is
//     released for redelivery, whatever Handle returns later.
//
// While Handle runs, the message's lease is extended, so a slow handler
// is not redelivered to another consumer. Handle may be called again for
// the same message (at-least-once delivery): make it idempotent, or use a
// Deduper.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }
