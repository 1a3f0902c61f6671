package sqs

import (
	"encoding/base64"
	"strconv"
)

// Response shapes. Each has JSON tags for the JSON protocol (absent members
// are left out) and an xml method that writes the children of the Query
// protocol's <Action>Result element. An action with no output returns nil:
// "{}" in JSON, only ResponseMetadata in Query.
type output interface {
	xml(w *xmlWriter)
}

type sendMessageOutput struct {
	MessageId                    string `json:"MessageId"`
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty"`
	SequenceNumber               string `json:"SequenceNumber,omitempty"`
}

func (o *sendMessageOutput) xml(w *xmlWriter) {
	w.elem("MessageId", o.MessageId)
	w.elem("MD5OfMessageBody", o.MD5OfMessageBody)
	w.elemOpt("MD5OfMessageAttributes", o.MD5OfMessageAttributes)
	w.elemOpt("MD5OfMessageSystemAttributes", o.MD5OfMessageSystemAttributes)
	w.elemOpt("SequenceNumber", o.SequenceNumber)
}

type sendBatchResultEntry struct {
	Id string `json:"Id"`
	sendMessageOutput
}

// batchError is a BatchResultErrorEntry.
type batchError struct {
	Id          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

func newBatchError(id string, e *apiError) batchError {
	return batchError{Id: id, SenderFault: e.kind.status < 500, Code: e.kind.code, Message: e.msg}
}

func writeBatchErrors(w *xmlWriter, failed []batchError) {
	for _, f := range failed {
		w.open("BatchResultErrorEntry")
		w.elem("Id", f.Id)
		w.elem("SenderFault", strconv.FormatBool(f.SenderFault))
		w.elem("Code", f.Code)
		w.elemOpt("Message", f.Message)
		w.close("BatchResultErrorEntry")
	}
}

type sendMessageBatchOutput struct {
	Successful []sendBatchResultEntry `json:"Successful"`
	Failed     []batchError           `json:"Failed"`
}

func (o *sendMessageBatchOutput) xml(w *xmlWriter) {
	for _, s := range o.Successful {
		w.open("SendMessageBatchResultEntry")
		w.elem("Id", s.Id)
		s.sendMessageOutput.xml(w)
		w.close("SendMessageBatchResultEntry")
	}
	writeBatchErrors(w, o.Failed)
}

type idEntry struct {
	Id string `json:"Id"`
}

// handleBatchOutput is the output of DeleteMessageBatch and
// ChangeMessageVisibilityBatch; entryName is the Query element of a success.
type handleBatchOutput struct {
	Successful []idEntry    `json:"Successful"`
	Failed     []batchError `json:"Failed"`
	entryName  string
}

func (o *handleBatchOutput) xml(w *xmlWriter) {
	for _, s := range o.Successful {
		w.open(o.entryName)
		w.elem("Id", s.Id)
		w.close(o.entryName)
	}
	writeBatchErrors(w, o.Failed)
}

type messageAttributeOut struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"`
}

type messageOut struct {
	MessageId              string                         `json:"MessageId"`
	ReceiptHandle          string                         `json:"ReceiptHandle"`
	MD5OfBody              string                         `json:"MD5OfBody"`
	Body                   string                         `json:"Body"`
	Attributes             map[string]string              `json:"Attributes,omitempty"`
	MD5OfMessageAttributes string                         `json:"MD5OfMessageAttributes,omitempty"`
	MessageAttributes      map[string]messageAttributeOut `json:"MessageAttributes,omitempty"`
}

type receiveMessageOutput struct {
	Messages []messageOut `json:"Messages,omitempty"`
}

func (o *receiveMessageOutput) xml(w *xmlWriter) {
	for _, m := range o.Messages {
		w.open("Message")
		w.elem("MessageId", m.MessageId)
		w.elem("ReceiptHandle", m.ReceiptHandle)
		w.elem("MD5OfBody", m.MD5OfBody)
		w.elem("Body", m.Body)
		w.nameValues("Attribute", "Name", "Value", m.Attributes)
		w.elemOpt("MD5OfMessageAttributes", m.MD5OfMessageAttributes)
		for _, name := range sortedKeys(m.MessageAttributes) {
			a := m.MessageAttributes[name]
			w.open("MessageAttribute")
			w.elem("Name", name)
			w.open("Value")
			if isBinaryType(a.DataType) {
				w.elem("BinaryValue", base64.StdEncoding.EncodeToString(a.BinaryValue))
			} else {
				w.elem("StringValue", a.StringValue)
			}
			w.elem("DataType", a.DataType)
			w.close("Value")
			w.close("MessageAttribute")
		}
		w.close("Message")
	}
}

type queueURLOutput struct {
	QueueUrl string `json:"QueueUrl"`
}

func (o *queueURLOutput) xml(w *xmlWriter) { w.elem("QueueUrl", o.QueueUrl) }

type attributesOutput struct {
	Attributes map[string]string `json:"Attributes,omitempty"`
}

func (o *attributesOutput) xml(w *xmlWriter) {
	w.nameValues("Attribute", "Name", "Value", o.Attributes)
}

type listQueuesOutput struct {
	QueueUrls []string `json:"QueueUrls,omitempty"`
	NextToken string   `json:"NextToken,omitempty"`
}

func (o *listQueuesOutput) xml(w *xmlWriter) {
	for _, u := range o.QueueUrls {
		w.elem("QueueUrl", u)
	}
	w.elemOpt("NextToken", o.NextToken)
}

// listDLQSourcesOutput: note the lower-case "queueUrls" of the SQS model.
type listDLQSourcesOutput struct {
	QueueUrls []string `json:"queueUrls"`
	NextToken string   `json:"NextToken,omitempty"`
}

func (o *listDLQSourcesOutput) xml(w *xmlWriter) {
	for _, u := range o.QueueUrls {
		w.elem("QueueUrl", u)
	}
	w.elemOpt("NextToken", o.NextToken)
}

type listTagsOutput struct {
	Tags map[string]string `json:"Tags,omitempty"`
}

func (o *listTagsOutput) xml(w *xmlWriter) {
	w.nameValues("Tag", "Key", "Value", o.Tags)
}
