package api

import "time"

// Prefix is the path under which the broker serves this API.
const Prefix = "/sluice/v1/"

// Browse page sizes: a browse without a limit returns DefaultPageSize
// messages; a limit above MaxPageSize is refused.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// MaxRedriveRate is the highest rate a redrive accepts, in messages per
// second (SQS's ceiling; a request's rate 0 means the default, 50).
const MaxRedriveRate = 500

// Why a message was dead-lettered: the values of DeadLetterInfo.Reason and
// of a reason filter. SQS queues use ReasonMaxReceives and ReasonTerminal;
// AMQP queues also the others.
const (
	ReasonMaxReceives   = "max_receives"
	ReasonTerminal      = "terminal"
	ReasonExpired       = "expired"
	ReasonQueueFull     = "maxlen"
	ReasonDeliveryLimit = "delivery_limit"
)

// DeadLetterReasons are the values of a reason filter, in the order the
// CLI lists them.
func DeadLetterReasons() []string {
	return []string{ReasonMaxReceives, ReasonTerminal, ReasonExpired, ReasonQueueFull, ReasonDeliveryLimit}
}

// The states of a redrive task (Task.Status).
const (
	TaskRunning    = "RUNNING"
	TaskCompleted  = "COMPLETED"
	TaskCancelling = "CANCELLING"
	TaskCancelled  = "CANCELLED"
	TaskFailed     = "FAILED"
	TaskPaused     = "PAUSED"
)

// Queue is one queue as GET /queues and GET /queues/{name} return it.
type Queue struct {
	Name     string `json:"name"`
	FIFO     bool   `json:"fifo"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"inflight"`
	Delayed  int    `json:"delayed"`
	// Waiting counts the receives parked on the queue now, waiting for a
	// message: SQS long polls and AMQP consumers with prefetch credit left.
	Waiting int `json:"waiting"`
	// OldestAgeSeconds is the age of the oldest message in any state,
	// counted from its original send time; 0 when the queue is empty.
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	// DeadLetterQueue and MaxReceiveCount are the queue's own dead-letter
	// policy ("" and 0 without one).
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount,omitempty"`
	// IsDeadLetterQueue is true when at least one queue names this one as
	// its dead-letter queue; Sources lists those queues, sorted.
	IsDeadLetterQueue bool         `json:"isDeadLetterQueue"`
	Sources           []string     `json:"sources"`
	Counters          Counters     `json:"counters"`
	RetryPolicy       *RetryPolicy `json:"retryPolicy,omitempty"`
	// Paused is true while delivery is held (POST …/pause, DLQ-41).
	Paused bool `json:"paused"`

	// Only on GET /queues/{name}.
	Config     *QueueConfig      `json:"config,omitempty"`
	Tags       map[string]string `json:"tags,omitempty"`
	CreatedAt  *time.Time        `json:"createdAt,omitempty"`
	ModifiedAt *time.Time        `json:"modifiedAt,omitempty"`
}

// Depth is every message in the queue, whatever its state.
func (q *Queue) Depth() int { return q.Visible + q.InFlight + q.Delayed }

// Counters count events since the broker started; they are not persisted.
type Counters struct {
	Sent         uint64 `json:"sent"`
	Received     uint64 `json:"received"`
	Redelivered  uint64 `json:"redelivered"`
	Deleted      uint64 `json:"deleted"`
	DeadLettered uint64 `json:"deadLettered"`
	Expired      uint64 `json:"expired"`
}

// RetryPolicy is the queue's broker-side backoff.
type RetryPolicy struct {
	Strategy    string  `json:"strategy"`
	BaseSeconds float64 `json:"baseSeconds"`
	CapSeconds  float64 `json:"capSeconds"`
}

// QueueConfig is a queue's full configuration.
type QueueConfig struct {
	FIFO                bool                `json:"fifo"`
	ContentBasedDedup   bool                `json:"contentBasedDeduplication,omitempty"`
	DedupScope          string              `json:"deduplicationScope,omitempty"`
	FifoThroughputLimit string              `json:"fifoThroughputLimit,omitempty"`
	DelaySeconds        float64             `json:"delaySeconds"`
	MaxMessageSize      int                 `json:"maxMessageSize"`
	RetentionSeconds    float64             `json:"retentionSeconds"`
	ReceiveWaitSeconds  float64             `json:"receiveWaitSeconds"`
	VisibilitySeconds   float64             `json:"visibilityTimeoutSeconds"`
	DeadLetter          *DeadLetterPolicy   `json:"deadLetter,omitempty"`
	RedriveAllow        *RedriveAllowPolicy `json:"redriveAllow,omitempty"`
	Retry               *RetryPolicy        `json:"retry,omitempty"`
	Extra               map[string]string   `json:"extra,omitempty"`
}

// DeadLetterPolicy names the queue's dead-letter queue.
type DeadLetterPolicy struct {
	Target          string `json:"target"`
	MaxReceiveCount int    `json:"maxReceiveCount"`
}

// RedriveAllowPolicy limits which queues may use this one as their DLQ.
type RedriveAllowPolicy struct {
	Permission   string   `json:"permission"`
	SourceQueues []string `json:"sourceQueues,omitempty"`
}

// Message is one message as browse, show, export and the dry-run sample
// return it, and as import accepts it (one per JSONL line).
//
// Body is the body as a string when it is valid UTF-8; otherwise it is
// base64 and BodyEncoding is "base64". Import reads State, VisibleAt and
// LastReceivedAt but ignores them: an imported message is visible at once.
//
// Priority and Envelope carry what an AMQP publish adds to a message (its
// priority property; its exchange, routing keys and basic properties), so
// that an exported AMQP message imported elsewhere is delivered as it was
// published. Import checks an envelope before storing anything.
type Message struct {
	ID             string      `json:"id"`
	Body           string      `json:"body"`
	BodyEncoding   string      `json:"bodyEncoding,omitempty"`
	Attributes     []Attribute `json:"attributes,omitempty"`
	TraceHeader    string      `json:"traceHeader,omitempty"`
	SenderID       string      `json:"senderId,omitempty"`
	SentAt         *time.Time  `json:"sentAt,omitempty"`
	FirstReceiveAt *time.Time  `json:"firstReceiveAt,omitempty"`
	ReceiveCount   int         `json:"receiveCount"`
	GroupID        string      `json:"groupId,omitempty"`
	DedupID        string      `json:"dedupId,omitempty"`
	SequenceNumber string      `json:"sequenceNumber,omitempty"`
	State          string      `json:"state,omitempty"`
	VisibleAt      *time.Time  `json:"visibleAt,omitempty"`
	LastReceivedAt *time.Time  `json:"lastReceivedAt,omitempty"`
	// DeadLetterSource is the queue the message was dead-lettered from.
	DeadLetterSource string          `json:"deadLetterSource,omitempty"`
	DeadLetter       *DeadLetterInfo `json:"deadLetter,omitempty"`
	LastFailure      *FailureRecord  `json:"lastFailure,omitempty"`
	Redrive          *RedriveInfo    `json:"redrive,omitempty"`
	// Priority is the message's priority, 0 to 255 (0: none).
	Priority int `json:"priority,omitempty"`
	// Envelope is the protocol metadata the message was sent with, opaque
	// (base64 in JSON); absent for a message sent over SQS.
	Envelope []byte `json:"envelope,omitempty"`
}

// Attribute is a user message attribute. BinaryValue is base64 in JSON.
type Attribute struct {
	Name        string `json:"name"`
	DataType    string `json:"dataType"`
	StringValue string `json:"stringValue,omitempty"`
	BinaryValue []byte `json:"binaryValue,omitempty"`
}

// DeadLetterInfo says why and when a message was dead-lettered.
type DeadLetterInfo struct {
	SourceQueue    string     `json:"sourceQueue"`
	Reason         string     `json:"reason"`
	Attempts       int        `json:"attempts"`
	FirstReceiveAt *time.Time `json:"firstReceiveAt,omitempty"`
	LastReceiveAt  *time.Time `json:"lastReceiveAt,omitempty"`
	DeadLetteredAt *time.Time `json:"deadLetteredAt,omitempty"`
}

// FailureRecord is the last failure a consumer reported for the message.
type FailureRecord struct {
	ErrorClass      string     `json:"errorClass,omitempty"`
	Message         string     `json:"message,omitempty"`
	Trace           string     `json:"trace,omitempty"`
	ConsumerID      string     `json:"consumerId,omitempty"`
	ConsumerVersion string     `json:"consumerVersion,omitempty"`
	ReportedAt      *time.Time `json:"reportedAt,omitempty"`
	Attempt         int        `json:"attempt"`
}

// RedriveInfo is carried by a message a redrive put back into service.
type RedriveInfo struct {
	OriginalMessageID string     `json:"originalMessageId"`
	Count             int        `json:"count"`
	TaskID            string     `json:"taskId,omitempty"`
	At                *time.Time `json:"at,omitempty"`
}

// Page is a browse result. Next, when not empty, is the cursor of the next
// page; it is opaque to clients.
type Page struct {
	Messages []Message `json:"messages"`
	Next     string    `json:"next,omitempty"`
}

// Filter selects messages in request bodies (delete, redrive) and in task
// JSON. The zero Filter matches every message. The same selection is
// written as query parameters on browse and export (see parseFilterQuery).
type Filter struct {
	Reason      string           `json:"reason,omitempty"`
	ErrorClass  string           `json:"errorClass,omitempty"`
	SourceQueue string           `json:"sourceQueue,omitempty"`
	SentAfter   *time.Time       `json:"sentAfter,omitempty"`
	SentBefore  *time.Time       `json:"sentBefore,omitempty"`
	Attribute   *AttributeFilter `json:"attribute,omitempty"`
	IDs         []string         `json:"ids,omitempty"`
}

// AttributeFilter matches messages that have the named user attribute,
// with the given string value when Value is not empty.
type AttributeFilter struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// IsZero reports whether f selects every message.
func (f *Filter) IsZero() bool {
	return f.Reason == "" && f.ErrorClass == "" && f.SourceQueue == "" && f.SentAfter == nil &&
		f.SentBefore == nil && f.Attribute == nil && len(f.IDs) == 0
}

// DeleteRequest is the body of POST /queues/{name}/messages:delete. An
// empty filter is refused unless All is true; All with a filter is refused
// too, so that the request says exactly one thing.
type DeleteRequest struct {
	Filter Filter `json:"filter"`
	All    bool   `json:"all,omitempty"`
}

// DeleteResult answers the deletes.
type DeleteResult struct {
	Deleted int `json:"deleted"`
}

// ImportResult answers POST /queues/{name}/import.
type ImportResult struct {
	Imported int `json:"imported"`
}

// RedriveRequest is the body of POST /queues/{name}/redrive. Rate,
// SafetyWindowSeconds and SafetyThreshold of 0 (or absent) take the
// engine's defaults.
type RedriveRequest struct {
	// Destination names the queue to move to; absent: each message goes
	// back to the queue it was dead-lettered from. An empty string is
	// refused (400 InvalidRequest).
	Destination         string  `json:"destination,omitempty"`
	Rate                int     `json:"rate,omitempty"`
	Filter              Filter  `json:"filter"`
	DryRun              bool    `json:"dryRun,omitempty"`
	SafetyWindowSeconds float64 `json:"safetyWindowSeconds,omitempty"`
	SafetyThreshold     int     `json:"safetyThreshold,omitempty"`
}

// DryRun is what a redrive would do. ByDestination counts messages per
// destination queue; Sample is the first few messages that would move.
type DryRun struct {
	DryRun        bool           `json:"dryRun"`
	Total         int            `json:"total"`
	ByDestination map[string]int `json:"byDestination"`
	Sample        []Message      `json:"sample"`
}

// Task is a redrive (move task). Destination is "" when messages return to
// the queues they were dead-lettered from.
type Task struct {
	ID              string   `json:"id"`
	Source          string   `json:"source"`
	Destination     string   `json:"destination,omitempty"`
	Rate            int      `json:"rate"`
	Status          string   `json:"status"`
	Moved           int      `json:"moved"`
	ToMove          int      `json:"toMove"`
	Returned        int      `json:"returned"`
	ReturnedClasses []string `json:"returnedClasses"`
	FailureReason   string   `json:"failureReason,omitempty"`
	// StopRule names the safety rule that paused the task: "returned"
	// (redriven messages came back within the safety window) or "refill"
	// (the DLQ refilled faster than the task drained it).
	StopRule            string     `json:"stopRule,omitempty"`
	Refilled            int        `json:"refilled"`
	StartedAt           *time.Time `json:"startedAt,omitempty"`
	UpdatedAt           *time.Time `json:"updatedAt,omitempty"`
	Filter              *Filter    `json:"filter,omitempty"`
	SafetyWindowSeconds float64    `json:"safetyWindowSeconds"`
	SafetyThreshold     int        `json:"safetyThreshold"`
}

// Finished reports whether the task will make no more progress on its own:
// COMPLETED, CANCELLED, FAILED, or PAUSED (which waits for an operator).
func (t Task) Finished() bool {
	switch t.Status {
	case TaskRunning, TaskCancelling:
		return false
	}
	return true
}

// TaskList answers GET /tasks.
type TaskList struct {
	Tasks []Task `json:"tasks"`
}

// QueueList answers GET /queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// FailureReport is the body of POST /failures. Exactly one of QueueURL
// and Queue names the queue (both are accepted when they agree); the
// queue name is the URL's last path segment.
type FailureReport struct {
	QueueURL        string `json:"queueUrl,omitempty"`
	Queue           string `json:"queue,omitempty"`
	ReceiptHandle   string `json:"receiptHandle"`
	ErrorClass      string `json:"errorClass,omitempty"`
	ErrorMessage    string `json:"errorMessage,omitempty"`
	Trace           string `json:"trace,omitempty"`
	ConsumerID      string `json:"consumerId,omitempty"`
	ConsumerVersion string `json:"consumerVersion,omitempty"`
	// Terminal is always sent (false too): the worker SDK has always
	// written it, and wire_test.go pins its bytes.
	Terminal          bool     `json:"terminal"`
	RetryAfterSeconds *float64 `json:"retryAfterSeconds,omitempty"`
}

// FailureOutcome answers POST /failures: either the message was
// dead-lettered into Target, or it will be delivered again at VisibleAt.
type FailureOutcome struct {
	DeadLettered bool       `json:"deadLettered"`
	Target       string     `json:"target,omitempty"`
	VisibleAt    *time.Time `json:"visibleAt,omitempty"`
}

// ErrorBody is every error response: {"error": {"code": …, "message": …}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine-readable code and a message for humans.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CreateQueueRequest is the body of PUT /sluice/v1/queues/{name}. Every
// field is optional.
type CreateQueueRequest struct {
	FIFO bool `json:"fifo,omitempty"`
	// VisibilityTimeoutSeconds: 0 or absent is 30.
	VisibilityTimeoutSeconds int `json:"visibilityTimeoutSeconds,omitempty"`
	// DeadLetterQueue: absent or true creates the queue's own DLQ,
	// "<name>-dlq" ("<base>-dlq.fifo" for FIFO), with a 14-day retention
	// and the queue's owner (DLQ-62, DLQ-80); false opts out (a warning
	// says so).
	DeadLetterQueue *bool `json:"deadLetterQueue,omitempty"`
	// MaxReceiveCount: 0 or absent is 5 (DLQ-02).
	MaxReceiveCount int `json:"maxReceiveCount,omitempty"`
	// Owner is the team that triages the DLQ: the "owner" tag of both.
	Owner string            `json:"owner,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
}

// CreateQueueResponse is the answer: the queue, its DLQ (absent when
// opted out) and the configuration checks that are not green (DLQ-151).
type CreateQueueResponse struct {
	Queue           Queue     `json:"queue"`
	DeadLetterQueue *Queue    `json:"deadLetterQueue,omitempty"`
	Warnings        []Finding `json:"warnings"`
}

// Finding is one configuration check of a queue, as the broker's advisor
// reports it. Verdict is "green", "yellow" or "red"; Fix names the change
// that resolves a yellow or red finding and is empty on green ones.
type Finding struct {
	Queue   string `json:"queue"`
	Check   string `json:"check"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Fix     string `json:"fix,omitempty"`
}
