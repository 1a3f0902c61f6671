package sqs

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/engine"
)

// apiError is an SQS protocol error: everything a client sees when a request
// fails. Every failure leaving this package is one of these, built from the
// table below; nothing else reaches the wire.
type apiError struct {
	kind *errorKind
	msg  string // message for JSON (and Query unless queryMsg is set)
	// queryMsg overrides msg in Query (XML) responses; AWS words
	// NonExistentQueue differently there.
	queryMsg string
}

func (e *apiError) Error() string { return e.kind.code + ": " + e.msg }

// errorKind is one row of the error table.
type errorKind struct {
	code   string // legacy Query code: Query <Code>, x-amzn-query-error, batch Failed.Code
	shape  string // JSON shape: __type is namespace + "#" + shape
	ns     string // JSON namespace; "" means com.amazonaws.sqs
	status int
}

const sqsNamespace = "com.amazonaws.sqs"

func (k *errorKind) jsonType() string {
	ns := k.ns
	if ns == "" {
		ns = sqsNamespace
	}
	return ns + "#" + k.shape
}

// The error table (SQS reference §6). All are Sender faults except the two
// server-side kinds at the end.
var (
	kindNonExistentQueue     = &errorKind{"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "", 400}
	kindQueueAlreadyExists   = &errorKind{"QueueAlreadyExists", "QueueNameExists", "", 400}
	kindQueueDeletedRecently = &errorKind{"AWS.SimpleQueueService.QueueDeletedRecently", "QueueDeletedRecently", "", 400}
	kindInvalidParameter     = &errorKind{"InvalidParameterValue", "InvalidParameterValueException", "", 400}
	kindMissingParameter     = &errorKind{"MissingParameter", "MissingRequiredParameterException", "", 400}
	kindReceiptHandleInvalid = &errorKind{"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "", 400}
	kindMessageNotInflight   = &errorKind{"AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight", "", 400}
	kindPurgeInProgress      = &errorKind{"AWS.SimpleQueueService.PurgeQueueInProgress", "PurgeQueueInProgress", "", 403}
	kindTooManyEntries       = &errorKind{"AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "TooManyEntriesInBatchRequest", "", 400}
	kindEmptyBatch           = &errorKind{"AWS.SimpleQueueService.EmptyBatchRequest", "EmptyBatchRequest", "", 400}
	kindIdsNotDistinct       = &errorKind{"AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "BatchEntryIdsNotDistinct", "", 400}
	kindInvalidBatchEntryID  = &errorKind{"AWS.SimpleQueueService.InvalidBatchEntryId", "InvalidBatchEntryId", "", 400}
	kindBatchTooLong         = &errorKind{"AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong", "", 400}
	kindInvalidAttrName      = &errorKind{"InvalidAttributeName", "InvalidAttributeName", "", 400}
	kindInvalidAttrValue     = &errorKind{"InvalidAttributeValue", "InvalidAttributeValue", "", 400}
	kindInvalidContents      = &errorKind{"InvalidMessageContents", "InvalidMessageContents", "", 400}
	kindOverLimit            = &errorKind{"OverLimit", "OverLimit", "", 400}
	kindUnsupportedOperation = &errorKind{"AWS.SimpleQueueService.UnsupportedOperation", "UnsupportedOperation", "", 400}
	kindResourceNotFound     = &errorKind{"ResourceNotFoundException", "ResourceNotFoundException", "", 404}
	kindInvalidAction        = &errorKind{"InvalidAction", "UnknownOperationException", "com.amazon.coral.service", 400}
	kindUnknownOperation     = &errorKind{"UnknownOperationException", "UnknownOperationException", "com.amazon.coral.service", 404}
	kindMissingAction        = &errorKind{"MissingAction", "MissingAction", "com.amazon.coral.service", 400}
	// kindSerialization answers a JSON body that is not valid JSON or has a
	// member of the wrong type. aws-sdk-go-v2 and botocore surface it as a
	// generic API error with code SerializationException.
	kindSerialization = &errorKind{"SerializationException", "SerializationException", "com.amazon.coral.service", 400}
	// kindMalformedQuery answers a form body or query string that cannot be
	// decoded.
	kindMalformedQuery = &errorKind{"MalformedQueryString", "MalformedQueryString", "com.amazon.coral.service", 400}
	kindTooLarge       = &errorKind{"RequestEntityTooLarge", "RequestEntityTooLarge", "com.amazon.coral.service", 413}

	kindServiceUnavailable = &errorKind{"ServiceUnavailable", "ServiceUnavailable", "com.amazon.coral.service", 503}
	kindInternal           = &errorKind{"InternalFailure", "InternalFailure", "com.amazon.coral.service", 500}
)

func (k *errorKind) fault() string {
	if k.status >= 500 {
		return "Receiver"
	}
	return "Sender"
}

func newErr(k *errorKind, format string, args ...any) *apiError {
	if len(args) == 0 {
		return &apiError{kind: k, msg: format}
	}
	return &apiError{kind: k, msg: fmt.Sprintf(format, args...)}
}

// errText is newErr for a message that is not a format.
func errText(k *errorKind, msg string) *apiError { return &apiError{kind: k, msg: msg} }

// Constructors for errors whose text AWS fixes (reference §6).

func errQueueDoesNotExist() *apiError {
	return &apiError{kind: kindNonExistentQueue,
		msg:      "The specified queue does not exist.",
		queryMsg: "The specified queue does not exist for this wsdl version."}
}

func errMissing(param string) *apiError {
	return newErr(kindMissingParameter, "The request must contain the parameter %s.", param)
}

// errParam is the common "Value X for parameter P is invalid. Reason: R."
// shape. reason carries its own final punctuation.
func errParam(value, param, reason string) *apiError {
	return newErr(kindInvalidParameter, "Value %s for parameter %s is invalid. Reason: %s", value, param, reason)
}

func errUnknownAttribute(name string) *apiError {
	return newErr(kindInvalidAttrName, "Unknown Attribute %s.", name)
}

func errInvalidAttrValue(name string) *apiError {
	return newErr(kindInvalidAttrValue, "Invalid value for the parameter %s.", name)
}

func errReceiptHandle(h string) *apiError {
	return newErr(kindReceiptHandleInvalid, "The input receipt handle %q is not a valid receipt handle.", h)
}

func errTooLarge(limit int) *apiError {
	return newErr(kindInvalidParameter, "One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", limit)
}

const msgInvalidBatchEntryID = "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."

// errDetail gives mapEngineErr the request context some texts quote.
type errDetail struct {
	queue  string // queue name
	handle string // receipt handle
	delay  string // per-message DelaySeconds as sent
	// visibility is the VisibilityTimeout of a ChangeMessageVisibility as sent.
	visibility string
	batch      bool // the error is for a batch entry
	// sourceArn and destArn are a move task's ARNs as sent. When sourceArn
	// is set, a missing queue is the move tasks' 404 ResourceNotFound
	// naming SourceArn rather than QueueDoesNotExist.
	sourceArn, destArn string
}

// Move task texts (reference §6 and §8.5).
const (
	msgNotDeadLetterQueue = "Source queue must be configured as a Dead Letter Queue."
	msgTaskRunning        = "There is already a task running. Only one active task is allowed for a source queue arn at a given time."
	msgTaskHandleInvalid  = "Value for parameter TaskHandle is invalid."
	msgTaskDoesNotExist   = "Task does not exist."
)

// msgShuttingDown answers requests the engine's close ended, parked long
// polls above all: an expected part of a shutdown, not an error.
const msgShuttingDown = "The service is shutting down."

// errResourceNotFound is the move tasks' 404 for an ARN parameter naming a
// queue that does not exist.
func errResourceNotFound(param string) *apiError {
	return newErr(kindResourceNotFound, "The resource that you specified for the %s parameter doesn't exist.", param)
}

// mapEngineErr turns an engine error into the SQS error the client sees.
// This is the only place engine sentinels are translated.
func mapEngineErr(err error, d errDetail) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var tooLarge *engine.MessageTooLargeError
	var cfgErr *engine.ConfigError
	switch {
	case errors.Is(err, engine.ErrQueueNotFound) && d.sourceArn != "":
		return errResourceNotFound("SourceArn")
	case errors.Is(err, engine.ErrQueueNotFound):
		return errQueueDoesNotExist()
	case errors.Is(err, engine.ErrQueueDeletedRecently):
		return newErr(kindQueueDeletedRecently, "You must wait 60 seconds after deleting a queue before you can create another with the same name.")
	case errors.Is(err, engine.ErrQueueElsewhere):
		return errText(kindQueueAlreadyExists, "A queue with this name already exists on another shard of this cluster.")
	case errors.Is(err, engine.ErrPurgeInProgress):
		return newErr(kindPurgeInProgress, "Only one PurgeQueue operation on %s is allowed every 60 seconds.", d.queue)
	case errors.Is(err, engine.ErrReceiptHandleInvalid):
		return errReceiptHandle(d.handle)
	case errors.Is(err, engine.ErrReceiptHandleExpired):
		return errParam(d.handle, "ReceiptHandle", "The receipt handle has expired.")
	case errors.Is(err, engine.ErrMessageNotAvailable):
		return errParam(d.handle, "ReceiptHandle", "Message does not exist or is not available for visibility timeout change.")
	case errors.Is(err, engine.ErrMessageNotInflight):
		return newErr(kindMessageNotInflight, "Value %s for parameter ReceiptHandle is invalid. Reason: Message is not in flight.", d.handle)
	case errors.Is(err, engine.ErrVisibilityLimit):
		return errParam(d.visibility, "VisibilityTimeout", "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
	case errors.Is(err, engine.ErrOverLimit):
		return newErr(kindOverLimit, "Too many messages in flight on queue %s.", d.queue)
	case errors.Is(err, engine.ErrTooManyQueues):
		return newErr(kindOverLimit, "The broker already has its maximum number of queues; delete one first.")
	case errors.Is(err, engine.ErrQueueFull):
		// A length limit set over AMQP (x-max-length with reject-publish)
		// or the broker's per-queue caps (max_queue_messages,
		// max_queue_bytes); SQS has no such limit, OverLimit is the
		// closest modelled error.
		return newErr(kindOverLimit, "Queue %s is at its length limit and rejects new messages.", d.queue)
	case errors.Is(err, engine.ErrMissingGroupID):
		if d.batch {
			return newErr(kindInvalidParameter, "The request must contain the parameter MessageGroupId.")
		}
		return errMissing("MessageGroupId")
	case errors.Is(err, engine.ErrMissingDedupID):
		return newErr(kindInvalidParameter, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	case errors.Is(err, engine.ErrDelayNotAllowed):
		return errParam(d.delay, "DelaySeconds", "The request include parameter that is not valid for this queue type.")
	case errors.Is(err, engine.ErrNotDeadLetterQueue):
		return errText(kindInvalidParameter, msgNotDeadLetterQueue)
	case errors.Is(err, engine.ErrDestinationNotFound):
		return errResourceNotFound("DestinationArn")
	case errors.Is(err, engine.ErrTaskRunning):
		return errText(kindInvalidParameter, msgTaskRunning)
	case errors.Is(err, engine.ErrTaskNotFound):
		return errText(kindResourceNotFound, msgTaskDoesNotExist)
	case errors.Is(err, engine.ErrTaskNotRunning):
		// SQS cancels only RUNNING tasks (Sluice also cancels PAUSED ones).
		// AWS's answer for a finished task is not recorded; a handle is only
		// listed while the task can be cancelled, so Sluice answers as for
		// a handle it does not know: the modelled 404.
		return errText(kindResourceNotFound, msgTaskDoesNotExist)
	case errors.As(err, &cfgErr) && cfgErr.Setting == "DestinationArn":
		return errParam(d.destArn, "DestinationArn", upperFirst(cfgErr.Reason)+".")
	case errors.As(err, &tooLarge):
		return errTooLarge(tooLarge.Limit)
	case errors.As(err, &cfgErr):
		return newErr(kindInvalidAttrValue, "Invalid value for the parameter %s. Reason: %s", cfgErr.Setting, cfgErr.Reason)
	case errors.Is(err, engine.ErrInvalidConfig):
		return newErr(kindInvalidAttrValue, "Invalid queue configuration.")
	case errors.Is(err, engine.ErrTooManyTags):
		return newErr(kindInvalidParameter, "Too many tags added for queue %s.", d.queue)
	case errors.Is(err, engine.ErrClosed):
		return newErr(kindServiceUnavailable, msgShuttingDown)
	case errors.Is(err, engine.ErrDiskFull):
		// 503 makes the SDKs back off and retry: back-pressure.
		return newErr(kindServiceUnavailable, "The broker's disk is nearly full; new messages are refused until space returns. Retry later.")
	case errors.Is(err, engine.ErrUnavailable):
		// Cluster mode: another shard's leader the change needs (a
		// deleted name's hold) did not answer; nothing was changed.
		return newErr(kindServiceUnavailable, "A part of the cluster this request needs did not answer in time; nothing was changed. Retry.")
	case errors.Is(err, engine.ErrNotLeading):
		// Cluster mode: the leader changed under the request. 503 makes
		// the SDKs retry, through the new leader; an InternalFailure
		// would say the broker is broken.
		return newErr(kindServiceUnavailable, "The cluster's leader changed while the request was handled; whether it took effect is unknown. Retry.")
	case errors.Is(err, engine.ErrMemoryHigh):
		// 503 like the disk watermark: the SDKs back off and retry.
		return newErr(kindServiceUnavailable, "The broker's memory high watermark is reached; new messages are refused until consumers drain the backlog. Retry later.")
	default:
		return newErr(kindInternal, "We encountered an internal error. Please try again.")
	}
}

// upperFirst capitalises an engine reason for use as a sentence.
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
