package sqs

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fast JSON decoder and encoders against encoding/json: same results,
// same errors, same bytes.

// hotShapes makes a fresh value of each request shape fastDecodeJSON knows.
var hotShapes = []func() any{
	func() any { return new(sendMessageBatchInput) },
	func() any { return new(sendMessageInput) },
	func() any { return new(receiveMessageInput) },
	func() any { return new(deleteMessageInput) },
	func() any { return new(changeVisibilityInput) },
	func() any { return new(deleteBatchInput) },
	func() any { return new(changeVisibilityBatchInput) },
}

// decodeOld is decodeJSON as it was before fastDecodeJSON.
func decodeOld(body []byte, in any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeJSONStd(body, in)
}

func sameErr(a, b *apiError) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.kind == b.kind && a.msg == b.msg && a.queryMsg == b.queryMsg
}

// checkDecodeDiff decodes body into shape with both decoders.
func checkDecodeDiff(t *testing.T, shape int, body []byte) {
	t.Helper()
	mk := hotShapes[shape%len(hotShapes)]
	fast, std := mk(), mk()
	if fastDecodeJSON(body, fast) {
		if err := decodeOld(body, std); err != nil {
			t.Fatalf("%T: fast decoder accepted what encoding/json rejects (%v): %q", fast, err, body)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%T: decoders differ on %q:\nfast %+v\nstd  %+v", fast, body, fast, std)
		}
	} else if !reflect.DeepEqual(fast, mk()) {
		t.Fatalf("%T: fast decoder gave up but modified its target: %q", fast, body)
	}
	// And through decodeJSON, as the handler calls it.
	a, b := mk(), mk()
	ea, eb := decodeJSON(body, a), decodeOld(body, b)
	if !sameErr(ea, eb) {
		t.Fatalf("%T: errors differ on %q: %v vs %v", a, body, ea, eb)
	}
	if ea == nil && !reflect.DeepEqual(a, b) {
		t.Fatalf("%T: results differ on %q:\n%+v\n%+v", a, body, a, b)
	}
}

var decodeSeeds = []struct {
	shape int
	body  string
}{
	{0, `{"QueueUrl":"http://localhost:9324/000000000000/bench","Entries":[{"Id":"0","MessageBody":"hello"},{"Id":"1","MessageBody":"w\u00f6rld \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t","DelaySeconds":3}]}`},
	{0, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageBody":"x","MessageAttributes":{"s":{"DataType":"String","StringValue":"v"},"b":{"DataType":"Binary","BinaryValue":"AAE="},"n":null,"l":{"DataType":"String","StringListValues":["a",null],"BinaryListValues":["AA==",null]}},"MessageSystemAttributes":{"AWSTraceHeader":{"DataType":"String","StringValue":"Root=1"}},"MessageGroupId":"g","MessageDeduplicationId":"d"}]}`},
	{0, `{"queueurl":"q","ENTRIES":[null,{"id":"a","messagebody":null,"delayseconds":"12","Unknown":{"x":[1,2.5e-3,true,false,null,{}]}}]}`},
	{0, `{"QueueUrl":"q","Entries":[]}`},
	{0, `{"QueueUrl":"q","Entries":null,"QueueUrl":"r"}`},
	{0, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageBody":"x"}],"Entries":[{"Id":"b"}]}`},
	{0, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageAttributes":{"b":{"DataType":"Binary","BinaryValue":"!!"}}}]}`},
	{0, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageAttributes":{"b":{"DataType":"Binary","BinaryValue":""}}}]}`},
	{0, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageAttributes":{"b":{"DataType":"Binary","BinaryValue":[1,2]}}}]}`},
	{0, `{"QueueUrl":"q","Entries":{"Id":"a"}}`},
	{0, "{\"QueueUrl\":\"q\u212a\",\"Entries\":[{\"\u212aey\":1,\"Me\u017fsageBody\":\"x\"}]}"},
	{0, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageBody":"\ud800\udc00\ud800x\udc00\ud800\ud800"}]}`},
	{0, " \t\r\n{ \"QueueUrl\" : \"q\" , \"Entries\" : [ { \"Id\" : \"a\" } ] } \n"},
	{1, `{"QueueUrl":"http://h/000000000000/q","MessageBody":"hi","MessageAttributes":{"a":{"DataType":"String","StringValue":"v"}},"Id":"ignored","DelaySeconds":1.5}`},
	{1, `{"QueueUrl":"q","MessageBody":"hi","DelaySeconds":{"a": [1, 2]},"MessageGroupId":null}`},
	{1, `{"QueueUrl":"q","MessageBody":5}`},
	{1, `null`},
	{1, ` null `},
	{1, `[]`},
	{1, `"x"`},
	{1, `{"QueueUrl":"q"} x`},
	{1, `{"QueueUrl":"q",}`},
	{1, `{"QueueUrl":"q\x01"}`},
	{1, "{\"QueueUrl\":\"\xff\"}"},
	{1, `{"QueueUrl":"\u12"}`},
	{1, `{"DelaySeconds":-0.0e+5}`},
	{1, `{"DelaySeconds":01}`},
	{1, `{"DelaySeconds":-}`},
	{1, `{"DelaySeconds":1.}`},
	{1, `{"DelaySeconds":tru}`},
	{2, `{"QueueUrl":"q","MaxNumberOfMessages":10,"WaitTimeSeconds":0,"VisibilityTimeout":"30","AttributeNames":["All"],"MessageSystemAttributeNames":[],"MessageAttributeNames":["a.*",null],"ReceiveRequestAttemptId":"x"}`},
	{2, `{"QueueUrl":"q","AttributeNames":null,"MaxNumberOfMessages":null}`},
	{2, `{"QueueUrl":"q","AttributeNames":[1]}`},
	{3, `{"QueueUrl":"q","ReceiptHandle":"AQEB\/+x=="}`},
	{3, `{"QueueUrl":"q","ReceiptHandle":"h","VisibilityTimeout":5}`},
	{4, `{"QueueUrl":"q","ReceiptHandle":"h","VisibilityTimeout":5}`},
	{4, `{"QueueUrl":"q","ReceiptHandle":"h","VisibilityTimeout":"abc"}`},
	{5, `{"QueueUrl":"q","Entries":[{"Id":"0","ReceiptHandle":"h0"},{"Id":"1","ReceiptHandle":"h1"},null]}`},
	{5, `{"QueueUrl":"q","Entries":[{"Id":"0","Id":"1"}]}`},
	{6, `{"QueueUrl":"q","Entries":[{"Id":"0","ReceiptHandle":"h0","VisibilityTimeout":0}]}`},
	{6, `{"QueueUrl":"q","Entries":[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]}`},
	{6, `{"x":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`},
}

func TestJSONDecoderMatchesEncodingJSON(t *testing.T) {
	for _, s := range decodeSeeds {
		for shape := range hotShapes {
			checkDecodeDiff(t, shape, []byte(s.body))
		}
	}
}

// TestJSONDecoderFastPath: the requests SDKs and the bench tool send take
// the fast path (the fallback would be correct, only slow).
func TestJSONDecoderFastPath(t *testing.T) {
	for _, s := range decodeSeeds[:4] {
		if !fastDecodeJSON([]byte(s.body), hotShapes[s.shape]()) {
			t.Errorf("fell back on %s", s.body)
		}
	}
}

// FuzzJSONDecoderDiff: for every hot request shape, fastDecodeJSON either
// gives up without touching its target or agrees with encoding/json, and
// decodeJSON returns exactly what it returned before the fast path.
func FuzzJSONDecoderDiff(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(uint8(s.shape), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, shape uint8, body []byte) {
		checkDecodeDiff(t, int(shape), body)
	})
}

// appendJSONCases are outputs rendered by both encoders.
func appendJSONCases(a, b, c string, bin []byte) []output {
	return []output{
		&sendMessageOutput{MessageId: a, MD5OfMessageBody: b},
		&sendMessageOutput{MessageId: a, MD5OfMessageBody: b, MD5OfMessageAttributes: c, MD5OfMessageSystemAttributes: a, SequenceNumber: c},
		&sendMessageBatchOutput{},
		&sendMessageBatchOutput{Successful: []sendBatchResultEntry{}, Failed: []batchError{}},
		&sendMessageBatchOutput{
			Successful: []sendBatchResultEntry{{Id: a, sendMessageOutput: sendMessageOutput{MessageId: b, MD5OfMessageBody: c, SequenceNumber: a}}, {Id: c}},
			Failed:     []batchError{{Id: a, SenderFault: true, Code: b, Message: c}, {Id: b, Code: c}},
		},
		&handleBatchOutput{},
		&handleBatchOutput{Successful: []idEntry{{Id: a}, {Id: b}}, Failed: []batchError{{Id: c, Code: a}}, entryName: "x"},
		&receiveMessageOutput{},
		&receiveMessageOutput{Messages: []messageOut{}},
		&receiveMessageOutput{Messages: []messageOut{
			{MessageId: a, ReceiptHandle: b, MD5OfBody: c, Body: a + b + c},
			{MessageId: c, Body: b, Attributes: map[string]string{a: b, c: a, "SentTimestamp": "1"}, MD5OfMessageAttributes: a,
				MessageAttributes: map[string]messageAttributeOut{a: {DataType: b, StringValue: c}, b: {DataType: "Binary", BinaryValue: bin}, c: {}}},
			{Attributes: map[string]string{}, MessageAttributes: map[string]messageAttributeOut{}},
		}},
	}
}

func checkAppendJSON(t *testing.T, a, b, c string, bin []byte) {
	t.Helper()
	for _, out := range appendJSONCases(a, b, c, bin) {
		got := out.(jsonAppender).appendJSON(nil)
		if want := marshalJSON(out); !bytes.Equal(got, want) {
			t.Fatalf("%T:\ngot  %s\nwant %s", out, got, want)
		}
	}
}

func TestAppendJSONMatches(t *testing.T) {
	checkAppendJSON(t, "a", "b", "c", []byte{0, 1, 2})
	checkAppendJSON(t, "", "", "", nil)
	checkAppendJSON(t, "<&>\"\\/\b\f\n\r\t\x00\x1f\x7f", "\u2028\u2029 \xff\xfe é 😀 \ufffd", "0123456789abcdef0123456789abcdef", []byte{})
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("a", "b", "c", []byte{1})
	f.Add("<&>\"\\/\b\f\n\r\t\x00\x1f\x7f", "\u2028\u2029 \xff\xfe é 😀 \ufffd", "", []byte{})
	f.Fuzz(func(t *testing.T, a, b, c string, bin []byte) {
		checkAppendJSON(t, a, b, c, bin)
	})
}

// TestFirstInvalidCharFastPath: the 8-byte ASCII path agrees with the
// rune-by-rune definition.
func TestFirstInvalidCharFastPath(t *testing.T) {
	slow := func(s string) (rune, bool) {
		for i := 0; i < len(s); {
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
	base := "0123456789abcdefghijklmnopqrstuvwxyz~\x7f !"
	for _, bad := range []string{"", "\x00", "\x01", "\t", "\n", "\r", "\x1f", "\x80", "\xff", "é", "\ufffe", "\uffff", "😀", "\xed\xa0\x80"} {
		for i := 0; i <= len(base); i++ {
			s := base[:i] + bad + base[i:]
			r1, ok1 := firstInvalidChar(s)
			r2, ok2 := slow(s)
			if r1 != r2 || ok1 != ok2 {
				t.Fatalf("%q: %q %v, want %q %v", s, r1, ok1, r2, ok2)
			}
		}
	}
}

// TestQueueNameSegments: queueName's segment scan agrees with splitting the
// path on "/" and dropping empty segments.
func TestQueueNameSegments(t *testing.T) {
	ref := func(p string) (name, acct string) {
		var segs []string
		for _, s := range strings.Split(p, "/") {
			if s != "" {
				segs = append(segs, s)
			}
		}
		if len(segs) > 0 {
			name = segs[len(segs)-1]
		}
		if len(segs) > 1 {
			acct = segs[len(segs)-2]
		}
		return name, acct
	}
	for _, p := range []string{"", "/", "//", "q", "/q", "q/", "a/q", "/a/q/", "a//q", "//a//q//", "x/a/q", "/000000000000/q.fifo"} {
		name, rest := lastSegment(p)
		acct, _ := lastSegment(rest)
		if wn, wa := ref(p); name != wn || acct != wa {
			t.Errorf("%q: %q %q, want %q %q", p, name, acct, wn, wa)
		}
	}
}

// xmlTextRef is xmlWriter.text as it was, one rune at a time.
func xmlTextRef(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\uFFFD")
			i++
			continue
		}
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&quot;")
		case r == '\r':
			b.WriteString("&#xD;")
		case !isXMLChar(r):
			b.WriteString("\uFFFD")
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func FuzzXMLText(f *testing.F) {
	f.Add("plain ascii text")
	f.Add("<a href=\"x\">&amp;</a>\r\n\t\x00\x7f\x80\xff é \ufffd \ufffe 😀 \xed\xa0\x80")
	f.Fuzz(func(t *testing.T, s string) {
		var w xmlWriter
		w.text(s)
		if got, want := w.b.String(), xmlTextRef(s); got != want {
			t.Fatalf("text(%q) = %q, want %q", s, got, want)
		}
	})
}
