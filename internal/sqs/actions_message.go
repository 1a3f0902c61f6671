package sqs

import (
	"crypto/md5"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Message actions: SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch),
// ChangeMessageVisibility(Batch).

// getQueue resolves a request's queue and returns its snapshot.
func (c *call) getQueue(queueURL string) (engine.QueueInfo, *apiError) {
	name, err := c.queueName(queueURL)
	if err != nil {
		return engine.QueueInfo{}, err
	}
	info, gerr := c.h.eng.GetQueue(name)
	if gerr != nil {
		return engine.QueueInfo{}, mapEngineErr(gerr, errDetail{queue: name})
	}
	return info, nil
}

// queueConfig resolves a request's queue and its settings without the
// queue's lock or a copy (the send path's lookup). cfg is read-only.
func (c *call) queueConfig(queueURL string) (string, *engine.QueueConfig, *apiError) {
	name, err := c.queueName(queueURL)
	if err != nil {
		return "", nil, err
	}
	cfg, gerr := c.h.eng.Config(name)
	if gerr != nil {
		return "", nil, mapEngineErr(gerr, errDetail{queue: name})
	}
	return name, cfg, nil
}

// hashBody sets m's BodyMD5, which the engine stores with the message: the
// send response reports it, and every ReceiveMessage returns it as
// MD5OfBody without hashing the body again.
func hashBody(m *engine.Message) {
	m.BodyMD5, m.BodyMD5Set = md5.Sum(m.Body), true
}

// bodyMD5 is the MD5 of a delivered body: the one stored at send, or, for a
// message sent without one (AMQP, an import, an older store), computed now.
func bodyMD5(d *engine.Delivery) [md5.Size]byte {
	if d.BodyMD5Set {
		return d.BodyMD5
	}
	return md5.Sum(d.Body)
}

// sendOutput builds the MD5s of a sent message (m went through hashBody).
// sums, if not nil, has room for the hex MD5 of the body (so a batch's share
// one allocation).
func sendOutput(m *engine.Message, r engine.SendResult, sums *[]byte) sendMessageOutput {
	sum := m.BodyMD5
	if !m.BodyMD5Set {
		sum = md5.Sum(m.Body)
	}
	var bodySum string
	if sums != nil && cap(*sums)-len(*sums) >= 2*md5.Size {
		*sums = hex.AppendEncode(*sums, sum[:])
		bodySum = bodyString((*sums)[len(*sums)-2*md5.Size:])
	} else {
		bodySum = hex.EncodeToString(sum[:])
	}
	out := sendMessageOutput{
		MessageId:              r.MessageID,
		MD5OfMessageBody:       bodySum,
		MD5OfMessageAttributes: md5OfAttributes(m.Attributes),
		SequenceNumber:         r.SequenceNumber,
	}
	if m.TraceHeader != "" {
		out.MD5OfMessageSystemAttributes = md5OfAttributes(traceAttr(m.TraceHeader))
	}
	return out
}

func traceAttr(v string) []engine.Attribute {
	return []engine.Attribute{{Name: "AWSTraceHeader", DataType: "String", StringValue: v}}
}

func (c *call) sendMessage() (output, *apiError) {
	var in sendMessageInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, cfg, err := c.queueConfig(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	m, err := checkSendEntry(&in.sendEntry, cfg, false, c.sender)
	if err != nil {
		return nil, err
	}
	fromHeader := c.traceFromHeader(&m)
	hashBody(&m)
	c.h.slowSend(c.ctx, name) // back-pressure (flow.go)
	res, serr := c.h.eng.Send(name, []engine.Message{m})
	d := errDetail{queue: name, delay: in.DelaySeconds.Raw}
	if serr != nil {
		return nil, mapEngineErr(serr, d)
	}
	if len(res) != 1 {
		return nil, newErr(kindInternal, "The engine returned %d results for one message.", len(res))
	}
	if res[0].Err != nil {
		return nil, mapEngineErr(res[0].Err, d)
	}
	out := sendOutput(&m, res[0], nil)
	if fromHeader {
		out.MD5OfMessageSystemAttributes = "" // the sender sent no system attributes
	}
	return &out, nil
}

// maxTraceHeader bounds an X-Amzn-Trace-Id taken as AWSTraceHeader (an
// X-Ray header is about 100 characters).
const maxTraceHeader = 1024

// traceFromHeader gives m the request's X-Amzn-Trace-Id header as its
// AWSTraceHeader system attribute, as SQS does, unless the sender set
// AWSTraceHeader explicitly (which wins). A header that is empty, too long
// or has characters a message may not carry is ignored: it comes from
// tracing infrastructure, and refusing the message for it would lose the
// send. It reports whether the header was used.
func (c *call) traceFromHeader(m *engine.Message) bool {
	if m.TraceHeader != "" || c.req == nil {
		return false
	}
	v := c.req.Header.Get("X-Amzn-Trace-Id")
	if v == "" || len(v) > maxTraceHeader {
		return false
	}
	if _, ok := firstInvalidChar(v); !ok {
		return false
	}
	m.TraceHeader = v
	return true
}

// entrySize is a batch entry's size as SQS counts it towards the 1 MiB
// batch limit: body plus attribute names, types and values, whether or not
// the entry is otherwise valid.
func entrySize(e *sendEntry) int {
	n := 0
	if e.MessageBody != nil {
		n += len(*e.MessageBody)
	}
	for name, a := range e.MessageAttributes {
		n += len(name) + len(a.DataType) + len(a.BinaryValue)
		if a.StringValue != nil {
			n += len(*a.StringValue)
		}
	}
	return n
}

func (c *call) sendMessageBatch() (output, *apiError) {
	var in sendMessageBatchInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, cfg, err := c.queueConfig(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	total := 0
	for i := range in.Entries {
		ids[i] = in.Entries[i].Id
		total += entrySize(&in.Entries[i])
	}
	if err := checkBatchIDs(ids, "SendMessageBatchRequestEntry"); err != nil {
		return nil, err
	}
	if total > engine.MaxMaxMessageSize {
		return nil, newErr(kindBatchTooLong, "Batch requests cannot be longer than %d bytes. You have sent %d bytes.", engine.MaxMaxMessageSize, total)
	}
	if err := checkFIFOBatch(in.Entries, cfg); err != nil {
		return nil, err
	}

	out := &sendMessageBatchOutput{Successful: make([]sendBatchResultEntry, 0, len(in.Entries)), Failed: []batchError{}}
	msgs := make([]engine.Message, 0, len(in.Entries))
	idx := make([]int, 0, len(in.Entries)) // entry index of each message
	var fromHeader []bool                  // entry got X-Amzn-Trace-Id; nil when none did
	for i := range in.Entries {
		m, err := checkSendEntry(&in.Entries[i], cfg, true, c.sender)
		if err != nil {
			out.Failed = append(out.Failed, newBatchError(ids[i], err))
			continue
		}
		if c.traceFromHeader(&m) {
			if fromHeader == nil {
				fromHeader = make([]bool, len(in.Entries))
			}
			fromHeader[i] = true
		}
		hashBody(&m)
		msgs = append(msgs, m)
		idx = append(idx, i)
	}
	if len(msgs) == 0 {
		return out, nil
	}
	c.h.slowSend(c.ctx, name) // back-pressure (flow.go)
	res, serr := c.h.eng.Send(name, msgs)
	if serr != nil {
		return nil, mapEngineErr(serr, errDetail{queue: name})
	}
	if len(res) != len(msgs) {
		return nil, newErr(kindInternal, "The engine returned %d results for %d messages.", len(res), len(msgs))
	}
	sums := make([]byte, 0, 2*md5.Size*len(res))
	for j, r := range res {
		e := &in.Entries[idx[j]]
		if r.Err != nil {
			out.Failed = append(out.Failed, newBatchError(e.Id, mapEngineErr(r.Err, errDetail{queue: name, delay: e.DelaySeconds.Raw, batch: true})))
			continue
		}
		so := sendOutput(&msgs[j], r, &sums)
		if fromHeader != nil && fromHeader[idx[j]] {
			so.MD5OfMessageSystemAttributes = ""
		}
		out.Successful = append(out.Successful, sendBatchResultEntry{Id: e.Id, sendMessageOutput: so})
	}
	return out, nil
}

// systemAttributes returns the system attributes of d that names selects.
// Names that do not apply to the message (SequenceNumber on a standard
// queue, DeadLetterQueueSourceArn on a message that was sent here, …) are
// left out without an error, as are unknown names. Sluice's own system
// attributes are added only when named (sluice_attrs.go).
func (h *Handler) systemAttributes(d *engine.Delivery, names []string) map[string]string {
	if len(names) == 0 {
		return nil
	}
	all := false
	want := make(map[string]bool, len(names))
	for _, n := range names {
		all = all || n == "All"
		want[n] = true
	}
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	m := map[string]string{}
	add := func(k, v string) {
		if (all || want[k]) && v != "" {
			m[k] = v
		}
	}
	add("SenderId", d.SenderID)
	if !d.SentAt.IsZero() {
		add("SentTimestamp", ms(d.SentAt))
	}
	add("ApproximateReceiveCount", strconv.Itoa(d.ReceiveCount))
	if !d.FirstReceiveAt.IsZero() {
		add("ApproximateFirstReceiveTimestamp", ms(d.FirstReceiveAt))
	}
	add("SequenceNumber", d.SequenceNumber)
	add("MessageDeduplicationId", d.DedupID)
	add("MessageGroupId", d.GroupID)
	add("AWSTraceHeader", d.TraceHeader)
	if d.DeadLetterSource != "" {
		add("DeadLetterQueueSourceArn", h.queueARN(d.DeadLetterSource))
	}
	addSluiceAttributes(m, d, names)
	if len(m) == 0 {
		return nil
	}
	return m
}

// selectAttributes returns the message attributes that the receive filter
// names selects: exact names; "All", "*" or ".*" for all; "prefix.*" for
// names starting with "prefix" (AWS reads ".*" as a wildcard: "Hel.*"
// selects "Hello" and "Help.Me"). Names that match nothing, even invalid
// ones, select nothing without an error.
func selectAttributes(attrs []engine.Attribute, names []string) []engine.Attribute {
	if len(names) == 0 || len(attrs) == 0 {
		return nil
	}
	var out []engine.Attribute
	for _, a := range attrs {
		for _, n := range names {
			if n == "All" || n == "*" || n == ".*" || n == a.Name ||
				(strings.HasSuffix(n, ".*") && strings.HasPrefix(a.Name, n[:len(n)-2])) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

func (c *call) receiveMessage() (output, *apiError) {
	var in receiveMessageInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := checkRange(in.MaxNumberOfMessages, "MaxNumberOfMessages", 1, engine.MaxBatch, "Must be between 1 and 10, if provided."); err != nil {
		return nil, err
	}
	if err := checkRange(in.VisibilityTimeout, "VisibilityTimeout", 0, int64(engine.MaxVisibility/time.Second), "Must be >= 0 and <= 43200, if provided."); err != nil {
		return nil, err
	}
	if err := checkRange(in.WaitTimeSeconds, "WaitTimeSeconds", 0, int64(engine.MaxWait/time.Second), "Must be >= 0 and <= 20, if provided."); err != nil {
		return nil, err
	}
	req := engine.ReceiveRequest{Max: 1}
	if in.MaxNumberOfMessages.Set {
		req.Max = int(in.MaxNumberOfMessages.V)
	}
	if in.VisibilityTimeout.Set {
		req.Visibility, req.VisibilitySet = time.Duration(in.VisibilityTimeout.V)*time.Second, true
	}
	if in.WaitTimeSeconds.Set {
		req.Wait, req.WaitSet = time.Duration(in.WaitTimeSeconds.V)*time.Second, true
	}
	if in.ReceiveRequestAttemptId != nil {
		req.AttemptID = *in.ReceiveRequestAttemptId
	}
	ds, rerr := c.h.eng.Receive(c.ctx, name, req)
	if rerr != nil {
		if c.ctx.Err() != nil {
			// The client went away during a long poll; nobody reads this.
			return &receiveMessageOutput{}, nil
		}
		return nil, mapEngineErr(rerr, errDetail{queue: name})
	}
	sysNames := in.MessageSystemAttributeNames
	if len(sysNames) == 0 {
		sysNames = in.AttributeNames
	}
	out := &receiveMessageOutput{}
	if len(ds) > 0 {
		out.Messages = make([]messageOut, 0, len(ds))
	}
	// The hex MD5s of all bodies share one allocation.
	sums := make([]byte, 0, 2*md5.Size*len(ds))
	for i := range ds {
		d := &ds[i]
		sum := bodyMD5(d)
		sums = hex.AppendEncode(sums, sum[:])
		m := messageOut{
			MessageId:     d.MessageID,
			ReceiptHandle: d.ReceiptHandle,
			MD5OfBody:     bodyString(sums[len(sums)-2*md5.Size:]),
			// The engine's body, not a copy: it is read-only, and the
			// response is written before this request returns.
			Body:       bodyString(d.Body),
			Attributes: c.h.systemAttributes(d, sysNames),
		}
		if sel := selectAttributes(d.Attributes, in.MessageAttributeNames); len(sel) > 0 {
			m.MD5OfMessageAttributes = md5OfAttributes(sel)
			m.MessageAttributes = make(map[string]messageAttributeOut, len(sel))
			for _, a := range sel {
				m.MessageAttributes[a.Name] = messageAttributeOut{DataType: a.DataType, StringValue: a.StringValue, BinaryValue: a.BinaryValue}
			}
		}
		out.Messages = append(out.Messages, m)
	}
	return out, nil
}

func (c *call) deleteMessage() (output, *apiError) {
	var in deleteMessageInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if in.ReceiptHandle == "" {
		return nil, errMissing("ReceiptHandle")
	}
	res, derr := c.h.eng.Delete(name, []string{in.ReceiptHandle})
	d := errDetail{queue: name, handle: in.ReceiptHandle}
	if derr != nil {
		return nil, mapEngineErr(derr, d)
	}
	if len(res) == 1 && res[0] != nil {
		return nil, mapEngineErr(res[0], d)
	}
	return nil, nil
}

func (c *call) changeMessageVisibility() (output, *apiError) {
	var in changeVisibilityInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if in.ReceiptHandle == "" {
		return nil, errMissing("ReceiptHandle")
	}
	if err := checkVisibility(in.VisibilityTimeout); err != nil {
		return nil, err
	}
	ch := engine.VisibilityChange{ReceiptHandle: in.ReceiptHandle, Timeout: time.Duration(in.VisibilityTimeout.V) * time.Second}
	res, verr := c.h.eng.ChangeVisibility(name, []engine.VisibilityChange{ch})
	d := errDetail{queue: name, handle: in.ReceiptHandle, visibility: in.VisibilityTimeout.Raw}
	if verr != nil {
		return nil, mapEngineErr(verr, d)
	}
	if len(res) == 1 && res[0] != nil {
		return nil, mapEngineErr(res[0], d)
	}
	return nil, nil
}

// handleBatch runs DeleteMessageBatch or ChangeMessageVisibilityBatch:
// request-level rules first, then per-entry validation, then one engine call
// for the valid entries. Entry failures go to Failed with HTTP 200.
func (c *call) handleBatch(in *batchHandleInput, entryShape, resultEntry string, visibility bool) (output, *apiError) {
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.Id
	}
	if err := checkBatchIDs(ids, entryShape); err != nil {
		return nil, err
	}
	out := &handleBatchOutput{Successful: make([]idEntry, 0, len(in.Entries)), Failed: []batchError{}, entryName: resultEntry}
	valid := make([]int, 0, len(in.Entries))
	for i, e := range in.Entries {
		if e.ReceiptHandle == "" {
			out.Failed = append(out.Failed, newBatchError(e.Id, errMissing("ReceiptHandle")))
			continue
		}
		if visibility {
			if err := checkVisibility(e.VisibilityTimeout); err != nil {
				out.Failed = append(out.Failed, newBatchError(e.Id, err))
				continue
			}
		}
		valid = append(valid, i)
	}
	if len(valid) > 0 {
		var res []error
		var eerr error
		if visibility {
			changes := make([]engine.VisibilityChange, len(valid))
			for j, i := range valid {
				e := in.Entries[i]
				changes[j] = engine.VisibilityChange{ReceiptHandle: e.ReceiptHandle, Timeout: time.Duration(e.VisibilityTimeout.V) * time.Second}
			}
			res, eerr = c.h.eng.ChangeVisibility(name, changes)
		} else {
			handles := make([]string, len(valid))
			for j, i := range valid {
				handles[j] = in.Entries[i].ReceiptHandle
			}
			res, eerr = c.h.eng.Delete(name, handles)
		}
		if eerr != nil {
			return nil, mapEngineErr(eerr, errDetail{queue: name})
		}
		if len(res) != len(valid) {
			return nil, newErr(kindInternal, "The engine returned %d results for %d entries.", len(res), len(valid))
		}
		for j, i := range valid {
			e := in.Entries[i]
			if res[j] != nil {
				out.Failed = append(out.Failed, newBatchError(e.Id, mapEngineErr(res[j], errDetail{queue: name, handle: e.ReceiptHandle, visibility: e.VisibilityTimeout.Raw, batch: true})))
				continue
			}
			out.Successful = append(out.Successful, idEntry{Id: e.Id})
		}
	}
	return out, nil
}

func (c *call) deleteMessageBatch() (output, *apiError) {
	var in deleteBatchInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	return c.handleBatch(&in.batchHandleInput, "DeleteMessageBatchRequestEntry", "DeleteMessageBatchResultEntry", false)
}

func (c *call) changeMessageVisibilityBatch() (output, *apiError) {
	var in changeVisibilityBatchInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	return c.handleBatch(&in.batchHandleInput, "ChangeMessageVisibilityBatchRequestEntry", "ChangeMessageVisibilityBatchResultEntry", true)
}
