package sqs_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/engine"
)

var sluiceFailureAttrs = []string{
	"SluiceDeadLetterReason", "SluiceDeadLetterTimestamp", "SluiceAttempts", "SluiceLastReceiveTimestamp",
	"SluiceErrorClass", "SluiceErrorMessage", "SluiceErrorTrace", "SluiceConsumerId", "SluiceConsumerVersion",
}

func sysNames(names ...string) func(*sqs.ReceiveMessageInput) {
	return func(in *sqs.ReceiveMessageInput) {
		in.MessageAttributeNames = []string{"All"}
		for _, n := range names {
			in.MessageSystemAttributeNames = append(in.MessageSystemAttributeNames, types.MessageSystemAttributeName(n))
		}
	}
}

// TestSluiceSystemAttributes: a message dead-lettered with a consumer's
// failure context keeps its body, user attributes and both MD5s exactly
// (the SDK verifies them on every receive), and the context appears only
// as system attributes asked for by name (or Sluice*), never with All.
func TestSluiceSystemAttributes(t *testing.T) {
	e := newEnv(t)
	e.create("dlq")
	src := e.create("src", "RedrivePolicy", `{"deadLetterTargetArn":"`+e.arn("dlq")+`","maxReceiveCount":5}`)
	dlq := e.url("dlq")
	sent := e.send(src, "poison", func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			"k":   {DataType: aws.String("String"), StringValue: aws.String("v")},
			"bin": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
		}
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-abc")}}
	})
	got := e.receive(src).Messages
	if len(got) != 1 {
		t.Fatal("receive")
	}
	receivedAt := e.clk.Now()
	e.clk.Advance(2 * time.Second)
	// SQS has no verb for "failed, with this context"; the engine's
	// ReportFailure (used by the AMQP and admin front-ends) takes the same
	// receipt handle.
	out, err := e.eng.ReportFailure("src", *got[0].ReceiptHandle, engine.Failure{
		ErrorClass: "KeyError", Message: "no such customer", Trace: "main.go:42",
		ConsumerID: "worker-1", ConsumerVersion: "v1.2.3", Terminal: true,
	})
	if err != nil || !out.DeadLettered {
		t.Fatalf("ReportFailure %+v %v", out, err)
	}
	deadAt := e.clk.Now()

	same := func(m types.Message) {
		t.Helper()
		if *m.MessageId != *sent.MessageId || *m.Body != "poison" || *m.MD5OfBody != *sent.MD5OfMessageBody ||
			m.MD5OfMessageAttributes == nil || *m.MD5OfMessageAttributes != *sent.MD5OfMessageAttributes || len(m.MessageAttributes) != 2 {
			t.Fatalf("dead-lettered copy changed: %+v", m)
		}
		for k := range m.MessageAttributes {
			if strings.HasPrefix(k, "Sluice") {
				t.Fatalf("Sluice context leaked into MessageAttributes: %v", m.MessageAttributes)
			}
		}
	}
	receiveAgain := func(names ...string) map[string]string {
		t.Helper()
		ms := e.receive(dlq, sysNames(names...)).Messages
		if len(ms) != 1 {
			t.Fatalf("DLQ receive returned %d", len(ms))
		}
		same(ms[0])
		// Make it receivable again for the next look.
		if _, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &dlq, ReceiptHandle: ms[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
		return ms[0].Attributes
	}

	// All: the SQS attributes, none of Sluice's.
	attrs := receiveAgain("All")
	if attrs["DeadLetterQueueSourceArn"] != e.arn("src") || attrs["AWSTraceHeader"] != "Root=1-abc" {
		t.Fatalf("All: %v", attrs)
	}
	for k := range attrs {
		if strings.HasPrefix(k, "Sluice") {
			t.Fatalf("All returned %s", k)
		}
	}

	// Exact names: exactly those.
	attrs = receiveAgain("SluiceErrorClass", "SluiceDeadLetterReason", "SenderId")
	if len(attrs) != 3 || attrs["SluiceErrorClass"] != "KeyError" || attrs["SluiceDeadLetterReason"] != "terminal" || attrs["SenderId"] == "" {
		t.Fatalf("named: %v", attrs)
	}

	// The Sluice* wildcard: all of them, with their values.
	attrs = receiveAgain("Sluice*")
	want := map[string]string{
		"SluiceDeadLetterReason":     "terminal",
		"SluiceDeadLetterTimestamp":  strconv.FormatInt(deadAt.UnixMilli(), 10),
		"SluiceAttempts":             "1",
		"SluiceLastReceiveTimestamp": strconv.FormatInt(receivedAt.UnixMilli(), 10),
		"SluiceErrorClass":           "KeyError",
		"SluiceErrorMessage":         "no such customer",
		"SluiceErrorTrace":           "main.go:42",
		"SluiceConsumerId":           "worker-1",
		"SluiceConsumerVersion":      "v1.2.3",
	}
	if len(attrs) != len(want) {
		t.Fatalf("Sluice*: %v", attrs)
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, attrs[k], v)
		}
	}

	// The deprecated AttributeNames works the same, and Query renders them
	// as ordinary <Attribute> entries.
	resp, body := e.query("/", url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {dlq}, "AttributeName.1": {"SluiceConsumerVersion"}, "MessageAttributeName.1": {"All"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "<Attribute><Name>SluiceConsumerVersion</Name><Value>v1.2.3</Value></Attribute>") ||
		!strings.Contains(body, "<MD5OfMessageAttributes>"+*sent.MD5OfMessageAttributes+"</MD5OfMessageAttributes>") || strings.Contains(body, "SluiceErrorClass") {
		t.Fatalf("Query receive: %s", body)
	}
}

// TestSluiceAttributesAbsentWhenNoContext: messages without failure
// context (sent here, or dead-lettered by receive count alone) never carry
// the context attributes, even when named.
func TestSluiceAttributesAbsentWhenNoContext(t *testing.T) {
	e := newEnv(t)
	e.withDLQ("dlq", "src")
	e.send(e.url("src"), "plain")
	m := e.receive(e.url("src"), sysNames(append(sluiceFailureAttrs, "Sluice*")...)).Messages
	if len(m) != 1 || len(m[0].Attributes) != 0 {
		t.Fatalf("plain message: %+v", m)
	}
	e.clk.Advance(31 * time.Second)
	e.receive(e.url("src"))
	m = e.receive(e.url("dlq"), sysNames("Sluice*")).Messages
	if len(m) != 1 || m[0].Attributes["SluiceDeadLetterReason"] != "max_receives" || m[0].Attributes["SluiceAttempts"] != "1" || m[0].Attributes["SluiceErrorClass"] != "" {
		t.Fatalf("dead-lettered by receive count: %+v", m)
	}
}

// TestSluiceRetryPolicy: the attribute's validation, rendering and
// CreateQueue idempotency, and its effect: when a lease ends, the message
// waits out the backoff as a delayed message before it is visible again.
func TestSluiceRetryPolicy(t *testing.T) {
	e := newEnv(t)
	fixed := `{"strategy":"fixed","baseSeconds":20,"capSeconds":20}`
	q := e.create("q", "VisibilityTimeout", "10", "SluiceRetryPolicy", fixed)
	if got := e.attr(q, "SluiceRetryPolicy"); got != fixed {
		t.Fatalf("named: %s", got)
	}
	all, err := e.cli.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &q, AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil || all.Attributes["SluiceRetryPolicy"] != fixed {
		t.Fatalf("All: %v %v", all, err)
	}
	plain := e.create("plain")
	all, err = e.cli.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &plain, AttributeNames: []types.QueueAttributeName{"All"}})
	if _, ok := all.Attributes["SluiceRetryPolicy"]; err != nil || ok || e.attr(plain, "SluiceRetryPolicy") != "" {
		t.Fatalf("a queue without a policy must not report one: %v %v", all.Attributes, err)
	}

	// The lease ends at 10 s; the message is then delayed for 20 s.
	e.send(q, "x")
	if len(e.receive(q).Messages) != 1 {
		t.Fatal("receive")
	}
	e.clk.Advance(10 * time.Second)
	counts := func() string {
		return e.attr(q, "ApproximateNumberOfMessages") + "/" + e.attr(q, "ApproximateNumberOfMessagesNotVisible") + "/" + e.attr(q, "ApproximateNumberOfMessagesDelayed")
	}
	if c := counts(); c != "0/0/1" {
		t.Fatalf("after the lease: visible/in flight/delayed = %s", c)
	}
	if len(e.receive(q).Messages) != 0 {
		t.Fatal("received during the backoff")
	}
	e.clk.Advance(19 * time.Second)
	if c := counts(); c != "0/0/1" {
		t.Fatalf("before the backoff ends: %s", c)
	}
	e.clk.Advance(time.Second)
	m := e.receive(q, sysNames("ApproximateReceiveCount")).Messages
	if len(m) != 1 || m[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("after the backoff: %+v", m)
	}

	set := func(v string) error {
		_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: map[string]string{"SluiceRetryPolicy": v}})
		return err
	}
	for bad, msg := range map[string]string{
		`{"strategy":"full-jitter","baseSeconds":1}`:            "capSeconds is required",
		`{"strategy":"linear","capSeconds":30}`:                 `Unknown strategy "linear"`,
		`{"baseSeconds":10,"capSeconds":5}`:                     "capSeconds must not be less than baseSeconds.",
		`{"baseSeconds":0,"capSeconds":5}`:                      "baseSeconds must be a number",
		`{"capSeconds":43201}`:                                  "capSeconds must be a number",
		`{"cap":30}`:                                            `Unknown key "cap"`,
		`{"strategy":5,"capSeconds":30}`:                        "strategy must be a string.",
		`[1]`:                                                   "The policy must be a JSON object",
		`{"strategy":"fixed","baseSeconds":"x","capSeconds":1}`: "baseSeconds must be a number",
	} {
		err := set(bad)
		wantAPIError(t, err, "InvalidParameterValue", 400, "for parameter SluiceRetryPolicy is invalid. Reason: "+msg)
	}

	// Defaults, fractions and numeric strings; canonical rendering.
	// (In order: the last one stays set for the idempotency check below.)
	for _, c := range []struct{ in, want string }{
		{`{"capSeconds":30}`, `{"strategy":"full-jitter","baseSeconds":1,"capSeconds":30}`},
		{`{"strategy":"exponential","baseSeconds":"0.2","capSeconds":30}`, `{"strategy":"exponential","baseSeconds":0.2,"capSeconds":30}`},
		{`{"strategy":"decorrelated","baseSeconds":0.25,"capSeconds":"1.5"}`, `{"strategy":"decorrelated","baseSeconds":0.25,"capSeconds":1.5}`},
	} {
		if err := set(c.in); err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := e.attr(q, "SluiceRetryPolicy"); got != c.want {
			t.Fatalf("%s rendered as %s, want %s", c.in, got, c.want)
		}
	}

	// CreateQueue idempotency compares the policy like any attribute: an
	// equivalent spelling matches, another value does not.
	e.create("q", "SluiceRetryPolicy", `{"baseSeconds":0.25,"capSeconds":1.5,"strategy":"decorrelated"}`)
	_, err = e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"SluiceRetryPolicy": `{"capSeconds":30}`}})
	wantAPIError(t, err, "QueueAlreadyExists", 400, "a different value for attribute SluiceRetryPolicy")

	// "" removes it: the lease end makes the message visible at once again.
	if err := set(""); err != nil {
		t.Fatal(err)
	}
	if got := e.attr(q, "SluiceRetryPolicy"); got != "" {
		t.Fatalf("not removed: %s", got)
	}
	e.create("q", "SluiceRetryPolicy", "")
	if len(e.receive(q).Messages) != 0 {
		t.Fatal("message visible while still leased")
	}
	e.clk.Advance(10 * time.Second)
	if c := counts(); c != "1/0/0" {
		t.Fatalf("without a policy: %s", c)
	}

	// Query: set and read it like any other attribute.
	resp, body := e.query("/", url.Values{"Action": {"SetQueueAttributes"}, "QueueUrl": {q}, "Attribute.1.Name": {"SluiceRetryPolicy"}, "Attribute.1.Value": {`{"capSeconds":5}`}})
	if resp.StatusCode != 200 {
		t.Fatalf("Query set: %s", body)
	}
	_, body = e.query("/", url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {q}, "AttributeName.1": {"SluiceRetryPolicy"}})
	if !strings.Contains(body, "<Value>{&quot;strategy&quot;:&quot;full-jitter&quot;,&quot;baseSeconds&quot;:1,&quot;capSeconds&quot;:5}</Value>") {
		t.Fatalf("Query get: %s", body)
	}
}
