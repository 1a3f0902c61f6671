package engine

import "time"

// Dead-letter reasons, recorded on every dead-lettered message. The AMQP
// front-end maps them to x-death reasons (rejected, expired, maxlen,
// delivery_limit).
const (
	ReasonMaxReceives   = "max_receives"   // receive count reached maxReceiveCount (SQS)
	ReasonTerminal      = "terminal"       // the consumer reported a terminal failure / rejected it
	ReasonExpired       = "expired"        // a message TTL ran out (AMQP)
	ReasonQueueFull     = "maxlen"         // dropped from a full queue (AMQP x-max-length)
	ReasonDeliveryLimit = "delivery_limit" // delivery limit reached on a failure (AMQP)
	ReasonConsumerCrash = "consumer_crash" // deliveries ended without a verdict too often (crash loop)
	// ReasonTargetFull is recorded on a drop (never on a dead letter):
	// the dead-letter target was full and its overflow refuses messages.
	ReasonTargetFull = "target_full"
)

// Limits on consumer-reported failure context, so context can never push a
// message past a size limit. Longer values are truncated, not refused.
const (
	MaxErrorClass = 256
	MaxErrorText  = 1024
	MaxTrace      = 16 << 10
	MaxConsumerID = 256
)

// Failure is a consumer's report that processing a delivery failed.
type Failure struct {
	ErrorClass      string // e.g. "TimeoutError", "KeyError"
	Message         string // truncated to MaxErrorText
	Trace           string // stack trace or a pointer to it; truncated to MaxTrace
	ConsumerID      string
	ConsumerVersion string
	// Terminal failures skip the remaining retries: the message is
	// dead-lettered now (ReasonTerminal).
	Terminal bool
	// RetryAfter, when set, is the earliest redelivery, overriding the
	// queue's retry policy.
	RetryAfter    time.Duration
	RetryAfterSet bool
}

// FailureRecord is the last failure reported for a message.
type FailureRecord struct {
	ErrorClass      string
	Message         string
	Trace           string
	ConsumerID      string
	ConsumerVersion string
	ReportedAt      time.Time
	Attempt         int // the receive count when it was reported
}

// DeadLetterInfo is why and when a message was dead-lettered. It is kept
// with the message in its dead-letter queue and is never part of its user
// attributes (SQS clients check their MD5).
type DeadLetterInfo struct {
	SourceQueue    string
	Reason         string // one of the Reason constants
	Attempts       int    // receive count when it was dead-lettered
	FirstReceiveAt time.Time
	LastReceiveAt  time.Time
	DeadLetteredAt time.Time
}

// RedriveInfo is carried by a message that a redrive (move task) put back
// into service: the move creates a new message, so the original id is kept
// here.
type RedriveInfo struct {
	OriginalMessageID string
	Count             int    // how many times this message has been redriven
	TaskID            string // the task that moved it last
	At                time.Time
}

// Retry strategies for RetryPolicy.
const (
	RetryFullJitter   = "full-jitter"  // uniform(0, min(cap, base·2^(n-1)))
	RetryDecorrelated = "decorrelated" // min(cap, uniform(base, prev·3))
	RetryExponential  = "exponential"  // min(cap, base·2^(n-1))
	RetryFixed        = "fixed"        // base
)

// RetryPolicy is broker-side backoff: after a failure report or an ended
// lease, a message becomes visible again only after a delay that grows
// with its receive count, instead of at once. The jitter is drawn from the
// message id and attempt number, so it is random across messages but the
// same on every replay of the same history.
type RetryPolicy struct {
	Strategy string
	Base     time.Duration // > 0
	Cap      time.Duration // >= Base; required: an uncapped backoff is refused
}

// Backoff returns the delay before attempt n+1 (n >= 1) for the message
// with the given id.
func (p *RetryPolicy) Backoff(id [16]byte, n int) time.Duration {
	return backoff(p, id, n)
}

// View is a message as the admin API sees it: everything a Delivery has,
// plus its state, without changing anything (browse does not count as a
// receive).
type View struct {
	Delivery
	State        string    // "visible", "inflight", "delayed"
	VisibleAt    time.Time // end of the delay or lease; zero when visible
	LastReceived time.Time
	DeadLetter   *DeadLetterInfo
	LastFailure  *FailureRecord
	Redrive      *RedriveInfo

	cursor uint64 // position in the queue, for paging
}

// Filter selects messages for browse, delete, export and redrive. Zero
// fields match everything.
type Filter struct {
	SentAfter, SentBefore time.Time // original send time range
	Reason                string    // dead-letter reason
	ErrorClass            string    // last reported error class
	SourceQueue           string    // queue it was dead-lettered from
	AttributeName         string    // a user attribute that must be present…
	AttributeValue        string    // …with this string value, when not empty
	MessageIDs            []string  // only these ids
}

// Browse pages: messages come in queue order; pass the returned cursor to
// get the next page. Cursor 0 starts at the beginning.
type Page struct {
	Messages []View
	Next     uint64 // 0 when there are no more
}
