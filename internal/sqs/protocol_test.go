package sqs_test

import (
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Wire-level behaviour beyond the catalogue: error envelopes, bad bodies,
// and a full Query round trip whose MD5s are checked against the JSON side.

func TestJSONErrorEnvelope(t *testing.T) {
	e := newEnv(t)
	resp, body := e.rawJSON("/", "GetQueueUrl", `{"QueueName":"nope"}`)
	var doc map[string]string
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || doc["__type"] != "com.amazonaws.sqs#QueueDoesNotExist" || doc["message"] != "The specified queue does not exist." ||
		resp.Header.Get("x-amzn-query-error") != "AWS.SimpleQueueService.NonExistentQueue;Sender" || resp.Header.Get("x-amzn-RequestId") == "" {
		t.Fatalf("%d %v %v", resp.StatusCode, resp.Header, body)
	}
}

func TestBadBodies(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{`{`, `[]`, `{"QueueName":5}`, "\xff"} {
		resp, got := e.rawJSON("/", "CreateQueue", body)
		if resp.StatusCode != 400 || !strings.Contains(got, `"__type":"com.amazon.coral.service#SerializationException"`) {
			t.Errorf("body %q: %d %s", body, resp.StatusCode, got)
		}
	}
	// Unknown JSON action.
	resp, got := e.rawJSON("/", "FooBar", `{}`)
	if resp.StatusCode != 400 || !strings.Contains(got, "FooBar") || !strings.HasPrefix(resp.Header.Get("x-amzn-query-error"), "InvalidAction;") {
		t.Errorf("unknown action: %d %s", resp.StatusCode, got)
	}
	// Oversized body: a clean 413 error, not a dropped connection.
	resp, got = e.rawJSON("/", "SendMessage", `{"MessageBody":"`+strings.Repeat("x", 6<<20)+`"}`)
	if resp.StatusCode != 413 || !strings.Contains(got, "RequestEntityTooLarge") {
		t.Errorf("oversized: %d %.200s", resp.StatusCode, got)
	}
	// Malformed form.
	resp, got = e.query("/", url.Values{})
	e.wantQueryError(resp, got, 400, "MissingAction", "Action")
	req, _ := http.NewRequest("POST", e.srv.URL+"/", strings.NewReader("Action=ListQueues&%zz"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, got = e.do(req)
	e.wantQueryError(resp, got, 400, "MalformedQueryString", "")
	// Move tasks on a source that does not exist: the modelled 404.
	_, err := e.cli.ListMessageMoveTasks(e.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(e.arn("q"))})
	wantAPIError(t, err, "ResourceNotFoundException", 404, "The resource that you specified for the SourceArn parameter doesn't exist.")
}

func TestQueryRoundTrip(t *testing.T) {
	e := newEnv(t)
	resp, body := e.query("/", url.Values{"Action": {"CreateQueue"}, "QueueName": {"q"},
		"Attribute.1.Name": {"VisibilityTimeout"}, "Attribute.1.Value": {"40"}, "Tag.1.Key": {"team"}, "Tag.1.Value": {"a"}})
	var created struct {
		CreateQueueResult struct{ QueueUrl string }
	}
	if err := xml.Unmarshal([]byte(body), &created); err != nil || resp.StatusCode != 200 || created.CreateQueueResult.QueueUrl != e.url("q") {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	// The same message sent over JSON gives the same digests.
	attrs := map[string]types.MessageAttributeValue{
		"s": {DataType: aws.String("String"), StringValue: aws.String("v\"al\r")},
		"b": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 255}},
		"n": {DataType: aws.String("Number.int"), StringValue: aws.String("42")},
	}
	jsonOut := e.send(e.url("q"), "body <&>\"\r\n", func(in *sqs.SendMessageInput) { in.MessageAttributes = attrs })

	resp, body = e.query("/"+account+"/q", url.Values{"Action": {"SendMessage"}, "MessageBody": {"body <&>\"\r\n"},
		"MessageAttribute.1.Name": {"s"}, "MessageAttribute.1.Value.DataType": {"String"}, "MessageAttribute.1.Value.StringValue": {"v\"al\r"},
		"MessageAttribute.2.Name": {"b"}, "MessageAttribute.2.Value.DataType": {"Binary"}, "MessageAttribute.2.Value.BinaryValue": {"AAEC/w=="},
		"MessageAttribute.3.Name": {"n"}, "MessageAttribute.3.Value.DataType": {"Number.int"}, "MessageAttribute.3.Value.StringValue": {"42"}})
	var sent struct {
		SendMessageResult struct{ MessageId, MD5OfMessageBody, MD5OfMessageAttributes string }
	}
	if err := xml.Unmarshal([]byte(body), &sent); err != nil || resp.StatusCode != 200 {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	if sent.SendMessageResult.MD5OfMessageBody != *jsonOut.MD5OfMessageBody || sent.SendMessageResult.MD5OfMessageAttributes != *jsonOut.MD5OfMessageAttributes {
		t.Fatalf("Query digests %+v differ from JSON %v/%v", sent.SendMessageResult, *jsonOut.MD5OfMessageBody, *jsonOut.MD5OfMessageAttributes)
	}

	// Receive both over Query; CR must survive the XML round trip.
	resp, body = e.query("/", url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {e.url("q")}, "MaxNumberOfMessages": {"10"},
		"MessageAttributeName.1": {"All"}, "AttributeName.1": {"ApproximateReceiveCount"}})
	var got struct {
		ReceiveMessageResult struct {
			Message []struct {
				MessageId, ReceiptHandle, MD5OfBody, Body, MD5OfMessageAttributes string
				Attribute                                                         []struct{ Name, Value string }
				MessageAttribute                                                  []struct {
					Name  string
					Value struct{ StringValue, BinaryValue, DataType string }
				}
			}
		}
	}
	if err := xml.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 || len(got.ReceiveMessageResult.Message) != 2 {
		t.Fatalf("receive: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "&#xD;") || !strings.Contains(body, "&quot;") {
		t.Errorf("CR and quote must be escaped: %s", body)
	}
	for _, m := range got.ReceiveMessageResult.Message {
		if m.Body != "body <&>\"\r\n" || m.MD5OfBody != *jsonOut.MD5OfMessageBody || m.MD5OfMessageAttributes != *jsonOut.MD5OfMessageAttributes || len(m.MessageAttribute) != 3 {
			t.Errorf("message %+v", m)
		}
		if len(m.Attribute) != 1 || m.Attribute[0].Name != "ApproximateReceiveCount" || m.Attribute[0].Value != "1" {
			t.Errorf("attributes %+v", m.Attribute)
		}
		resp, body = e.query("/", url.Values{"Action": {"DeleteMessage"}, "QueueUrl": {e.url("q")}, "ReceiptHandle": {m.ReceiptHandle}})
		if resp.StatusCode != 200 || !strings.Contains(body, "<DeleteMessageResponse") {
			t.Errorf("delete: %d %s", resp.StatusCode, body)
		}
	}

	// Tags and queue listing over Query, via GET.
	req, _ := http.NewRequest("GET", e.url("q")+"?Action=ListQueueTags", nil)
	resp, body = e.do(req)
	if resp.StatusCode != 200 || !strings.Contains(body, "<Tag><Key>team</Key><Value>a</Value></Tag>") {
		t.Fatalf("tags: %d %s", resp.StatusCode, body)
	}
}

// TestReceiveAttributeFilter checks that MD5OfMessageAttributes covers only
// the attributes returned (reference §3.3).
func TestReceiveAttributeFilter(t *testing.T) {
	e := newEnv(t)
	q := e.create("q")
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	e.send(q, "x", func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{"order.id": str("1"), "order.kind": str("k"), "other": str("o")}
	})
	only := e.send(q, "x", func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{"order.id": str("1"), "order.kind": str("k")}
	})
	for _, m := range e.receive(q, func(in *sqs.ReceiveMessageInput) { in.MessageAttributeNames = []string{"order.*"} }).Messages {
		if len(m.MessageAttributes) != 2 || *m.MD5OfMessageAttributes != *only.MD5OfMessageAttributes {
			t.Fatalf("filtered attributes %v md5 %s", m.MessageAttributes, *m.MD5OfMessageAttributes)
		}
	}
}
