// Package dlq is the transport-neutral half of dead-lettering for the
// worker SDK's Kafka, NATS JetStream, Redis Streams and Google Pub/Sub
// transports: the failure-context fields every dead letter carries (as
// Kafka or NATS headers, Redis fields or Pub/Sub attributes), and the
// redrive loop that the console runs over any transport's Store, with
// Sluice's safety: filter, dry run, rate limit, and a stop when redriven
// messages fail again.
package dlq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/worker"
)

// Field names of the failure context. Every transport writes the same
// names; values are UTF-8 strings.
const (
	FieldSource       = "sluice-src"           // dedup key: the source coordinates (topic/partition/offset, stream/seq/consumer, stream id/group, subscription/message id)
	FieldOrigin       = "sluice-origin"        // where the message came from (topic, subject, stream or subscription)
	FieldOriginID     = "sluice-origin-id"     // the first id the message had, kept across redrives
	FieldErrorClass   = "sluice-error-class"   // worker.Failure.ErrorClass
	FieldErrorMessage = "sluice-error-message" // worker.Failure.ErrorMessage
	FieldTrace        = "sluice-error-trace"   // worker.Failure.Trace (may be shortened by a transport's limits)
	FieldTerminal     = "sluice-terminal"      // "true" for a terminal failure, "false" for exhausted attempts
	FieldAttempts     = "sluice-attempts"      // deliveries made, decimal
	FieldConsumerID   = "sluice-consumer-id"
	FieldVersion      = "sluice-consumer-version"
	FieldFirstSeen    = "sluice-sent-at"       // RFC 3339 (nanoseconds): when the source got the message, when known
	FieldFailedAt     = "sluice-failed-at"     // RFC 3339 (nanoseconds): when it was dead-lettered
	FieldRedrives     = "sluice-redrive-count" // how often it was redriven before, decimal
	FieldReason       = "sluice-dead-letter-reason"
)

// Dead-letter reasons (FieldReason).
const (
	ReasonTerminal    = "terminal"          // the handler's error was terminal
	ReasonMaxAttempts = "max_attempts"      // transient failures used every attempt
	ReasonOverLimit   = "delivery_exceeded" // delivered past the limit without a settled failure (a worker died on its last attempt)
)

// Context is the failure context of a dead letter.
type Context struct {
	Source, Origin, OriginID string
	ErrorClass, ErrorMessage string
	Trace                    string
	Terminal                 bool
	Reason                   string
	Attempts                 int
	ConsumerID, Version      string
	SentAt, FailedAt         time.Time
	Redrives                 int
}

// NewContext is the context for dead-lettering m after failure f.
// source is the dedup key (the source coordinates), origin where it came
// from; originID the message's first id ("" for m.ID).
func NewContext(m *worker.Message, f worker.Failure, reason, source, origin string, redrives int, now time.Time) Context {
	oid := m.OriginalID
	if oid == "" {
		oid = m.ID
	}
	return Context{Source: source, Origin: origin, OriginID: oid, ErrorClass: f.ErrorClass,
		ErrorMessage: f.ErrorMessage, Trace: f.Trace, Terminal: f.Terminal, Reason: reason, Attempts: m.Attempt,
		ConsumerID: f.ConsumerID, Version: f.ConsumerVersion, SentAt: m.SentAt, FailedAt: now, Redrives: redrives}
}

// Fields encodes c as string fields. traceMax > 0 shortens the trace to
// that many bytes (Pub/Sub allows 1,024 per attribute value).
func (c Context) Fields(traceMax int) map[string]string {
	tr := c.Trace
	if traceMax > 0 && len(tr) > traceMax {
		tr = tr[:traceMax]
	}
	f := map[string]string{
		FieldSource: c.Source, FieldOrigin: c.Origin, FieldOriginID: c.OriginID,
		FieldErrorClass: c.ErrorClass, FieldErrorMessage: c.ErrorMessage, FieldTrace: tr,
		FieldTerminal: strconv.FormatBool(c.Terminal), FieldReason: c.Reason,
		FieldAttempts: strconv.Itoa(c.Attempts), FieldConsumerID: c.ConsumerID, FieldVersion: c.Version,
		FieldFailedAt: c.FailedAt.UTC().Format(time.RFC3339Nano), FieldRedrives: strconv.Itoa(c.Redrives),
	}
	if !c.SentAt.IsZero() {
		f[FieldFirstSeen] = c.SentAt.UTC().Format(time.RFC3339Nano)
	}
	for k, v := range f {
		if v == "" {
			delete(f, k)
		}
	}
	return f
}

// ParseContext decodes the context fields of fields; ok is false when
// they carry none (FieldSource is missing).
func ParseContext(fields map[string]string) (c Context, ok bool) {
	if fields[FieldSource] == "" {
		return c, false
	}
	c.Source, c.Origin, c.OriginID = fields[FieldSource], fields[FieldOrigin], fields[FieldOriginID]
	c.ErrorClass, c.ErrorMessage, c.Trace = fields[FieldErrorClass], fields[FieldErrorMessage], fields[FieldTrace]
	c.Terminal = fields[FieldTerminal] == "true"
	c.Reason = fields[FieldReason]
	c.Attempts, _ = strconv.Atoi(fields[FieldAttempts])
	c.ConsumerID, c.Version = fields[FieldConsumerID], fields[FieldVersion]
	c.SentAt, _ = time.Parse(time.RFC3339Nano, fields[FieldFirstSeen])
	c.FailedAt, _ = time.Parse(time.RFC3339Nano, fields[FieldFailedAt])
	c.Redrives, _ = strconv.Atoi(fields[FieldRedrives])
	return c, true
}

// IsContextField reports whether name is one of the failure-context
// fields, which a redrive strips (FieldOriginID and FieldRedrives are
// carried forward instead).
func IsContextField(name string) bool { return strings.HasPrefix(name, "sluice-") }

// RedriveFields returns the fields a redriven copy carries: the user's
// fields without the failure context, plus the origin id and the redrive
// count incremented.
func RedriveFields(fields map[string]string, c Context) map[string]string {
	out := make(map[string]string, len(fields))
	for k, v := range fields {
		if !IsContextField(k) {
			out[k] = v
		}
	}
	if c.OriginID != "" {
		out[FieldOriginID] = c.OriginID
	}
	out[FieldRedrives] = strconv.Itoa(c.Redrives + 1)
	return out
}

// Redrives reads the redrive count a redriven message carries (0 when
// none).
func Redrives(fields map[string]string) int {
	n, _ := strconv.Atoi(fields[FieldRedrives])
	return n
}

// Entry is one dead letter as a Store lists it.
type Entry struct {
	// ID identifies the entry in its DLQ (a Kafka "partition/offset", a
	// NATS stream sequence, a Redis stream id, a Pub/Sub message id).
	ID string
	// Key is the original record's key (Kafka), subject (NATS) or
	// ordering key (Pub/Sub); "" when none.
	Key        string
	Body       []byte
	Attributes map[string]string // user fields, without the context
	Context    Context
	Valid      bool // the entry carries a Sluice failure context
}

// String is a one-line summary for the console.
func (e Entry) String() string {
	c := e.Context
	return fmt.Sprintf("%s src=%s reason=%s attempts=%d class=%s msg=%q version=%s failed=%s redrives=%d",
		e.ID, c.Source, c.Reason, c.Attempts, c.ErrorClass, c.ErrorMessage, c.Version,
		c.FailedAt.Format(time.RFC3339), c.Redrives)
}
