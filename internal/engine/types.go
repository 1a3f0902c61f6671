package engine

import (
	"time"
)

// DedupScope says where FIFO deduplication ids must be unique.
type DedupScope uint8

// Deduplication scopes.
const (
	DedupScopeQueue        DedupScope = 0 // ids are unique across the queue (SQS default)
	DedupScopeMessageGroup DedupScope = 1 // ids are unique within a message group
)

// DeadLetterPolicy moves a message to Target once it has been received
// MaxReceiveCount times (SQS RedrivePolicy). The move happens when a receive
// reaches a message whose receive count is already >= MaxReceiveCount: the
// message is moved instead of returned (SQS reference §8.2). Visibility
// expiry alone never moves a message.
//
// With Routed, the engine asks Options.DeadLetterRouter for the targets
// instead of using Target (AMQP dead-letter exchanges route through
// bindings, possibly to several queues). MaxReceiveCount 0 means no receive
// limit: messages are dead-lettered only when rejected, expired or dropped
// by a length limit.
type DeadLetterPolicy struct {
	Target          string // name of the dead-letter queue (unless Routed)
	MaxReceiveCount int    // 0–1000; SQS requires 1–1000
	Routed          bool
	// RoutedElsewhere marks a Routed queue whose router is not this
	// engine's (an AMQP queue with a dead-letter exchange placed on a
	// cluster shard other than shard 0): with Options.RouteElsewhere its
	// dead letters are route transfers (routed.go); without, this
	// engine's router routes them as any Routed queue's.
	RoutedElsewhere bool
}

// RedriveAllowPolicy limits which source queues may name this queue as their
// dead-letter queue.
type RedriveAllowPolicy struct {
	Permission   string   // "allowAll", "denyAll" or "byQueue"
	SourceQueues []string // queue names, for byQueue
}

// QueueConfig is a queue's settings. Durations are whole seconds on the SQS
// wire; the engine keeps time.Duration.
type QueueConfig struct {
	FIFO                bool
	ContentBasedDedup   bool       // FIFO: SHA-256 of the body is the dedup id
	DedupScope          DedupScope // FIFO
	FifoThroughputLimit string     // FIFO: "perQueue" or "perMessageGroupId"; recorded, no effect

	Delay          time.Duration // delay of every new message (0–15 min)
	MaxMessageSize int           // bytes of body plus attributes
	Retention      time.Duration // messages older than this (from their send time) are removed
	ReceiveWait    time.Duration // default long-poll wait
	Visibility     time.Duration // default visibility timeout

	DeadLetter   *DeadLetterPolicy   // nil: no dead-letter queue
	RedriveAllow *RedriveAllowPolicy // nil: allowAll
	Retry        *RetryPolicy        // nil: SQS behaviour (visible again when the lease ends)

	// Length limits count ready (visible or delayed) messages, not those
	// in flight, as RabbitMQ does. 0: unlimited. Overflow says what a
	// send into a full queue does (OverflowDropHead by default).
	MaxLength      int
	MaxLengthBytes int64
	Overflow       string

	// MessageTTL, when HasMessageTTL, expires every message that long
	// after it entered the queue; a message's own TTL may be shorter.
	// Expired messages are dead-lettered (ReasonExpired) when the queue
	// has a dead-letter policy, and dropped (counted) otherwise. A message
	// in flight expires when its lease ends.
	MessageTTL    time.Duration
	HasMessageTTL bool

	// Requeue says where a failed delivery returned for another try goes
	// (AMQP basic.nack/basic.reject with requeue, and deliveries that end
	// without a verdict): RequeueHead ("", RabbitMQ's behaviour),
	// RequeueTail or RequeueDelayed. See Engine.Nack.
	Requeue string

	// CrashLimit, when > 0, quarantines crash loops: a message whose
	// deliveries ended without any verdict (a lost connection, a consumer
	// timeout, a lease that expired with no failure report) CrashLimit
	// times within CrashWindow is dead-lettered with ReasonConsumerCrash.
	// This count is kept apart from the receive count. 0: off.
	CrashLimit  int
	CrashWindow time.Duration

	// RetryBudgetPercent, when > 0, caps redeliveries caused by
	// failures (nack/reject with requeue, deliveries that ended without a
	// verdict, SQS leases that ran out) at that percentage of first
	// deliveries over a sliding window (DLQ-40); retries over it are
	// delayed, never dropped. 0: no budget.
	RetryBudgetPercent int

	// UnknownFailure says what a plain failure without a class means
	// (AMQP nack/reject with requeue=true): UnknownRetry ("", retry
	// within the delivery limit) or UnknownDeadLetter (terminal: it is
	// dead-lettered at once when the queue has a target). DLQ-20.
	UnknownFailure string

	// Paused holds delivery: receives return nothing (long polls wait)
	// while messages stay visible, counted and settable as usual. An
	// operator's first move in an incident (DLQ-41); see
	// Engine.SetPaused.
	Paused bool

	// MaxPriority, when > 0, makes a standard queue a priority queue
	// (AMQP x-max-priority, 1–255): within each message group its ready
	// messages are delivered highest Message.Priority first, a priority
	// above MaxPriority counting as MaxPriority, and in arrival order
	// within one priority, behind a backlog deeper than the ready window
	// too (priority.go gives the bounds). 0: arrival order. FIFO queues
	// ignore it. It cannot change after the queue is created.
	MaxPriority int

	// Extra holds protocol-specific queue attributes that the engine stores
	// and returns but does not interpret (for SQS: Policy, KmsMasterKeyId,
	// KmsDataKeyReusePeriodSeconds, SqsManagedSseEnabled). Keys and values
	// are the front-end's business.
	Extra map[string]string
}

// Overflow behaviours for a queue at its length limit (AMQP x-overflow).
const (
	OverflowDropHead         = "drop-head"          // the oldest ready message is dead-lettered or dropped
	OverflowRejectPublish    = "reject-publish"     // the send fails with ErrQueueFull
	OverflowRejectPublishDLX = "reject-publish-dlx" // the send fails and the new message is dead-lettered
)

// DefaultQueueConfig returns the SQS defaults for a new standard queue.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{
		MaxMessageSize: 1 << 20,
		Retention:      4 * 24 * time.Hour,
		Visibility:     30 * time.Second,
	}
}

// QueueInfo is a snapshot of a queue's settings and counters.
type QueueInfo struct {
	Name       string
	Config     QueueConfig
	Tags       map[string]string
	CreatedAt  time.Time
	ModifiedAt time.Time

	Visible  int // ready to be received now (ApproximateNumberOfMessages)
	InFlight int // received and not yet deleted or expired (…NotVisible)
	Delayed  int // not yet visible because of a delay (…Delayed)

	// OldestSentAt is the send time of the oldest message in the queue in
	// any state; zero when the queue is empty.
	OldestSentAt time.Time

	// Counters since the broker started (not persisted). Redelivered
	// counts receives of messages received before.
	Sent, Received, Redelivered, Deleted, DeadLettered, Expired uint64
	// Dropped counts messages that had to be dead-lettered (rejected,
	// expired, over a length limit) but had no target.
	Dropped uint64

	// Waiting counts the receives parked on the queue now, waiting for a
	// message to become visible: SQS long polls (WaitTimeSeconds > 0) and
	// AMQP consumers with prefetch credit left. A receive counts from its
	// first wait until it returns, including time it spends waiting for
	// its store view's lease (store.Leaser) rather than for a message, as
	// a cluster leader under load can for a moment. Consumers busy with what they hold are
	// not counted, so 0 with a backlog means every consumer is busy or
	// there is none; more than 0 with visible messages means the queue
	// cannot hand them out (paused, or a FIFO queue whose groups are all
	// in flight).
	Waiting int
}

// Attribute is one user message attribute (SQS MessageAttributes; AMQP
// headers map onto these). DataType is "String", "Number" or "Binary",
// optionally with a ".suffix". String and Number use StringValue, Binary
// uses BinaryValue.
type Attribute struct {
	Name        string
	DataType    string
	StringValue string
	BinaryValue []byte
}

// Message is what a producer sends.
type Message struct {
	// Body is kept by the engine as given (front-ends must not modify it
	// after Send), unless BodyBorrowed.
	Body []byte
	// BodyBorrowed says Body is lent for the duration of Send only (it
	// points into a request buffer): the engine keeps its own copy. It
	// costs no extra copy for bodies of a few hundred bytes or more, which
	// the engine keeps as a slice of the content record it writes anyway.
	BodyBorrowed bool
	Attributes   []Attribute // user attributes, at most 10 on SQS; kept in the order given

	// TraceHeader is the AWSTraceHeader system attribute ("" when absent).
	TraceHeader string
	// SenderID identifies the sending principal (SQS SenderId).
	SenderID string

	GroupID string // FIFO: required; standard: optional (fair queues)
	DedupID string // FIFO: required unless the queue has content-based dedup

	// Delay overrides the queue's delay when DelaySet is true. FIFO queues
	// reject a per-message delay other than 0.
	Delay    time.Duration
	DelaySet bool

	// TTL, when TTLSet, expires the message that long after it entered
	// the queue (the smaller of it and the queue's MessageTTL wins).
	TTL    time.Duration
	TTLSet bool

	// Envelope is protocol metadata the engine stores and returns
	// unchanged (the AMQP front-end keeps a message's properties here). It
	// counts towards the message's size.
	Envelope []byte

	// BodyMD5, when BodyMD5Set, is the MD5 of Body as the front-end
	// computed it at send. The engine stores it with the message and
	// returns it in every Delivery, so a protocol that reports the
	// digest on receive (SQS MD5OfBody) need not hash the body again.
	// The engine does not check it: a front-end that sets it must set
	// md5.Sum(Body).
	BodyMD5    [16]byte
	BodyMD5Set bool

	// Priority is the message's priority (AMQP basic.properties
	// priority), kept with it through dead-letter moves and redrives. A
	// queue orders by it only when it has a MaxPriority.
	Priority uint8
}

// Size is the message's size as SQS counts it against MaximumMessageSize:
// the body plus each attribute's name, data type and value.
func (m *Message) Size() int {
	n := len(m.Body)
	for _, a := range m.Attributes {
		n += len(a.Name) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return n + len(m.Envelope)
}

// SendResult is the outcome of one message of a Send.
type SendResult struct {
	MessageID string
	// SequenceNumber is set on FIFO queues: a decimal string that grows with
	// every message sent to the queue.
	SequenceNumber string
	// Err is the entry's failure (one of the Err* values, possibly wrapped)
	// or nil. A failed entry is not stored; other entries are unaffected.
	Err error
}

// ReceiveRequest asks for messages.
type ReceiveRequest struct {
	Max int // 1–10

	// Visibility overrides the queue's visibility timeout when VisibilitySet.
	Visibility    time.Duration
	VisibilitySet bool

	// Wait is the long-poll time when WaitSet; otherwise the queue's
	// ReceiveWait. A receive returns as soon as at least one message is
	// available, or when the wait ends, or when ctx is done.
	Wait    time.Duration
	WaitSet bool

	// AttemptID (FIFO ReceiveRequestAttemptId): a retry with the same id
	// within 5 minutes returns the same messages and receipt handles, as
	// long as none of them was deleted or had its visibility changed.
	AttemptID string

	// OnTake, if set, is called with the number of messages a receive
	// takes, under the queue's lock, before Receive returns them. A
	// front-end that counts messages taken but not yet handed to its
	// client does so here, so that GetQueue (which takes the same lock)
	// never sees a message neither visible nor counted. It must not call
	// the engine.
	OnTake func(n int)

	// Session marks the leases as a connection's (AMQP deliveries, whose
	// connection requeues them when it closes) rather than a visibility
	// timeout's (SQS): the engine that granted them is the only one that
	// can see them settled, so after a restart or a failover they end at
	// once, on every queue, keeping the receive count and with no retry
	// backoff, as RabbitMQ requeues a dead connection's unacknowledged
	// messages. SQS leases run their course, as in SQS.
	Session bool

	// Reuse, when its capacity suffices, is the array Receive returns
	// the deliveries in, instead of a new one: a consumer that receives
	// in a loop passes back the slice it is done with (cleared, so that
	// it holds no bodies). The caller must not read or write it until
	// Receive has returned. Not used with an AttemptID (whose deliveries
	// the engine keeps for the attempt's retries).
	Reuse []Delivery
}

// Delivery is one received message.
type Delivery struct {
	MessageID     string
	ReceiptHandle string
	Body          []byte
	Attributes    []Attribute

	TraceHeader    string
	SenderID       string
	SentAt         time.Time
	FirstReceiveAt time.Time
	ReceiveCount   int // includes this receive; carries over into a DLQ

	GroupID        string
	DedupID        string
	SequenceNumber string // FIFO only

	// DeadLetterSource is the name of the queue the message was
	// dead-lettered from ("" for messages that were sent here).
	DeadLetterSource string

	// Envelope is the protocol metadata given at send (read-only).
	Envelope []byte
	// Redelivered reports that the message was handed out before.
	Redelivered bool

	// BodyMD5 is Message.BodyMD5 of the send, when BodyMD5Set. It is
	// not set for messages sent without one (AMQP publishes, imports,
	// and messages stored before the digest was kept): compute it then.
	BodyMD5    [16]byte
	BodyMD5Set bool

	// Priority is the priority it was sent with (Message.Priority).
	Priority uint8

	// Failure context, when present (read-only, shared with the engine).
	DeadLetter  *DeadLetterInfo
	LastFailure *FailureRecord
	Redrive     *RedriveInfo
}

// VisibilityChange is one entry of ChangeVisibility.
type VisibilityChange struct {
	ReceiptHandle string
	Timeout       time.Duration
}

// Limits the engine enforces.
const (
	MaxBatch      = 10
	MaxVisibility = 12 * time.Hour
	MaxDelay      = 15 * time.Minute
	MaxWait       = 20 * time.Second
	MinRetention  = time.Minute
	MaxRetention  = 14 * 24 * time.Hour // SQS's MessageRetentionPeriod maximum
	// MaxExtendedRetention is the longest retention Sluice's own setting
	// allows (SluiceRetentionPeriod): a dead-letter queue may keep its
	// messages for the 30 days triage can take (DLQ-80).
	MaxExtendedRetention = 30 * 24 * time.Hour
	MinMaxMessageSize    = 1024
	// MaxMaxMessageSize is SQS's largest MaximumMessageSize (1 MiB): the
	// SQS front-end's limit. The engine itself accepts queues with a
	// MaxMessageSize up to MaxStoredMessageSize (AMQP queues, whose limit
	// is the AMQP front-end's, RabbitMQ's 16 MiB by default).
	MaxMaxMessageSize    = 1 << 20
	MaxStoredMessageSize = 512 << 20 // RabbitMQ's hard limit
	DedupWindow          = 5 * time.Minute
	AttemptIDWindow      = 5 * time.Minute
	NameReuseDelay       = 60 * time.Second
	PurgeInterval        = 60 * time.Second
	MaxInFlight          = 120000
	MaxTags              = 50
	// MaxPriority is the largest QueueConfig.MaxPriority (RabbitMQ's).
	MaxPriority = 255
)
