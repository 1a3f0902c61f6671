package sqs

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Request shapes. The JSON protocol decodes into them with encoding/json
// (member names are the SQS model's, matched case-insensitively); the Query
// protocol fills them from flattened form fields (query.go). Actions then
// validate and execute them without knowing which protocol was used.

// optInt is an optional integer member. Raw keeps the value as sent so
// errors can quote it ("Value 21 for parameter WaitTimeSeconds is
// invalid…"); a value that is not an integer is Set but not Valid, and the
// action's range check rejects it with the same documented text.
type optInt struct {
	Set   bool
	Valid bool
	V     int64
	Raw   string
}

// UnmarshalJSON accepts a JSON number or a numeric string (lenient: some
// clients quote numbers). Anything else is kept as Raw and fails the range
// check later, so a wrong type never becomes a serialization error.
func (o *optInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	raw := string(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err == nil {
			raw = s
		}
	}
	*o = parseOptInt(raw)
	return nil
}

func parseOptInt(raw string) optInt {
	v, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	return optInt{Set: true, Valid: err == nil, V: v, Raw: raw}
}

// inRange reports whether o is a valid integer within [lo, hi].
func (o optInt) inRange(lo, hi int64) bool { return o.Valid && o.V >= lo && o.V <= hi }

// attrValue is a MessageAttributeValue.
type attrValue struct {
	DataType         string
	StringValue      *string
	BinaryValue      []byte // base64 on the wire
	StringListValues []string
	BinaryListValues [][]byte
}

type sendEntry struct {
	Id                      string // batch entries only
	MessageBody             *string
	DelaySeconds            optInt
	MessageAttributes       map[string]attrValue
	MessageSystemAttributes map[string]attrValue
	MessageDeduplicationId  *string
	MessageGroupId          *string
}

type sendMessageInput struct {
	QueueUrl string
	sendEntry
}

type sendMessageBatchInput struct {
	QueueUrl string
	Entries  []sendEntry
}

type receiveMessageInput struct {
	QueueUrl                    string
	MaxNumberOfMessages         optInt
	VisibilityTimeout           optInt
	WaitTimeSeconds             optInt
	AttributeNames              []string
	MessageSystemAttributeNames []string
	MessageAttributeNames       []string
	ReceiveRequestAttemptId     *string
}

type handleEntry struct {
	Id                string
	ReceiptHandle     string
	VisibilityTimeout optInt // ChangeMessageVisibility only
}

type deleteMessageInput struct {
	QueueUrl      string
	ReceiptHandle string
}

type changeVisibilityInput struct {
	QueueUrl          string
	ReceiptHandle     string
	VisibilityTimeout optInt
}

type batchHandleInput struct {
	QueueUrl string
	Entries  []handleEntry
}

type createQueueInput struct {
	QueueName  string
	Attributes map[string]string
	Tags       map[string]string `json:"tags"`
}

type queueURLInput struct {
	QueueUrl string
}

type getQueueURLInput struct {
	QueueName              string
	QueueOwnerAWSAccountId string
}

type getQueueAttributesInput struct {
	QueueUrl       string
	AttributeNames []string
}

type setQueueAttributesInput struct {
	QueueUrl   string
	Attributes map[string]string
}

type listQueuesInput struct {
	QueueNamePrefix string
	MaxResults      optInt
	NextToken       string
}

type listDLQSourcesInput struct {
	QueueUrl   string
	MaxResults optInt
	NextToken  string
}

type tagQueueInput struct {
	QueueUrl string
	Tags     map[string]string
}

type untagQueueInput struct {
	QueueUrl string
	TagKeys  []string
}

type addPermissionInput struct {
	QueueUrl      string
	Label         string
	AWSAccountIds []string
	Actions       []string
}

type removePermissionInput struct {
	QueueUrl string
	Label    string
}
