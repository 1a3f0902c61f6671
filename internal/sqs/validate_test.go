package sqs

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
)

func ptr(s string) *string { return &s }

func TestCheckBatchIDs(t *testing.T) {
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "id" + strings.Repeat("x", i)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ids  []string
		kind *errorKind
		msg  string
	}{
		{"ok", ids(10), nil, ""},
		{"empty", nil, kindEmptyBatch, "There should be at least one E in the request."},
		{"20", ids(20), kindTooManyEntries, "Maximum number of entries per request are 10. You have sent 20."},
		{"blank id", []string{""}, kindInvalidBatchEntryID, msgInvalidBatchEntryID},
		{"long id", []string{strings.Repeat("a", 100)}, kindInvalidBatchEntryID, msgInvalidBatchEntryID},
		{"colon", []string{"invalid:id"}, kindInvalidBatchEntryID, msgInvalidBatchEntryID},
		{"dup", []string{"a", "a"}, kindIdsNotDistinct, "Id a repeated."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBatchIDs(tc.ids, "E")
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			if err == nil || err.kind != tc.kind || err.msg != tc.msg {
				t.Fatalf("got %v, want %s: %s", err, tc.kind.code, tc.msg)
			}
		})
	}
}

func TestCheckBody(t *testing.T) {
	if err := checkBody(ptr("")); err == nil || err.kind != kindMissingParameter || err.msg != "The request must contain the parameter MessageBody." {
		t.Fatalf("empty body: %v", err)
	}
	if err := checkBody(nil); err == nil || err.kind != kindMissingParameter {
		t.Fatalf("nil body: %v", err)
	}
	for _, bad := range []string{"a\x01", "\uFFFE", "\xff", "\x00"} {
		if err := checkBody(ptr(bad)); err == nil || err.kind != kindInvalidContents {
			t.Errorf("body %q: %v", bad, err)
		}
	}
	for _, good := range []string{"hi", "\t\n\r", "\U0001F600", "\uE000\uFFFD", "<&>\""} {
		if err := checkBody(ptr(good)); err != nil {
			t.Errorf("body %q: %v", good, err)
		}
	}
}

func TestValidFIFOID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true}, {"!#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", true}, {strings.Repeat("a", 128), true},
		{"", false}, {strings.Repeat("a", 129), false}, {"group 123", false}, {"é", false},
	} {
		if got := validFIFOID(tc.id); got != tc.ok {
			t.Errorf("validFIFOID(%q) = %v", tc.id, got)
		}
	}
	err := errFIFOID("MessageGroupId", "group 123")
	if want := "Value group 123 for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length."; err.msg != want {
		t.Fatalf("text %q", err.msg)
	}
}

func TestCheckMessageAttributes(t *testing.T) {
	str := func(v string) attrValue { return attrValue{DataType: "String", StringValue: &v} }
	for _, tc := range []struct {
		name  string
		attrs map[string]attrValue
		msg   string // "" = valid
	}{
		{"ok", map[string]attrValue{"a": str("x"), "b.c": {DataType: "Binary", BinaryValue: []byte{1}}, "n": {DataType: "Number", StringValue: ptr("1.5")}}, ""},
		{"custom type", map[string]attrValue{"a": {DataType: "String.json", StringValue: ptr("{}")}}, ""},
		{"empty string", map[string]attrValue{"a": str("")}, "Message (user) attribute 'a' must contain a non-empty value of type 'String'."},
		{"bad type", map[string]attrValue{"a": {DataType: "Blob", StringValue: ptr("x")}}, "The type of message (user) attribute 'a' is invalid. You must use only the following supported type prefixes: Binary, Number, String."},
		{"no type", map[string]attrValue{"a": {StringValue: ptr("x")}}, "The message (user) attribute 'a' must contain a non-empty attribute type."},
		{"bad number", map[string]attrValue{"a": {DataType: "Number", StringValue: ptr("x")}}, "Can't parse value of message (user) attribute 'a' of type 'Number'."},
		{"leading dot", map[string]attrValue{".a": str("x")}, "invalid"},
		{"reserved", map[string]attrValue{"AWS.x": str("x")}, "reserved"},
		{"too many", func() map[string]attrValue {
			m := map[string]attrValue{}
			for i := 0; i < 11; i++ {
				m[string(rune('a'+i))] = str("x")
			}
			return m
		}(), "Number of message attributes [11] exceeds the allowed maximum [10]."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkMessageAttributes(tc.attrs)
			switch {
			case tc.msg == "" && err != nil:
				t.Fatalf("unexpected %v", err)
			case tc.msg != "" && err == nil:
				t.Fatal("expected an error")
			case tc.msg != "" && !strings.Contains(err.msg, tc.msg):
				t.Fatalf("got %q, want %q", err.msg, tc.msg)
			}
		})
	}
}

func TestCheckSendEntry(t *testing.T) {
	std := &engine.QueueInfo{Name: "q", Config: engine.DefaultQueueConfig()}
	fifoCfg := engine.DefaultQueueConfig()
	fifoCfg.FIFO = true
	fifo := &engine.QueueInfo{Name: "q.fifo", Config: fifoCfg}
	small := engine.DefaultQueueConfig()
	small.MaxMessageSize = 1024
	smallQ := &engine.QueueInfo{Name: "s", Config: small}
	for _, tc := range []struct {
		name  string
		e     sendEntry
		q     *engine.QueueInfo
		batch bool
		kind  *errorKind
		msg   string
	}{
		{"ok", sendEntry{MessageBody: ptr("hi")}, std, false, nil, ""},
		{"fair queue group", sendEntry{MessageBody: ptr("hi"), MessageGroupId: ptr("g")}, std, false, nil, ""},
		{"delay 901", sendEntry{MessageBody: ptr("hi"), DelaySeconds: parseOptInt("901")}, std, false, kindInvalidParameter, "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."},
		{"fifo delay", sendEntry{MessageBody: ptr("hi"), DelaySeconds: parseOptInt("2"), MessageGroupId: ptr("g"), MessageDeduplicationId: ptr("d")}, fifo, false, kindInvalidParameter, "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."},
		{"fifo no group", sendEntry{MessageBody: ptr("hi"), MessageDeduplicationId: ptr("d")}, fifo, false, kindMissingParameter, "The request must contain the parameter MessageGroupId."},
		{"fifo no group batch", sendEntry{MessageBody: ptr("hi"), MessageDeduplicationId: ptr("d")}, fifo, true, kindInvalidParameter, "The request must contain the parameter MessageGroupId."},
		{"fifo no dedup", sendEntry{MessageBody: ptr("hi"), MessageGroupId: ptr("g")}, fifo, false, kindInvalidParameter, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"},
		{"too large", sendEntry{MessageBody: ptr(strings.Repeat("x", 1025))}, smallQ, false, kindInvalidParameter, "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."},
		{"trace header", sendEntry{MessageBody: ptr("hi"), MessageSystemAttributes: map[string]attrValue{"AWSTraceHeader": {DataType: "String", StringValue: ptr("Root=1")}}}, std, false, nil, ""},
		{"other system attr", sendEntry{MessageBody: ptr("hi"), MessageSystemAttributes: map[string]attrValue{"SenderId": {DataType: "String", StringValue: ptr("x")}}}, std, false, kindInvalidParameter, "Message system attribute name 'SenderId' is invalid."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkSendEntry(&tc.e, &tc.q.Config, tc.batch, "me")
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			if err == nil || err.kind != tc.kind || err.msg != tc.msg {
				t.Fatalf("got %v, want %s: %s", err, tc.kind.code, tc.msg)
			}
		})
	}
}
