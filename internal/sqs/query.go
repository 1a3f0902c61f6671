package sqs

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The Query protocol's request side: flattened form fields (reference §5.2)
// decoded into the request shapes of input.go.
//
// Lists and maps are flattened with 1-based indices: "AttributeName.1",
// "Attribute.1.Name"/"Attribute.1.Value", "SendMessageBatchRequestEntry.1.Id".
// Indices need not be contiguous; they are taken in ascending order.

// form is the request's fields: the URL query merged with a form body.
type form url.Values

// queryDecoder is implemented by every request shape.
type queryDecoder interface {
	fromQuery(f form) *apiError
}

func (f form) get(k string) string {
	if v := f[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (f form) ptr(k string) *string {
	if v, ok := f[k]; ok && len(v) > 0 {
		s := v[0]
		return &s
	}
	return nil
}

func (f form) optInt(k string) optInt {
	if v, ok := f[k]; ok && len(v) > 0 {
		return parseOptInt(v[0])
	}
	return optInt{}
}

// maxIndex bounds a flattened index; larger ones are ignored, so a hostile
// "Attribute.99999999999.Name" cannot make us allocate.
const maxIndex = 1 << 20

// indexed groups the fields "prefix.N" and "prefix.N.rest" by N, in
// ascending order of N. Each group maps "rest" (or "" for "prefix.N" itself)
// to its values.
func (f form) indexed(prefix string) []form {
	p := prefix + "."
	groups := map[int]form{}
	for k, v := range f {
		rest, ok := strings.CutPrefix(k, p)
		if !ok {
			continue
		}
		idx, sub, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(idx)
		if err != nil || n < 1 || n > maxIndex || idx[0] == '+' || idx[0] == '0' {
			continue
		}
		g := groups[n]
		if g == nil {
			g = form{}
			groups[n] = g
		}
		g[sub] = v
	}
	keys := make([]int, 0, len(groups))
	for n := range groups {
		keys = append(keys, n)
	}
	sort.Ints(keys)
	out := make([]form, len(keys))
	for i, n := range keys {
		out[i] = groups[n]
	}
	return out
}

// list decodes "prefix.N" into a list.
func (f form) list(prefix string) []string {
	var out []string
	for _, g := range f.indexed(prefix) {
		if v, ok := g[""]; ok && len(v) > 0 {
			out = append(out, v[0])
		}
	}
	return out
}

// strMap decodes "prefix.N.<key>" / "prefix.N.<value>" pairs into a map. An
// entry without a key is skipped.
func (f form) strMap(prefix, key, value string) map[string]string {
	groups := f.indexed(prefix)
	if len(groups) == 0 {
		return nil
	}
	out := make(map[string]string, len(groups))
	for _, g := range groups {
		k := g.ptr(key)
		if k == nil {
			continue
		}
		out[*k] = g.get(value)
	}
	return out
}

// msgAttrs decodes "prefix.N.Name", "prefix.N.Value.DataType",
// "….StringValue" and "….BinaryValue" (base64).
func (f form) msgAttrs(prefix string) (map[string]attrValue, *apiError) {
	groups := f.indexed(prefix)
	if len(groups) == 0 {
		return nil, nil
	}
	out := make(map[string]attrValue, len(groups))
	for _, g := range groups {
		name := g.get("Name")
		v := attrValue{DataType: g.get("Value.DataType"), StringValue: g.ptr("Value.StringValue")}
		if b := g.ptr("Value.BinaryValue"); b != nil {
			dec, err := base64.StdEncoding.DecodeString(*b)
			if err != nil {
				return nil, newErr(kindInvalidParameter, "The message attribute '%s' has an invalid base64 BinaryValue.", name)
			}
			v.BinaryValue = dec
			if v.BinaryValue == nil {
				v.BinaryValue = []byte{}
			}
		}
		v.StringListValues = g.list("Value.StringListValue")
		out[name] = v
	}
	return out, nil
}

func (e *sendEntry) fromForm(f form) *apiError {
	e.Id = f.get("Id")
	e.MessageBody = f.ptr("MessageBody")
	e.DelaySeconds = f.optInt("DelaySeconds")
	e.MessageDeduplicationId = f.ptr("MessageDeduplicationId")
	e.MessageGroupId = f.ptr("MessageGroupId")
	var err *apiError
	if e.MessageAttributes, err = f.msgAttrs("MessageAttribute"); err != nil {
		return err
	}
	e.MessageSystemAttributes, err = f.msgAttrs("MessageSystemAttribute")
	return err
}

func (in *sendMessageInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	return in.sendEntry.fromForm(f)
}

func (in *sendMessageBatchInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	for _, g := range f.indexed("SendMessageBatchRequestEntry") {
		var e sendEntry
		if err := e.fromForm(g); err != nil {
			return err
		}
		in.Entries = append(in.Entries, e)
	}
	return nil
}

func (in *receiveMessageInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.MaxNumberOfMessages = f.optInt("MaxNumberOfMessages")
	in.VisibilityTimeout = f.optInt("VisibilityTimeout")
	in.WaitTimeSeconds = f.optInt("WaitTimeSeconds")
	in.AttributeNames = f.list("AttributeName")
	in.MessageSystemAttributeNames = f.list("MessageSystemAttributeName")
	in.MessageAttributeNames = f.list("MessageAttributeName")
	in.ReceiveRequestAttemptId = f.ptr("ReceiveRequestAttemptId")
	return nil
}

func (in *deleteMessageInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.ReceiptHandle = f.get("ReceiptHandle")
	return nil
}

func (in *changeVisibilityInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.ReceiptHandle = f.get("ReceiptHandle")
	in.VisibilityTimeout = f.optInt("VisibilityTimeout")
	return nil
}

// batchHandleInput serves DeleteMessageBatch and ChangeMessageVisibilityBatch,
// whose entries are flattened under different names.
type deleteBatchInput struct{ batchHandleInput }
type changeVisibilityBatchInput struct{ batchHandleInput }

func (in *batchHandleInput) fromForm(f form, prefix string) {
	in.QueueUrl = f.get("QueueUrl")
	for _, g := range f.indexed(prefix) {
		in.Entries = append(in.Entries, handleEntry{
			Id:                g.get("Id"),
			ReceiptHandle:     g.get("ReceiptHandle"),
			VisibilityTimeout: g.optInt("VisibilityTimeout"),
		})
	}
}

func (in *deleteBatchInput) fromQuery(f form) *apiError {
	in.fromForm(f, "DeleteMessageBatchRequestEntry")
	return nil
}

func (in *changeVisibilityBatchInput) fromQuery(f form) *apiError {
	in.fromForm(f, "ChangeMessageVisibilityBatchRequestEntry")
	return nil
}

func (in *createQueueInput) fromQuery(f form) *apiError {
	in.QueueName = f.get("QueueName")
	in.Attributes = f.strMap("Attribute", "Name", "Value")
	in.Tags = f.strMap("Tag", "Key", "Value")
	return nil
}

func (in *queueURLInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	return nil
}

func (in *getQueueURLInput) fromQuery(f form) *apiError {
	in.QueueName = f.get("QueueName")
	in.QueueOwnerAWSAccountId = f.get("QueueOwnerAWSAccountId")
	return nil
}

func (in *getQueueAttributesInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.AttributeNames = f.list("AttributeName")
	return nil
}

func (in *setQueueAttributesInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.Attributes = f.strMap("Attribute", "Name", "Value")
	return nil
}

func (in *listQueuesInput) fromQuery(f form) *apiError {
	in.QueueNamePrefix = f.get("QueueNamePrefix")
	in.MaxResults = f.optInt("MaxResults")
	in.NextToken = f.get("NextToken")
	return nil
}

func (in *listDLQSourcesInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.MaxResults = f.optInt("MaxResults")
	in.NextToken = f.get("NextToken")
	return nil
}

func (in *tagQueueInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.Tags = f.strMap("Tag", "Key", "Value")
	return nil
}

func (in *untagQueueInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.TagKeys = f.list("TagKey")
	return nil
}

func (in *addPermissionInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.Label = f.get("Label")
	in.AWSAccountIds = f.list("AWSAccountId")
	in.Actions = f.list("ActionName")
	return nil
}

func (in *removePermissionInput) fromQuery(f form) *apiError {
	in.QueueUrl = f.get("QueueUrl")
	in.Label = f.get("Label")
	return nil
}

// parseForm decodes a URL query string or form body. A malformed one is a
// MalformedQueryString error, never a partial decode.
func parseForm(dst form, raw string) *apiError {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return newErr(kindMalformedQuery, "The query string is malformed: %s", err.Error())
	}
	for k, vs := range v {
		dst[k] = append(dst[k], vs...)
	}
	return nil
}

// The Query protocol's response side: XML in the 2012-11-05 namespace.

const xmlNamespace = "http://queue.amazonaws.com/doc/2012-11-05/"

// xmlWriter builds a response document. Text is escaped as SQS does:
// & < > as entities, " as &quot;, CR as &#xD;. Characters XML cannot carry
// (which can only come from echoed request text) become U+FFFD.
type xmlWriter struct {
	b bytes.Buffer
}

func (w *xmlWriter) open(name string) { w.b.WriteByte('<'); w.b.WriteString(name); w.b.WriteByte('>') }
func (w *xmlWriter) close(name string) {
	w.b.WriteString("</")
	w.b.WriteString(name)
	w.b.WriteByte('>')
}

// elem writes <name>text</name>.
func (w *xmlWriter) elem(name, text string) {
	w.open(name)
	w.text(text)
	w.close(name)
}

// elemOpt writes <name>text</name> unless text is empty.
func (w *xmlWriter) elemOpt(name, text string) {
	if text != "" {
		w.elem(name, text)
	}
}

func (w *xmlWriter) text(s string) {
	// Runs of characters written as they are go out in one WriteString.
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '&' && c != '<' && c != '>' && c != '"' || c == '\t' || c == '\n' {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if c >= utf8.RuneSelf && r != utf8.RuneError && isXMLChar(r) {
			i += size
			continue
		}
		w.b.WriteString(s[start:i])
		if r == utf8.RuneError && size == 1 {
			w.b.WriteString("\uFFFD")
			i++
			start = i
			continue
		}
		switch {
		case r == '&':
			w.b.WriteString("&amp;")
		case r == '<':
			w.b.WriteString("&lt;")
		case r == '>':
			w.b.WriteString("&gt;")
		case r == '"':
			w.b.WriteString("&quot;")
		case r == '\r':
			w.b.WriteString("&#xD;")
		case !isXMLChar(r):
			w.b.WriteString("\uFFFD")
		default:
			w.b.WriteString(s[i : i+size])
		}
		i += size
		start = i
	}
	w.b.WriteString(s[start:])
}

// isXMLChar is the XML 1.0 Char production, which is also the set of
// characters SQS allows in a message body.
func isXMLChar(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD ||
		(r >= 0x20 && r <= 0xD7FF) ||
		(r >= 0xE000 && r <= 0xFFFD) ||
		(r >= 0x10000 && r <= 0x10FFFF)
}

// nameValues writes a map as flattened <elem><kName>k</kName><vName>v</vName></elem>
// entries in key order.
func (w *xmlWriter) nameValues(elem, kName, vName string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		w.open(elem)
		w.elem(kName, k)
		w.elem(vName, m[k])
		w.close(elem)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
