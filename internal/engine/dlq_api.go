package engine

import (
	"errors"
	"time"
)

// Errors of the dead-letter operations.
var (
	// ErrNoDeadLetterQueue: a terminal failure was reported on a queue
	// without a dead-letter queue. The message is left as it was: Sluice
	// does not drop a message because a consumer gave up on it.
	ErrNoDeadLetterQueue = errors.New("engine: queue has no dead-letter queue")
	// ErrNotDeadLetterQueue: a move task's source is not any queue's
	// dead-letter queue.
	ErrNotDeadLetterQueue = errors.New("engine: source queue must be configured as a dead-letter queue")
	// ErrDestinationNotFound: a move task's destination does not exist.
	ErrDestinationNotFound = errors.New("engine: destination queue does not exist")
	// ErrTaskRunning: the source already has an active move task.
	ErrTaskRunning = errors.New("engine: there is already a task running for this source queue")
	// ErrTaskNotFound: no move task has that id.
	ErrTaskNotFound = errors.New("engine: task does not exist")
	// ErrTaskNotRunning: cancel or pause of a task that is not running
	// (or resume of one that is not paused).
	ErrTaskNotRunning = errors.New("engine: task is not in a state that allows this")
)

// Move task statuses. PAUSED is Sluice's own: a task stopped by its safety
// check (or by an operator) that can be resumed or cancelled.
const (
	TaskRunning    = "RUNNING"
	TaskCompleted  = "COMPLETED"
	TaskCancelling = "CANCELLING"
	TaskCancelled  = "CANCELLED"
	TaskFailed     = "FAILED"
	TaskPaused     = "PAUSED"
)

// Move task defaults and limits.
const (
	DefaultMoveRate        = 50  // messages per second when none is given
	MaxMoveRate            = 500 // SQS's ceiling
	DefaultSafetyWindow    = 30 * time.Second
	DefaultSafetyThreshold = 3
	MaxMoveTaskDuration    = 36 * time.Hour
	MoveTasksKeptPerSource = 10
	moveTaskSampleSize     = 10
)

// MoveTaskSpec starts a redrive: messages of Source (a dead-letter queue)
// move, oldest first, at a limited rate, to Destination, or when it is
// empty to the queue each came from. Each moved message is a new message
// (new MessageId, fresh receive count) at the back of its destination, and
// keeps its history in RedriveInfo.
type MoveTaskSpec struct {
	Source      string
	Destination string
	Rate        int  // messages per second, 1–MaxMoveRate; 0: DefaultMoveRate
	RateSet     bool // the caller chose Rate (SQS lists it only then)
	Filter      Filter
	// The safety stop: when SafetyThreshold messages moved by this task
	// are dead-lettered again within SafetyWindow of their move, the task
	// pauses and says why (a redrive before the fix cannot loop).
	SafetyWindow    time.Duration // 0: DefaultSafetyWindow
	SafetyThreshold int           // 0: DefaultSafetyThreshold; negative: no safety stop
}

// MoveTask is a move task's state.
type MoveTask struct {
	ID          string
	Source      string
	Destination string // "" when messages return to their sources
	Rate        int
	RateSet     bool
	Filter      Filter
	Status      string
	Moved       int // messages moved so far
	ToMove      int // fixed when the task starts
	Returned    int // moved messages that came back to the DLQ within the safety window
	// FailureReason says why a task FAILED or was PAUSED.
	FailureReason   string
	ReturnedClasses []string // error classes of the messages that came back
	StartedAt       time.Time
	UpdatedAt       time.Time
	SafetyWindow    time.Duration
	SafetyThreshold int
	// Refilled counts messages dead-lettered into the source while the
	// task ran (redriven ones coming back and new ones alike).
	Refilled int
	// StopRule names the safety rule that paused the task: StopReturned
	// or StopRefill ("" when none did).
	StopRule string
}

// Safety rules that pause a move task (DLQ-93).
const (
	// StopReturned: SafetyThreshold redriven messages were dead-lettered
	// again within SafetyWindow of their move.
	StopReturned = "returned"
	// StopRefill: over a full SafetyWindow, more messages were
	// dead-lettered into the source than the task moved out of it (and
	// at least SafetyThreshold): the queue refills faster than it drains.
	StopRefill = "refill"
)

// DryRun is what a move task would do, without doing it.
type DryRun struct {
	Total         int
	ByDestination map[string]int
	Sample        []View // the first few messages that would move
}

// Observer receives engine events for metrics and alerts. Methods are
// called synchronously, sometimes with a queue lock held: they must be
// fast, must not block, and must not call the Engine.
type Observer interface {
	Sent(queue string, n int)
	// Received is called once per receive that returned messages;
	// redelivered counts those received before.
	Received(queue string, n, redelivered int)
	// Deleted reports each deleted message's time from its last receive.
	Deleted(queue string, processing time.Duration)
	// DeadLettered reports a move to target, with the time from the
	// message's send to its dead-lettering. It is called once the copy
	// is durable and in the target (receivable, counted by GetQueue),
	// without any queue lock held.
	DeadLettered(queue, target, reason string, timeToDeadLetter time.Duration)
	// Expired reports messages removed by retention, or by a TTL when the
	// queue has no dead-letter target: each once, whichever path removed
	// it (the scheduler, or a receive, stats read or settlement that
	// reached it first), with the queue's lock held.
	Expired(queue string, n int)
}

// ErrorClassObserver is an optional extension of Observer: an observer
// that implements it is also told, for every dead-lettering, the error
// class of the message's last failure report ("" when none was reported).
// Same contract as Observer. Kept apart so that observers that do not
// care need not change (DLQ-22).
type ErrorClassObserver interface {
	DeadLetteredClass(queue, reason, errorClass string)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Sent(string, int)                                   {}
func (NopObserver) Received(string, int, int)                          {}
func (NopObserver) Deleted(string, time.Duration)                      {}
func (NopObserver) DeadLettered(string, string, string, time.Duration) {}
func (NopObserver) Expired(string, int)                                {}

// FailureOutcome says what a failure report did.
type FailureOutcome struct {
	DeadLettered bool
	Target       string    // the dead-letter queue, when DeadLettered
	VisibleAt    time.Time // when the message will be delivered again, otherwise
}
