package worker

import "context"

// Deduper remembers which messages were processed, so that a message
// delivered again (a lost delete, an expired lease, a redrive of a message
// that had in fact been processed) does not repeat its side effects.
// worker/dedup has an in-memory and a database/sql implementation.
//
// The worker calls Seen before the handler and Mark after it returned nil,
// then acks. The guarantee is therefore "at most one completed handler
// run per key while the mark lasts", with two caveats:
//
//   - a crash between the handler's side effects and Mark lets the next
//     delivery run them again (for exactly-once effects, record the key in
//     the same transaction as the effects);
//   - two deliveries of one key handled at the same moment (possible only
//     when both copies are in the queue at once, e.g. a redrive while the
//     original is still in flight) both run.
//
// Implementations must be safe for concurrent use.
type Deduper interface {
	// Seen reports whether key was marked and the mark has not expired.
	// An error makes the delivery fail transiently: the worker does not
	// run a handler it cannot deduplicate.
	Seen(ctx context.Context, key string) (bool, error)
	// Mark records that key was processed. An error is logged; the message
	// is acked anyway (its side effects are done).
	Mark(ctx context.Context, key string) error
}

// KeyFunc derives a message's idempotency key.
type KeyFunc func(*Message) string

// DefaultKey is the message's OriginalID when it has one, else its ID. A
// redrive gives a message a new ID but Sluice keeps the first one in
// SluiceOriginalMessageId, so the key survives retries, dead-lettering
// and any number of redrives. Producers that resend the same logical
// message as a new SQS message should set their own key in an attribute
// and use a KeyFunc that reads it.
func DefaultKey(m *Message) string {
	if m.OriginalID != "" {
		return m.OriginalID
	}
	return m.ID
}
