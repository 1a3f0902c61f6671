package sqs

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicemq/sluice/internal/engine"
)

// Validation of request members against the limits of the SQS reference
// (§3, §4). Each check returns the error SQS documents, with its exact text.

// isIDChars reports whether s is only [A-Za-z0-9_-].
func isIDChars(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// validBatchEntryID: 1–80 characters of [A-Za-z0-9_-].
func validBatchEntryID(id string) bool {
	return len(id) >= 1 && len(id) <= 80 && isIDChars(id)
}

// checkBatchIDs applies the request-level batch rules: 1–10 entries, valid
// and distinct ids. entryShape names the entry type in the empty-batch text.
func checkBatchIDs(ids []string, entryShape string) *apiError {
	if len(ids) == 0 {
		return newErr(kindEmptyBatch, "There should be at least one %s in the request.", entryShape)
	}
	if len(ids) > engine.MaxBatch {
		return newErr(kindTooManyEntries, "Maximum number of entries per request are %d. You have sent %d.", engine.MaxBatch, len(ids))
	}
	for _, id := range ids {
		if !validBatchEntryID(id) {
			return newErr(kindInvalidBatchEntryID, msgInvalidBatchEntryID)
		}
	}
	// At most 10 ids: comparing pairs is cheaper than a map.
	for i, id := range ids {
		for _, prev := range ids[:i] {
			if prev == id {
				return newErr(kindIdsNotDistinct, "Id %s repeated.", id)
			}
		}
	}
	return nil
}

// checkBody: a body is at least one character, valid UTF-8, of the allowed
// characters #x9 | #xA | #xD | #x20–#xD7FF | #xE000–#xFFFD | #x10000–#x10FFFF.
func checkBody(body *string) *apiError {
	if body == nil || *body == "" {
		return errMissing("MessageBody")
	}
	if r, ok := firstInvalidChar(*body); !ok {
		return newErr(kindInvalidContents, "Invalid binary character '#x%X' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF", r)
	}
	return nil
}

// firstInvalidChar returns the first character outside the allowed set (an
// invalid UTF-8 byte reports as its byte value).
func firstInvalidChar(s string) (rune, bool) {
	for i := 0; i < len(s); {
		// Eight bytes at a time while all are ASCII 0x20–0x7F (all allowed).
		if i+8 <= len(s) {
			if w := binary.LittleEndian.Uint64(unsafeSlice(s[i : i+8])); ((w-lsb*0x20)|w)&msb == 0 {
				i += 8
				continue
			}
		}
		if c := s[i]; c >= 0x20 && c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return rune(s[i]), false
		}
		if !isXMLChar(r) {
			return r, false
		}
		i += size
	}
	return 0, true
}

// validFIFOID: MessageGroupId / MessageDeduplicationId are 1–128 characters
// of alphanumerics and ASCII punctuation.
func validFIFOID(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		alnum := b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9'
		punct := b >= '!' && b <= '/' || b >= ':' && b <= '@' || b >= '[' && b <= '`' || b >= '{' && b <= '~'
		if !alnum && !punct {
			return false
		}
	}
	return true
}

func errFIFOID(param, value string) *apiError {
	return errParam(value, param, param+" can only include alphanumeric and punctuation characters. 1 to 128 in length.")
}

// maxMessageAttributes is SQS's limit of user attributes per message.
const maxMessageAttributes = 10

// checkMessageAttributes validates user message attributes (reference §3.2)
// and converts them, sorted by name, to engine attributes.
func checkMessageAttributes(attrs map[string]attrValue) ([]engine.Attribute, *apiError) {
	if len(attrs) == 0 {
		return nil, nil
	}
	if len(attrs) > maxMessageAttributes {
		return nil, newErr(kindInvalidParameter, "Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), maxMessageAttributes)
	}
	out := make([]engine.Attribute, 0, len(attrs))
	for _, name := range sortedKeys(attrs) {
		a, err := checkAttribute(name, attrs[name], "user")
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(strings.ToLower(name), "aws.") || strings.HasPrefix(strings.ToLower(name), "amazon.") {
			return nil, newErr(kindInvalidParameter, "Message (user) attribute name '%s' is reserved for use by AWS.", name)
		}
		out = append(out, a)
	}
	return out, nil
}

// checkAttribute validates one message attribute; kind is "user" or
// "system" for the error texts.
func checkAttribute(name string, v attrValue, kind string) (engine.Attribute, *apiError) {
	if name == "" {
		return engine.Attribute{}, newErr(kindInvalidParameter, "The request must contain non-empty message (%s) attribute names.", kind)
	}
	if !validAttributeName(name) {
		return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute name '%s' is invalid. Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters; it cannot start or end with a period, contain two periods in a row, or exceed 256 characters.", kind, name)
	}
	if v.DataType == "" {
		return engine.Attribute{}, newErr(kindInvalidParameter, "The message (%s) attribute '%s' must contain a non-empty attribute type.", kind, name)
	}
	if !validDataType(v.DataType) {
		return engine.Attribute{}, newErr(kindInvalidParameter, "The type of message (%s) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", kind, name)
	}
	if len(v.StringListValues) > 0 || len(v.BinaryListValues) > 0 {
		return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute '%s': list values are not supported.", kind, name)
	}
	a := engine.Attribute{Name: name, DataType: v.DataType}
	switch baseType(v.DataType) {
	case "Binary":
		if len(v.BinaryValue) == 0 {
			return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute '%s' must contain a non-empty value of type 'Binary'.", kind, name)
		}
		if v.StringValue != nil {
			return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute '%s' with type 'Binary' must use field 'Binary'.", kind, name)
		}
		a.BinaryValue = v.BinaryValue
	default:
		t := baseType(v.DataType)
		if v.StringValue == nil || *v.StringValue == "" {
			return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute '%s' must contain a non-empty value of type '%s'.", kind, name, t)
		}
		if v.BinaryValue != nil {
			return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute '%s' with type '%s' must use field 'String'.", kind, name, t)
		}
		if _, ok := firstInvalidChar(*v.StringValue); !ok {
			return engine.Attribute{}, newErr(kindInvalidParameter, "Message (%s) attribute '%s' contains invalid characters.", kind, name)
		}
		if t == "Number" {
			if _, err := strconv.ParseFloat(strings.TrimSpace(*v.StringValue), 64); err != nil {
				return engine.Attribute{}, newErr(kindInvalidParameter, "Can't parse value of message (%s) attribute '%s' of type 'Number'.", kind, name)
			}
		}
		a.StringValue = *v.StringValue
	}
	return a, nil
}

// validAttributeName: ≤ 256 characters of letters, digits, '_', '-' and
// '.', no leading, trailing or doubled period. Letters and digits are
// Unicode ones: AWS accepts "attr.1øßä" (LocalStack's AWS-validated
// test_send_message_with_invalid_string_attributes) and refuses '!', '"',
// '§', '(' and '?'.
func validAttributeName(name string) bool {
	if len(name) == 0 || utf8.RuneCountInString(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	for _, r := range name {
		if r == utf8.RuneError || !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' ||
			r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// validDataType: String, Number or Binary, optionally with a ".suffix" of
// printable characters; at most 256 characters.
func validDataType(t string) bool {
	if len(t) > 256 {
		return false
	}
	base, suffix, hasSuffix := strings.Cut(t, ".")
	if base != "String" && base != "Number" && base != "Binary" {
		return false
	}
	if hasSuffix {
		if suffix == "" {
			return false
		}
		for i := 0; i < len(suffix); i++ {
			if suffix[i] < 0x20 || suffix[i] > 0x7e {
				return false
			}
		}
	}
	return true
}

// sqsMaxMessageSize is the largest message the SQS API takes into a queue
// and reports as its MaximumMessageSize: the queue's own limit, at most
// SQS's 1 MiB. A queue declared over AMQP has the engine's largest limit
// (its AMQP publishes are bounded by the AMQP front-end), which is no SQS
// value: SQS clients see, and get, 1 MiB.
func sqsMaxMessageSize(cfg *engine.QueueConfig) int {
	return min(cfg.MaxMessageSize, engine.MaxMaxMessageSize)
}

// checkSendEntry validates one message for a queue and builds the engine
// message. batch selects the batch wording where AWS uses a different code
// (MessageGroupId). The size check uses the queue's MaximumMessageSize.
func checkSendEntry(e *sendEntry, cfg *engine.QueueConfig, batch bool, sender string) (engine.Message, *apiError) {
	var m engine.Message
	if err := checkBody(e.MessageBody); err != nil {
		return m, err
	}
	// Lent, not copied: the body points into the request buffer (which is
	// never modified), and the engine keeps a copy of its own.
	m.Body, m.BodyBorrowed = unsafeSlice(*e.MessageBody), true
	m.SenderID = sender
	fifo := cfg.FIFO

	if e.DelaySeconds.Set {
		if !e.DelaySeconds.inRange(0, int64(engine.MaxDelay/time.Second)) {
			return m, errParam(e.DelaySeconds.Raw, "DelaySeconds", "DelaySeconds must be >= 0 and <= 900.")
		}
		if fifo && e.DelaySeconds.V != 0 {
			return m, errParam(e.DelaySeconds.Raw, "DelaySeconds", "The request include parameter that is not valid for this queue type.")
		}
		// On FIFO queues a per-message 0 is no override: the queue's delay
		// still applies (reference §9).
		if !fifo {
			m.Delay, m.DelaySet = time.Duration(e.DelaySeconds.V)*time.Second, true
		}
	}

	attrs, err := checkMessageAttributes(e.MessageAttributes)
	if err != nil {
		return m, err
	}
	m.Attributes = attrs

	for _, name := range sortedKeys(e.MessageSystemAttributes) {
		v := e.MessageSystemAttributes[name]
		if name != "AWSTraceHeader" {
			return m, newErr(kindInvalidParameter, "Message system attribute name '%s' is invalid.", name)
		}
		a, err := checkAttribute(name, v, "system")
		if err != nil {
			return m, err
		}
		if a.DataType != "String" {
			return m, newErr(kindInvalidParameter, "Message system attribute '%s' must be of type 'String'.", name)
		}
		m.TraceHeader = a.StringValue
	}

	if e.MessageGroupId != nil {
		if !validFIFOID(*e.MessageGroupId) {
			return m, errFIFOID("MessageGroupId", *e.MessageGroupId)
		}
		m.GroupID = *e.MessageGroupId
	} else if fifo {
		if batch {
			return m, newErr(kindInvalidParameter, "The request must contain the parameter MessageGroupId.")
		}
		return m, errMissing("MessageGroupId")
	}
	if e.MessageDeduplicationId != nil {
		if !validFIFOID(*e.MessageDeduplicationId) {
			return m, errFIFOID("MessageDeduplicationId", *e.MessageDeduplicationId)
		}
		if !fifo {
			return m, errParam(*e.MessageDeduplicationId, "MessageDeduplicationId", "The request include parameter that is not valid for this queue type.")
		}
		m.DedupID = *e.MessageDeduplicationId
	} else if fifo && !cfg.ContentBasedDedup {
		return m, newErr(kindInvalidParameter, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}

	if limit := sqsMaxMessageSize(cfg); limit > 0 && m.Size() > limit {
		if batch {
			// AWS words the batch entry differently (LocalStack's
			// AWS-validated test_send_batch_message_size).
			return m, newErr(kindInvalidParameter, "One or more parameters cannot be validated. Reason: Message must be shorter than %d bytes.", limit)
		}
		return m, errTooLarge(limit)
	}
	return m, nil
}

// checkFIFOBatch applies the FIFO rules that fail a whole SendMessageBatch
// rather than one entry: on AWS an entry without MessageGroupId, or without
// MessageDeduplicationId on a queue without content-based deduplication,
// makes the request fail with 400 InvalidParameterValue and nothing is
// sent (LocalStack's AWS-validated test_send_batch_missing_*_for_fifo_queue).
// Sending the valid entries would let a caller that retries on an
// exception send them twice, out of order.
func checkFIFOBatch(entries []sendEntry, cfg *engine.QueueConfig) *apiError {
	if !cfg.FIFO {
		return nil
	}
	for i := range entries {
		if entries[i].MessageGroupId == nil {
			return newErr(kindInvalidParameter, "The request must contain the parameter MessageGroupId.")
		}
	}
	if !cfg.ContentBasedDedup {
		for i := range entries {
			if entries[i].MessageDeduplicationId == nil {
				return newErr(kindInvalidParameter, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			}
		}
	}
	return nil
}

// checkReceiveRange validates an optional integer receive parameter.
func checkRange(o optInt, param string, lo, hi int64, reason string) *apiError {
	if o.Set && !o.inRange(lo, hi) {
		return errParam(o.Raw, param, reason)
	}
	return nil
}

// checkVisibility validates a VisibilityTimeout of ChangeMessageVisibility.
func checkVisibility(o optInt) *apiError {
	if !o.Set {
		return errMissing("VisibilityTimeout")
	}
	return checkRange(o, "VisibilityTimeout", 0, int64(engine.MaxVisibility/time.Second), "Must be between 0 and 43200, if provided.")
}
