package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// RouteOf must name the queue the handler acts on. The table tests state
// what it names for requests as SDKs send them; every table request is
// then served by a real handler whose engine records the queue names it is
// handed (recordingEngine), and checkAgreement compares the two.
// FuzzRouteOf does the same for arbitrary requests.

const (
	rtHost = "sqs.example" // a name in request URLs only: nothing listens
	rtURL  = "http://" + rtHost + "/000000000000/"
	rtARN  = "arn:aws:sqs:us-east-1:000000000000:"
)

// routeReq is an HTTP request as the route tests and the fuzzer describe
// it.
type routeReq struct {
	method, path, rawQuery, contentType, target string
	body                                        string
}

// request builds the request (its Body reads body, for the handler).
func (q routeReq) request(ctx context.Context) *http.Request {
	r := &http.Request{
		Method:        q.method,
		URL:           &url.URL{Scheme: "http", Host: rtHost, Path: q.path, RawQuery: q.rawQuery},
		Host:          rtHost,
		Header:        http.Header{},
		Body:          io.NopCloser(strings.NewReader(q.body)),
		ContentLength: int64(len(q.body)),
	}
	if q.contentType != "" {
		r.Header.Set("Content-Type", q.contentType)
	}
	if q.target != "" {
		r.Header.Set("X-Amz-Target", q.target)
	}
	return r.WithContext(ctx)
}

// jsonReq is an AWS JSON 1.0 request as aws-sdk-go-v2 and botocore send it.
func jsonReq(action string, body any) routeReq {
	b, ok := body.(string)
	if !ok {
		b = string(marshalJSON(body))
	}
	return routeReq{method: "POST", path: "/", contentType: "application/x-amz-json-1.0", target: "AmazonSQS." + action, body: b}
}

// queryReq is a Query request as botocore sends it: a form POST of Action,
// Version and the members (name, value pairs), to path.
func queryReq(path, action string, kv ...string) routeReq {
	v := url.Values{"Action": {action}, "Version": {"2012-11-05"}}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return routeReq{method: "POST", path: path, contentType: "application/x-www-form-urlencoded; charset=utf-8", body: v.Encode()}
}

type obj = map[string]any

type routeCase struct {
	name string
	req  routeReq
	want Route
	// touch: the handler must hand want.Queue to the engine (so the
	// agreement check is not vacuous).
	touch bool
}

// urlActions are the actions that name their queue in QueueUrl (or the
// queue path), with the other members of a valid request in each protocol.
var urlActions = []struct {
	action string
	json   obj
	query  []string
}{
	{"SendMessage", obj{"MessageBody": "hi", "MessageGroupId": "g", "MessageDeduplicationId": "d"},
		[]string{"MessageBody", "hi", "MessageGroupId", "g", "MessageDeduplicationId", "d"}},
	{"SendMessageBatch", obj{"Entries": []obj{{"Id": "1", "MessageBody": "hi", "MessageGroupId": "g", "MessageDeduplicationId": "d"}}},
		[]string{"SendMessageBatchRequestEntry.1.Id", "1", "SendMessageBatchRequestEntry.1.MessageBody", "hi",
			"SendMessageBatchRequestEntry.1.MessageGroupId", "g", "SendMessageBatchRequestEntry.1.MessageDeduplicationId", "d"}},
	{"ReceiveMessage", obj{"MaxNumberOfMessages": 10, "AttributeNames": []string{"All"}},
		[]string{"MaxNumberOfMessages", "10", "AttributeName.1", "All"}},
	{"DeleteMessage", obj{"ReceiptHandle": "rh"}, []string{"ReceiptHandle", "rh"}},
	{"DeleteMessageBatch", obj{"Entries": []obj{{"Id": "1", "ReceiptHandle": "rh"}}},
		[]string{"DeleteMessageBatchRequestEntry.1.Id", "1", "DeleteMessageBatchRequestEntry.1.ReceiptHandle", "rh"}},
	{"ChangeMessageVisibility", obj{"ReceiptHandle": "rh", "VisibilityTimeout": 5},
		[]string{"ReceiptHandle", "rh", "VisibilityTimeout", "5"}},
	{"ChangeMessageVisibilityBatch", obj{"Entries": []obj{{"Id": "1", "ReceiptHandle": "rh", "VisibilityTimeout": 5}}},
		[]string{"ChangeMessageVisibilityBatchRequestEntry.1.Id", "1", "ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle", "rh",
			"ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout", "5"}},
	{"DeleteQueue", obj{}, nil},
	{"GetQueueAttributes", obj{"AttributeNames": []string{"All"}}, []string{"AttributeName.1", "All"}},
	{"SetQueueAttributes", obj{"Attributes": obj{"VisibilityTimeout": "5"}},
		[]string{"Attribute.1.Name", "VisibilityTimeout", "Attribute.1.Value", "5"}},
	{"PurgeQueue", obj{}, nil},
	{"ListDeadLetterSourceQueues", obj{"MaxResults": 10}, []string{"MaxResults", "10"}},
	{"TagQueue", obj{"Tags": obj{"team": "a"}}, []string{"Tag.1.Key", "team", "Tag.1.Value", "a"}},
	{"UntagQueue", obj{"TagKeys": []string{"team"}}, []string{"TagKey.1", "team"}},
	{"ListQueueTags", obj{}, nil},
	{"AddPermission", obj{"Label": "l", "AWSAccountIds": []string{"111122223333"}, "Actions": []string{"SendMessage"}},
		[]string{"Label", "l", "AWSAccountId.1", "111122223333", "ActionName.1", "SendMessage"}},
	{"RemovePermission", obj{"Label": "l"}, []string{"Label", "l"}},
}

func with(m obj, kv ...any) obj {
	out := obj{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// urlCases are, for every QueueUrl action, in both protocols: the queue
// named by QueueUrl, by the queue path, by both (QueueUrl wins), a FIFO
// queue, and a QueueUrl naming an invalid queue name.
func urlCases() []routeCase {
	var cs []routeCase
	for _, a := range urlActions {
		r := func(q string) Route { return Route{Action: a.action, Queue: q} }
		qkv := func(kv ...string) []string { return append(kv, a.query...) }
		cs = append(cs,
			routeCase{a.action + "/json", jsonReq(a.action, with(a.json, "QueueUrl", rtURL+"orders")), r("orders"), true},
			routeCase{a.action + "/json/fifo", jsonReq(a.action, with(a.json, "QueueUrl", rtURL+"orders.fifo")), r("orders.fifo"), true},
			routeCase{a.action + "/json/path", func() routeReq {
				q := jsonReq(a.action, a.json)
				q.path = "/000000000000/orders"
				return q
			}(), r("orders"), true},
			routeCase{a.action + "/json/url-over-path", func() routeReq {
				q := jsonReq(a.action, with(a.json, "QueueUrl", rtURL+"orders.fifo"))
				q.path = "/000000000000/orders"
				return q
			}(), r("orders.fifo"), true},
			routeCase{a.action + "/json/invalid-name", jsonReq(a.action, with(a.json, "QueueUrl", rtURL+"no%20such")), r(""), false},
			routeCase{a.action + "/json/no-queue", jsonReq(a.action, a.json), r(""), false},
			routeCase{a.action + "/query", queryReq("/", a.action, qkv("QueueUrl", rtURL+"orders")...), r("orders"), true},
			routeCase{a.action + "/query/fifo", queryReq("/", a.action, qkv("QueueUrl", rtURL+"orders.fifo")...), r("orders.fifo"), true},
			routeCase{a.action + "/query/path", queryReq("/000000000000/orders", a.action, a.query...), r("orders"), true},
			routeCase{a.action + "/query/path-fifo", queryReq("/000000000000/orders.fifo", a.action, a.query...), r("orders.fifo"), true},
			routeCase{a.action + "/query/url-over-path", queryReq("/000000000000/orders", a.action, qkv("QueueUrl", rtURL+"orders-dlq")...), r("orders-dlq"), true},
			routeCase{a.action + "/query/invalid-name", queryReq("/", a.action, qkv("QueueUrl", rtURL+"bad:name")...), r(""), false},
		)
	}
	return cs
}

// redrive is a RedrivePolicy naming dlqARN.
func redrive(dlqARN string) string {
	return `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":"3"}`
}

// testTaskHandle is a TaskHandle as the handler encodes it.
func testTaskHandle(source string) string {
	h := New(nil, Options{})
	return h.taskHandle(&engine.MoveTask{ID: "0f5b3c2a", Source: source})
}

func namedCases() []routeCase {
	create := func(q string) Route { return Route{Action: "CreateQueue", Queue: q, Create: true} }
	createDLT := func(q, dlt string) Route {
		return Route{Action: "CreateQueue", Queue: q, Create: true, DeadLetterTarget: dlt}
	}
	only := func(action string) Route { return Route{Action: action} }
	on := func(action, q string) Route { return Route{Action: action, Queue: q} }
	send := func(qurl string) obj { return obj{"QueueUrl": qurl, "MessageBody": "hi"} }
	withCT := func(q routeReq, ct string) routeReq { q.contentType = ct; return q }
	fifoAttrs := obj{"FifoQueue": "true", "RedrivePolicy": redrive(rtARN + "orders-dlq.fifo")}

	return []routeCase{
		// CreateQueue.
		{"CreateQueue/json", jsonReq("CreateQueue", obj{"QueueName": "new"}), create("new"), true},
		{"CreateQueue/json/fifo", jsonReq("CreateQueue", obj{"QueueName": "new.fifo", "Attributes": obj{"FifoQueue": "true"}}), create("new.fifo"), true},
		{"CreateQueue/json/existing", jsonReq("CreateQueue", obj{"QueueName": "orders"}), create("orders"), true},
		{"CreateQueue/json/redrive", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": redrive(rtARN + "orders-dlq")}}), createDLT("new", "orders-dlq"), true},
		{"CreateQueue/json/redrive-fifo", jsonReq("CreateQueue", obj{"QueueName": "new.fifo", "Attributes": fifoAttrs}), createDLT("new.fifo", "orders-dlq.fifo"), true},
		{"CreateQueue/json/redrive-number-count", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": `{"maxReceiveCount":5,"deadLetterTargetArn":"` + rtARN + `orders-dlq"}`}}), createDLT("new", "orders-dlq"), true},
		{"CreateQueue/json/redrive-other-account", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": redrive("arn:aws:sqs:eu-west-1:123456789012:elsewhere")}}), createDLT("new", "elsewhere"), false},
		{"CreateQueue/json/redrive-not-json", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": "{"}}), create("new"), false},
		{"CreateQueue/json/redrive-key-case", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": `{"DeadLetterTargetArn":"` + rtARN + `orders-dlq","maxReceiveCount":3}`}}), create("new"), false},
		{"CreateQueue/json/redrive-arn-number", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": `{"deadLetterTargetArn":5,"maxReceiveCount":3}`}}), create("new"), false},
		{"CreateQueue/json/redrive-not-arn", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": redrive("orders-dlq")}}), create("new"), false},
		{"CreateQueue/json/redrive-bad-name", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"RedrivePolicy": redrive(rtARN + "bad!name")}}), create("new"), false},
		{"CreateQueue/json/redrive-attr-case", jsonReq("CreateQueue", obj{"QueueName": "new", "Attributes": obj{"redrivePolicy": redrive(rtARN + "orders-dlq")}}), create("new"), false},
		{"CreateQueue/json/place-with", jsonReq("CreateQueue", obj{"QueueName": "orders-parked", "tags": obj{PlaceWithTag: "orders", "team": "a"}}), Route{Action: "CreateQueue", Queue: "orders-parked", Create: true, PlaceWith: "orders"}, true},
		{"CreateQueue/json/place-with-bad-name", jsonReq("CreateQueue", obj{"QueueName": "new", "tags": obj{PlaceWithTag: "a b"}}), create("new"), false},
		{"CreateQueue/json/place-with-key-case", jsonReq("CreateQueue", obj{"QueueName": "new", "tags": obj{"Sluice:Place-With": "orders"}}), create("new"), false},
		{"CreateQueue/query/place-with", queryReq("/", "CreateQueue", "QueueName", "orders-parked", "Tag.1.Key", PlaceWithTag, "Tag.1.Value", "orders"),
			Route{Action: "CreateQueue", Queue: "orders-parked", Create: true, PlaceWith: "orders"}, true},
		{"CreateQueue/json/no-name", jsonReq("CreateQueue", obj{}), create(""), false},
		{"CreateQueue/json/invalid-name", jsonReq("CreateQueue", obj{"QueueName": "a b"}), create(""), false},
		{"CreateQueue/json/long-name", jsonReq("CreateQueue", obj{"QueueName": strings.Repeat("a", 81)}), create(""), false},
		{"CreateQueue/json/attributes-not-strings", jsonReq("CreateQueue", `{"QueueName":"new","Attributes":{"DelaySeconds":5}}`), create(""), false},
		{"CreateQueue/query", queryReq("/", "CreateQueue", "QueueName", "new"), create("new"), true},
		{"CreateQueue/query/fifo", queryReq("/", "CreateQueue", "QueueName", "new.fifo", "Attribute.1.Name", "FifoQueue", "Attribute.1.Value", "true"), create("new.fifo"), true},
		{"CreateQueue/query/redrive", queryReq("/", "CreateQueue", "QueueName", "new",
			"Attribute.1.Name", "VisibilityTimeout", "Attribute.1.Value", "40",
			"Attribute.2.Name", "RedrivePolicy", "Attribute.2.Value", redrive(rtARN+"orders-dlq")), createDLT("new", "orders-dlq"), true},
		{"CreateQueue/query/redrive-sparse-index", queryReq("/", "CreateQueue", "QueueName", "new.fifo",
			"Attribute.7.Name", "RedrivePolicy", "Attribute.7.Value", redrive(rtARN+"orders-dlq.fifo"),
			"Attribute.3.Name", "FifoQueue", "Attribute.3.Value", "true"), createDLT("new.fifo", "orders-dlq.fifo"), true},
		{"CreateQueue/query/redrive-name-repeated", queryReq("/", "CreateQueue", "QueueName", "new",
			"Attribute.1.Name", "RedrivePolicy", "Attribute.1.Value", redrive(rtARN+"orders"),
			"Attribute.2.Name", "RedrivePolicy", "Attribute.2.Value", redrive(rtARN+"orders-dlq")), createDLT("new", "orders-dlq"), true},
		{"CreateQueue/query/queue-path", queryReq("/000000000000/orders", "CreateQueue", "QueueName", "new"), create(""), false},

		// GetQueueUrl names its queue in QueueName, even on another
		// queue's path.
		{"GetQueueUrl/json", jsonReq("GetQueueUrl", obj{"QueueName": "orders"}), on("GetQueueUrl", "orders"), true},
		{"GetQueueUrl/json/fifo", jsonReq("GetQueueUrl", obj{"QueueName": "orders.fifo"}), on("GetQueueUrl", "orders.fifo"), true},
		{"GetQueueUrl/json/owner", jsonReq("GetQueueUrl", obj{"QueueName": "orders", "QueueOwnerAWSAccountId": "000000000000"}), on("GetQueueUrl", "orders"), true},
		{"GetQueueUrl/json/other-owner", jsonReq("GetQueueUrl", obj{"QueueName": "orders", "QueueOwnerAWSAccountId": "123456789012"}), on("GetQueueUrl", "orders"), false},
		{"GetQueueUrl/json/no-name", jsonReq("GetQueueUrl", obj{}), only("GetQueueUrl"), false},
		{"GetQueueUrl/query", queryReq("/", "GetQueueUrl", "QueueName", "orders"), on("GetQueueUrl", "orders"), true},
		{"GetQueueUrl/query/other-queue-path", queryReq("/000000000000/orders", "GetQueueUrl", "QueueName", "orders-dlq"), on("GetQueueUrl", "orders-dlq"), true},
		{"GetQueueUrl/query/path-only", queryReq("/000000000000/orders", "GetQueueUrl"), only("GetQueueUrl"), false},

		// Move tasks: the source queue, from SourceArn or the TaskHandle.
		{"StartMessageMoveTask/json", jsonReq("StartMessageMoveTask", obj{"SourceArn": rtARN + "orders-dlq"}), on("StartMessageMoveTask", "orders-dlq"), true},
		{"StartMessageMoveTask/json/destination", jsonReq("StartMessageMoveTask", obj{"SourceArn": rtARN + "orders-dlq", "DestinationArn": rtARN + "orders", "MaxNumberOfMessagesPerSecond": 10}), on("StartMessageMoveTask", "orders-dlq"), true},
		{"StartMessageMoveTask/json/fifo", jsonReq("StartMessageMoveTask", obj{"SourceArn": rtARN + "orders-dlq.fifo"}), on("StartMessageMoveTask", "orders-dlq.fifo"), true},
		{"StartMessageMoveTask/json/other-region", jsonReq("StartMessageMoveTask", obj{"SourceArn": "arn:aws-cn:sqs:cn-north-1:123456789012:orders-dlq"}), on("StartMessageMoveTask", "orders-dlq"), false},
		{"StartMessageMoveTask/json/not-arn", jsonReq("StartMessageMoveTask", obj{"SourceArn": rtURL + "orders-dlq"}), only("StartMessageMoveTask"), false},
		{"StartMessageMoveTask/json/not-sqs", jsonReq("StartMessageMoveTask", obj{"SourceArn": "arn:aws:sns:us-east-1:000000000000:orders-dlq"}), only("StartMessageMoveTask"), false},
		{"StartMessageMoveTask/query", queryReq("/", "StartMessageMoveTask", "SourceArn", rtARN+"orders-dlq"), on("StartMessageMoveTask", "orders-dlq"), true},
		{"StartMessageMoveTask/query/queue-path", queryReq("/000000000000/orders-dlq", "StartMessageMoveTask", "SourceArn", rtARN+"orders-dlq"), only("StartMessageMoveTask"), false},
		{"ListMessageMoveTasks/json", jsonReq("ListMessageMoveTasks", obj{"SourceArn": rtARN + "orders-dlq", "MaxResults": 10}), on("ListMessageMoveTasks", "orders-dlq"), true},
		{"ListMessageMoveTasks/query", queryReq("/", "ListMessageMoveTasks", "SourceArn", rtARN+"orders-dlq.fifo"), on("ListMessageMoveTasks", "orders-dlq.fifo"), true},
		{"ListMessageMoveTasks/query/get", routeReq{method: "GET", path: "/", rawQuery: "Action=ListMessageMoveTasks&SourceArn=" + url.QueryEscape(rtARN+"orders-dlq")}, on("ListMessageMoveTasks", "orders-dlq"), true},
		{"CancelMessageMoveTask/json", jsonReq("CancelMessageMoveTask", obj{"TaskHandle": testTaskHandle("orders-dlq")}), on("CancelMessageMoveTask", "orders-dlq"), true},
		{"CancelMessageMoveTask/json/fifo", jsonReq("CancelMessageMoveTask", obj{"TaskHandle": testTaskHandle("orders-dlq.fifo")}), on("CancelMessageMoveTask", "orders-dlq.fifo"), true},
		{"CancelMessageMoveTask/json/garbage", jsonReq("CancelMessageMoveTask", obj{"TaskHandle": "not base64!"}), only("CancelMessageMoveTask"), false},
		{"CancelMessageMoveTask/json/not-a-handle", jsonReq("CancelMessageMoveTask", obj{"TaskHandle": "e30="}), only("CancelMessageMoveTask"), false},
		{"CancelMessageMoveTask/query", queryReq("/", "CancelMessageMoveTask", "TaskHandle", testTaskHandle("orders-dlq")), on("CancelMessageMoveTask", "orders-dlq"), true},

		// No queue.
		{"ListQueues/json", jsonReq("ListQueues", obj{"QueueNamePrefix": "orders"}), only("ListQueues"), false},
		{"ListQueues/json/empty-body", jsonReq("ListQueues", ""), only("ListQueues"), false},
		{"ListQueues/query", queryReq("/", "ListQueues", "QueueNamePrefix", "orders"), only("ListQueues"), false},
		{"ListQueues/query/get", routeReq{method: "GET", path: "/", rawQuery: "Action=ListQueues"}, only("ListQueues"), false},
		{"ListQueues/query/queue-path", queryReq("/000000000000/orders", "ListQueues"), only("ListQueues"), false},

		// Protocol detection and malformed requests.
		{"json/unknown-action", jsonReq("Bogus", obj{"QueueUrl": rtURL + "orders"}), Route{}, false},
		{"json/other-service", func() routeReq {
			q := jsonReq("SendMessage", send(rtURL+"orders"))
			q.target = "AmazonSNS.SendMessage"
			return q
		}(), Route{}, false},
		{"json/lower-case-target", func() routeReq {
			q := jsonReq("SendMessage", send(rtURL+"orders"))
			q.target = "amazonsqs.SendMessage"
			return q
		}(), Route{}, false},
		{"json/garbage-body", jsonReq("SendMessage", "{garbage"), only("SendMessage"), false},
		{"json/not-utf8", jsonReq("SendMessage", "{\"QueueUrl\":\""+rtURL+"orders\xff\"}"), only("SendMessage"), false},
		{"json/array-body", jsonReq("SendMessage", `[{"QueueUrl":"`+rtURL+`orders"}]`), only("SendMessage"), false},
		{"json/queueurl-number", jsonReq("SendMessage", `{"QueueUrl":5,"MessageBody":"hi"}`), only("SendMessage"), false},
		{"json/other-member-wrong-type", jsonReq("SendMessage", `{"QueueUrl":"`+rtURL+`orders","MessageBody":5}`), only("SendMessage"), false},
		{"json/member-case", jsonReq("SendMessage", `{"queueurl":"`+rtURL+`orders","MessageBody":"hi"}`), on("SendMessage", "orders"), true},
		{"json/member-repeated", jsonReq("SendMessage", `{"QueueUrl":"`+rtURL+`orders","queueUrl":"`+rtURL+`orders-dlq","MessageBody":"hi"}`), on("SendMessage", "orders-dlq"), true},
		{"json/escaped", jsonReq("SendMessage", `{"QueueUrl":"http:\/\/sqs.example\/000000000000\/ord\u0065rs","MessageBody":"hi"}`), on("SendMessage", "orders"), true},
		{"json/null-queueurl-path", func() routeReq {
			q := jsonReq("SendMessage", `{"QueueUrl":null,"MessageBody":"hi"}`)
			q.path = "/000000000000/orders"
			return q
		}(), on("SendMessage", "orders"), true},
		{"json/empty-body-path", func() routeReq {
			q := jsonReq("PurgeQueue", "")
			q.path = "/000000000000/orders"
			return q
		}(), on("PurgeQueue", "orders"), true},
		{"json/content-type-1.1", withCT(jsonReq("SendMessage", send(rtURL+"orders")), "application/x-amz-json-1.1"), on("SendMessage", "orders"), true},
		{"json/content-type-json", withCT(jsonReq("SendMessage", send(rtURL+"orders")), "application/json; charset=utf-8"), on("SendMessage", "orders"), true},
		// Without a JSON content type, X-Amz-Target is ignored: a Query
		// request, whose text/plain body is no form.
		{"json/content-type-text", withCT(jsonReq("SendMessage", send(rtURL+"orders")), "text/plain"), Route{}, false},
		{"json/no-content-type", withCT(jsonReq("SendMessage", send(rtURL+"orders")), ""), Route{}, false},
		{"query/no-action", queryReq("/", "", "QueueUrl", rtURL+"orders"), Route{}, false},
		{"query/no-action-path", queryReq("/000000000000/orders", ""), Route{}, false},
		{"query/unknown-action", queryReq("/", "Bogus", "QueueUrl", rtURL+"orders"), Route{}, false},
		{"query/malformed-body", routeReq{method: "POST", path: "/", contentType: "application/x-www-form-urlencoded", body: "Action=SendMessage&QueueUrl=%zz"}, Route{}, false},
		{"query/malformed-url-query", routeReq{method: "POST", path: "/", rawQuery: "a=%", contentType: "application/x-www-form-urlencoded", body: "Action=PurgeQueue&QueueUrl=orders"}, Route{}, false},
		{"query/no-content-type", withCT(queryReq("/", "PurgeQueue", "QueueUrl", rtURL+"orders"), ""), on("PurgeQueue", "orders"), true},
		{"query/json-body-ignored", routeReq{method: "POST", path: "/", rawQuery: "Action=PurgeQueue&QueueUrl=orders", contentType: "application/json", body: "QueueUrl=orders-dlq"}, on("PurgeQueue", "orders"), true},
		{"query/url-query-first", routeReq{method: "POST", path: "/", rawQuery: "QueueUrl=orders", contentType: "application/x-www-form-urlencoded", body: "Action=PurgeQueue&QueueUrl=orders-dlq"}, on("PurgeQueue", "orders"), true},
		{"query/get", routeReq{method: "GET", path: "/000000000000/orders", rawQuery: "Action=GetQueueAttributes&AttributeName.1=All"}, on("GetQueueAttributes", "orders"), true},
		{"query/get-body-ignored", routeReq{method: "GET", path: "/", rawQuery: "Action=GetQueueAttributes", contentType: "application/x-www-form-urlencoded", body: "QueueUrl=orders"}, only("GetQueueAttributes"), false},
		{"query/empty-queueurl-path", queryReq("/000000000000/orders", "PurgeQueue", "QueueUrl", ""), on("PurgeQueue", "orders"), true},
		{"query/path-trailing-slash", queryReq("/000000000000/orders/", "PurgeQueue"), on("PurgeQueue", "orders"), true},
		{"query/path-too-deep", queryReq("/x/000000000000/orders", "PurgeQueue"), only("PurgeQueue"), false},
		{"query/path-invalid-name", queryReq("/000000000000/bad!name", "PurgeQueue"), only("PurgeQueue"), false},
		{"query/path-other-account", queryReq("/123456789012/orders", "PurgeQueue"), on("PurgeQueue", "orders"), false},

		// QueueUrl forms the handler accepts.
		{"queueurl/bare-name", jsonReq("PurgeQueue", obj{"QueueUrl": "orders"}), on("PurgeQueue", "orders"), true},
		{"queueurl/path-only", jsonReq("PurgeQueue", obj{"QueueUrl": "/000000000000/orders"}), on("PurgeQueue", "orders"), true},
		{"queueurl/trailing-slash", jsonReq("PurgeQueue", obj{"QueueUrl": rtURL + "orders/"}), on("PurgeQueue", "orders"), true},
		{"queueurl/query-fragment", jsonReq("PurgeQueue", obj{"QueueUrl": rtURL + "orders?x=/y#z"}), on("PurgeQueue", "orders"), true},
		{"queueurl/aws", jsonReq("PurgeQueue", obj{"QueueUrl": "https://sqs.us-east-1.amazonaws.com/000000000000/orders"}), on("PurgeQueue", "orders"), true},
		{"queueurl/other-account", jsonReq("PurgeQueue", obj{"QueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/orders"}), on("PurgeQueue", "orders"), false},
		{"queueurl/host-only", jsonReq("PurgeQueue", obj{"QueueUrl": "http://" + rtHost}), only("PurgeQueue"), false},
		{"queueurl/long-name", jsonReq("PurgeQueue", obj{"QueueUrl": rtURL + strings.Repeat("q", 81)}), only("PurgeQueue"), false},
		{"queueurl/fifo-only", jsonReq("PurgeQueue", obj{"QueueUrl": rtURL + ".fifo"}), only("PurgeQueue"), false},
		{"queueurl/80", jsonReq("PurgeQueue", obj{"QueueUrl": rtURL + strings.Repeat("q", 80)}), on("PurgeQueue", strings.Repeat("q", 80)), true},
	}
}

func routeCases() []routeCase { return append(urlCases(), namedCases()...) }

func TestRouteOf(t *testing.T) {
	for _, tc := range routeCases() {
		t.Run(tc.name, func(t *testing.T) {
			if got := RouteOf(tc.req.request(context.Background()), []byte(tc.req.body)); got != tc.want {
				t.Fatalf("RouteOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestRouteOfCoversActions: the table exercises every action the handler
// serves, in both protocols.
func TestRouteOfCoversActions(t *testing.T) {
	seen := map[string]map[string]bool{}
	for _, tc := range routeCases() {
		proto := "query"
		if tc.req.target != "" {
			proto = "json"
		}
		if tc.want.Queue == "" && tc.want.Action != "ListQueues" {
			continue
		}
		if seen[tc.want.Action] == nil {
			seen[tc.want.Action] = map[string]bool{}
		}
		seen[tc.want.Action][proto] = true
	}
	for _, a := range fuzzActions {
		if _, _, ok := lookupAction(a); !ok {
			continue
		}
		if !seen[a]["json"] || !seen[a]["query"] {
			t.Errorf("%s: no case naming its queue in both protocols (%v)", a, seen[a])
		}
	}
}

func TestRouteOfEdges(t *testing.T) {
	if got := RouteOf(nil, nil); got != (Route{}) {
		t.Errorf("nil request: %+v", got)
	}
	if got := RouteOf(&http.Request{Method: "POST", Header: http.Header{}}, nil); got != (Route{}) {
		t.Errorf("request without URL: %+v", got)
	}
	// Over the handler's body cap: the handler refuses it unread.
	big := jsonReq("SendMessage", `{"QueueUrl":"`+rtURL+`orders","MessageBody":"`+strings.Repeat("x", maxRequestBody)+`"}`)
	if got := RouteOf(big.request(context.Background()), []byte(big.body)); got != (Route{}) {
		t.Errorf("body over the cap: %+v", got)
	}
	// RouteOf does not read r.Body: the body is the argument.
	q := jsonReq("PurgeQueue", obj{"QueueUrl": rtURL + "orders"})
	r := q.request(context.Background())
	if got := RouteOf(r, []byte(`{"QueueUrl":"`+rtURL+`orders-dlq"}`)); got.Queue != "orders-dlq" {
		t.Errorf("Queue %q, want the one in the body argument", got.Queue)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != q.body {
		t.Errorf("r.Body was read: %q left", b)
	}
	// The result does not share the caller's buffer, which it may reuse.
	for _, tc := range routeCases() {
		body := []byte(tc.req.body)
		got := RouteOf(tc.req.request(context.Background()), body)
		want := fmt.Sprintf("%+v", got)
		for i := range body {
			body[i] = '!'
		}
		if after := fmt.Sprintf("%+v", got); after != want {
			t.Errorf("%s: the route changed with the body buffer: %s, was %s", tc.name, after, want)
		}
	}
}

// ---- Agreement with the handler ----

// recordingEngine records the queue names the handler hands the engine:
// the queue it acts on.
type recordingEngine struct {
	Engine
	mu    sync.Mutex
	calls []engineCall
}

type engineCall struct{ op, queue string }

func (e *recordingEngine) note(op, name string) {
	e.mu.Lock()
	e.calls = append(e.calls, engineCall{op, name})
	e.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (e *recordingEngine) take() []engineCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.calls
	e.calls = nil
	return c
}

func (e *recordingEngine) CreateQueue(name string, cfg engine.QueueConfig, tags map[string]string) (engine.QueueInfo, bool, error) {
	e.note("CreateQueue", name)
	return e.Engine.CreateQueue(name, cfg, tags)
}
func (e *recordingEngine) DeleteQueue(name string) error {
	e.note("DeleteQueue", name)
	return e.Engine.DeleteQueue(name)
}
func (e *recordingEngine) PurgeQueue(name string) error {
	e.note("PurgeQueue", name)
	return e.Engine.PurgeQueue(name)
}
func (e *recordingEngine) GetQueue(name string) (engine.QueueInfo, error) {
	e.note("GetQueue", name)
	return e.Engine.GetQueue(name)
}
func (e *recordingEngine) Config(name string) (*engine.QueueConfig, error) {
	e.note("Config", name)
	return e.Engine.Config(name)
}
func (e *recordingEngine) UpdateQueue(name string, fn func(cfg *engine.QueueConfig) error) error {
	e.note("UpdateQueue", name)
	return e.Engine.UpdateQueue(name, fn)
}
func (e *recordingEngine) TagQueue(name string, tags map[string]string) error {
	e.note("TagQueue", name)
	return e.Engine.TagQueue(name, tags)
}
func (e *recordingEngine) UntagQueue(name string, keys []string) error {
	e.note("UntagQueue", name)
	return e.Engine.UntagQueue(name, keys)
}
func (e *recordingEngine) DeadLetterSources(dlq string) ([]string, error) {
	e.note("DeadLetterSources", dlq)
	return e.Engine.DeadLetterSources(dlq)
}
func (e *recordingEngine) Browse(name string, f engine.Filter, cursor uint64, limit int) (engine.Page, error) {
	e.note("Browse", name)
	return e.Engine.Browse(name, f, cursor, limit)
}
func (e *recordingEngine) Send(name string, msgs []engine.Message) ([]engine.SendResult, error) {
	e.note("Send", name)
	return e.Engine.Send(name, msgs)
}
func (e *recordingEngine) Receive(ctx context.Context, name string, req engine.ReceiveRequest) ([]engine.Delivery, error) {
	e.note("Receive", name)
	return e.Engine.Receive(ctx, name, req)
}
func (e *recordingEngine) Delete(name string, handles []string) ([]error, error) {
	e.note("Delete", name)
	return e.Engine.Delete(name, handles)
}
func (e *recordingEngine) ChangeVisibility(name string, changes []engine.VisibilityChange) ([]error, error) {
	e.note("ChangeVisibility", name)
	return e.Engine.ChangeVisibility(name, changes)
}
func (e *recordingEngine) StartMoveTask(spec engine.MoveTaskSpec) (engine.MoveTask, error) {
	e.note("StartMoveTask", spec.Source)
	return e.Engine.StartMoveTask(spec)
}
func (e *recordingEngine) MoveTasks(source string) ([]engine.MoveTask, error) {
	e.note("MoveTasks", source)
	return e.Engine.MoveTasks(source)
}
func (e *recordingEngine) VisibleHint(name string) (int, bool) {
	e.note("VisibleHint", name)
	return e.Engine.VisibleHint(name)
}
func (e *recordingEngine) ReceivedAtHint(name string) (time.Time, bool) {
	e.note("ReceivedAtHint", name)
	return e.Engine.ReceivedAtHint(name)
}

// routeQueues are the queues of routeHandler: a standard and a FIFO queue,
// each with a dead-letter queue.
var routeQueues = []struct {
	name string
	fifo bool
	dlq  string
}{
	{"orders-dlq", false, ""}, {"orders", false, "orders-dlq"},
	{"orders-dlq.fifo", true, ""}, {"orders.fifo", true, "orders-dlq.fifo"},
}

// routeHandler is a handler on a real engine (memstore, fake clock) that
// records the queues it acts on.
func routeHandler(tb testing.TB) (*Handler, *recordingEngine, *engine.Engine) {
	tb.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { eng.Close() })
	for _, q := range routeQueues {
		cfg := engine.DefaultQueueConfig()
		cfg.FIFO = q.fifo
		if q.dlq != "" {
			cfg.DeadLetter = &engine.DeadLetterPolicy{Target: q.dlq, MaxReceiveCount: 3}
		}
		if _, _, err := eng.CreateQueue(q.name, cfg, nil); err != nil {
			tb.Fatal(err)
		}
	}
	rec := &recordingEngine{Engine: eng}
	return New(rec, Options{Clock: clk}), rec, eng
}

// serveRoute serves q on h and returns the response.
func serveRoute(h *Handler, q routeReq, ctx context.Context) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, q.request(ctx))
	return w
}

// checkAgreement checks rt against the engine calls the handler made
// serving the same request: the first queue it handed the engine is
// rt.Queue (or, if it is not a valid queue name, rt.Queue is ""); for
// CreateQueue, the queue created is rt.Queue and any queue looked up
// before (the RedrivePolicy's target) is rt.DeadLetterTarget.
func checkAgreement(t *testing.T, rt Route, calls []engineCall) {
	t.Helper()
	if len(calls) == 0 {
		return // refused before it named a queue to the engine
	}
	if rt.Create {
		for _, c := range calls {
			switch {
			case c.op == "CreateQueue":
				if c.queue != rt.Queue {
					t.Fatalf("the handler created %q, RouteOf names %+v", c.queue, rt)
				}
				return
			case c.op == "GetQueue":
				if c.queue != rt.DeadLetterTarget {
					t.Fatalf("the handler looked up dead-letter target %q, RouteOf names %+v (calls %v)", c.queue, rt, calls)
				}
			default:
				t.Fatalf("CreateQueue: unexpected engine call %v before the queue is created (RouteOf %+v)", c, rt)
			}
		}
		return
	}
	want := calls[0].queue
	if !engine.ValidQueueName(want) {
		want = "" // the engine answers QueueDoesNotExist; nothing to route
	}
	if rt.Queue != want {
		t.Fatalf("the handler acted on %q (calls %v), RouteOf names %+v", calls[0].queue, calls, rt)
	}
}

// TestRouteOfAgreesWithHandler serves every table request on a fresh
// handler and checks it acts on the queue RouteOf names.
func TestRouteOfAgreesWithHandler(t *testing.T) {
	for _, tc := range routeCases() {
		t.Run(tc.name, func(t *testing.T) {
			h, rec, _ := routeHandler(t)
			rt := RouteOf(tc.req.request(context.Background()), []byte(tc.req.body))
			rec.take()
			w := serveRoute(h, tc.req, context.Background())
			calls := rec.take()
			if tc.touch && len(calls) == 0 {
				t.Fatalf("the handler named no queue to the engine (%d %s)", w.Code, w.Body)
			}
			checkAgreement(t, rt, calls)
		})
	}
}

// TestRouteOfNamesChangedQueue checks, from the engine's state, that the
// queue a request changes or reports is the one RouteOf names:
// SendMessage, GetQueueUrl and CreateQueue in both protocols.
func TestRouteOfNamesChangedQueue(t *testing.T) {
	h, _, eng := routeHandler(t)
	visible := func() map[string]int {
		m := map[string]int{}
		for _, n := range eng.ListQueues("") {
			info, err := eng.GetQueue(n)
			if err != nil {
				t.Fatal(err)
			}
			m[n] = info.Visible
		}
		return m
	}
	sends := []routeReq{
		jsonReq("SendMessage", obj{"QueueUrl": rtURL + "orders", "MessageBody": "a"}),
		jsonReq("SendMessage", obj{"QueueUrl": rtURL + "orders-dlq.fifo", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "1"}),
		func() routeReq {
			q := jsonReq("SendMessage", obj{"MessageBody": "a"})
			q.path = "/000000000000/orders-dlq"
			return q
		}(),
		queryReq("/", "SendMessage", "QueueUrl", rtURL+"orders.fifo", "MessageBody", "a", "MessageGroupId", "g", "MessageDeduplicationId", "1"),
		queryReq("/000000000000/orders", "SendMessage", "MessageBody", "a"),
		queryReq("/000000000000/orders", "SendMessage", "QueueUrl", rtURL+"orders-dlq", "MessageBody", "a"),
	}
	for _, q := range sends {
		rt := RouteOf(q.request(context.Background()), []byte(q.body))
		before := visible()
		if w := serveRoute(h, q, context.Background()); w.Code != 200 {
			t.Fatalf("%+v: %d %s", q, w.Code, w.Body)
		}
		var changed []string
		for n, v := range visible() {
			if v != before[n] {
				changed = append(changed, n)
			}
		}
		if len(changed) != 1 || changed[0] != rt.Queue {
			t.Errorf("%s %q: changed %v, RouteOf names %q", q.target, q.body, changed, rt.Queue)
		}
	}

	creates := []routeReq{
		jsonReq("CreateQueue", obj{"QueueName": "made-json"}),
		jsonReq("CreateQueue", obj{"QueueName": "made-json.fifo", "Attributes": obj{"FifoQueue": "true", "RedrivePolicy": redrive(rtARN + "orders-dlq.fifo")}}),
		queryReq("/", "CreateQueue", "QueueName", "made-query"),
		queryReq("/", "CreateQueue", "QueueName", "made-query-2", "Attribute.1.Name", "RedrivePolicy", "Attribute.1.Value", redrive(rtARN+"orders-dlq")),
	}
	for _, q := range creates {
		rt := RouteOf(q.request(context.Background()), []byte(q.body))
		before := visible()
		if w := serveRoute(h, q, context.Background()); w.Code != 200 {
			t.Fatalf("%+v: %d %s", q, w.Code, w.Body)
		}
		var made []string
		for n := range visible() {
			if _, ok := before[n]; !ok {
				made = append(made, n)
			}
		}
		if len(made) != 1 || made[0] != rt.Queue || !rt.Create {
			t.Errorf("%q: created %v, RouteOf says %+v", q.body, made, rt)
		}
		info, err := eng.GetQueue(rt.Queue)
		if err != nil {
			t.Fatal(err)
		}
		dlt := ""
		if info.Config.DeadLetter != nil {
			dlt = info.Config.DeadLetter.Target
		}
		if dlt != rt.DeadLetterTarget {
			t.Errorf("%q: the queue's dead-letter target is %q, RouteOf names %q", q.body, dlt, rt.DeadLetterTarget)
		}
	}

	gets := []routeReq{
		jsonReq("GetQueueUrl", obj{"QueueName": "orders"}),
		jsonReq("GetQueueUrl", obj{"QueueName": "orders-dlq.fifo"}),
		queryReq("/", "GetQueueUrl", "QueueName", "orders.fifo"),
		queryReq("/000000000000/orders", "GetQueueUrl", "QueueName", "orders-dlq"),
	}
	for _, q := range gets {
		rt := RouteOf(q.request(context.Background()), []byte(q.body))
		w := serveRoute(h, q, context.Background())
		if w.Code != 200 {
			t.Fatalf("%+v: %d %s", q, w.Code, w.Body)
		}
		var out struct{ QueueUrl string }
		if q.target != "" {
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
		} else {
			var doc struct {
				QueueUrl string `xml:"GetQueueUrlResult>QueueUrl"`
			}
			if err := xml.Unmarshal(w.Body.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			out.QueueUrl = doc.QueueUrl
		}
		if want := "http://" + rtHost + "/000000000000/" + rt.Queue; rt.Queue == "" || out.QueueUrl != want {
			t.Errorf("%q: the handler answered %q, RouteOf names %q", q.body, out.QueueUrl, rt.Queue)
		}
	}
}

// TestRouteOfSDK routes what aws-sdk-go-v2 sends (the JSON protocol) in
// front of the handler, as a router would, and checks each route against
// the queue the handler acted on; the TaskHandle cancelled is the one the
// handler returned.
func TestRouteOfSDK(t *testing.T) {
	h, rec, _ := routeHandler(t)
	type seen struct {
		rt    Route
		calls []engineCall
	}
	var mu sync.Mutex
	var log []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		rt := RouteOf(r, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		defer mu.Unlock()
		rec.take()
		h.ServeHTTP(w, r)
		log = append(log, seen{rt, rec.take()})
	}))
	defer srv.Close()
	cli := awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDSLUICETEST", SecretAccessKey: "secret"}, nil
		}),
		Retryer: aws.NopRetryer{},
	})
	ctx := context.Background()
	check := func(action, queue, dlt string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(log) == 0 {
			t.Fatalf("%s: no request seen", action)
		}
		s := log[len(log)-1]
		want := Route{Action: action, Queue: queue, Create: action == "CreateQueue", DeadLetterTarget: dlt}
		if s.rt != want {
			t.Errorf("%s: RouteOf = %+v, want %+v", action, s.rt, want)
		}
		if len(s.calls) == 0 && queue != "" {
			t.Errorf("%s: the handler named no queue to the engine", action)
		}
		checkAgreement(t, s.rt, s.calls)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	cq, err := cli.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("sdk"),
		Attributes: map[string]string{"RedrivePolicy": redrive(rtARN + "orders-dlq")}})
	must(err)
	check("CreateQueue", "sdk", "orders-dlq")
	qurl := cq.QueueUrl
	_, err = cli.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("sdk")})
	must(err)
	check("GetQueueUrl", "sdk", "")
	_, err = cli.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: qurl, MessageBody: aws.String("hi")})
	must(err)
	check("SendMessage", "sdk", "")
	rm, err := cli.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: qurl, MaxNumberOfMessages: 1})
	must(err)
	check("ReceiveMessage", "sdk", "")
	if len(rm.Messages) != 1 {
		t.Fatalf("received %d messages", len(rm.Messages))
	}
	_, err = cli.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: qurl, ReceiptHandle: rm.Messages[0].ReceiptHandle})
	must(err)
	check("DeleteMessage", "sdk", "")
	_, err = cli.ListQueues(ctx, &awssqs.ListQueuesInput{})
	must(err)
	check("ListQueues", "", "")

	// A running move task out of the dead-letter queue, and its handle.
	dlqURL := aws.String(rtURL + "orders-dlq")
	_, err = cli.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: dlqURL, MessageBody: aws.String("dead")})
	must(err)
	check("SendMessage", "orders-dlq", "")
	st, err := cli.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(rtARN + "orders-dlq"),
		DestinationArn: aws.String(rtARN + "sdk"), MaxNumberOfMessagesPerSecond: aws.Int32(1)})
	must(err)
	check("StartMessageMoveTask", "orders-dlq", "")
	_, err = cli.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(rtARN + "orders-dlq")})
	must(err)
	check("ListMessageMoveTasks", "orders-dlq", "")
	_, _ = cli.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: st.TaskHandle}) // it may have finished
	check("CancelMessageMoveTask", "orders-dlq", "")
	_, err = cli.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: qurl})
	must(err)
	check("DeleteQueue", "sdk", "")
}

// ---- Fuzzing ----

// FuzzRouteOf: RouteOf never panics; its Queue and DeadLetterTarget are ""
// or valid queue names, its Action "" or an action the handler serves; its
// result does not share the body's memory; and the handler, serving the
// same request, acts on the queue it names (checkAgreement). The seeds are
// the table's requests.
func FuzzRouteOf(f *testing.F) {
	for _, tc := range routeCases() {
		q := tc.req
		f.Add(q.method, q.path, q.rawQuery, q.contentType, q.target, []byte(q.body))
	}
	h, rec, _ := routeHandler(f)
	var mu sync.Mutex // one handler and recorder for every input
	f.Fuzz(func(t *testing.T, method, path, rawQuery, contentType, target string, body []byte) {
		q := routeReq{method: method, path: path, rawQuery: rawQuery, contentType: contentType, target: target, body: string(body)}
		buf := bytes.Clone(body)
		rt := RouteOf(q.request(context.Background()), buf)
		if rt.Queue != "" && !engine.ValidQueueName(rt.Queue) {
			t.Fatalf("Queue %q is not a valid queue name", rt.Queue)
		}
		if rt.DeadLetterTarget != "" && !engine.ValidQueueName(rt.DeadLetterTarget) {
			t.Fatalf("DeadLetterTarget %q is not a valid queue name", rt.DeadLetterTarget)
		}
		if _, _, ok := lookupAction(rt.Action); rt.Action != "" && !ok {
			t.Fatalf("Action %q is not an action the handler serves", rt.Action)
		}
		if rt.Create != (rt.Action == "CreateQueue") || (rt.DeadLetterTarget != "" && !rt.Create) {
			t.Fatalf("inconsistent %+v", rt)
		}
		if rt.Action == "" && rt != (Route{}) {
			t.Fatalf("a route without an action: %+v", rt)
		}
		if again := RouteOf(q.request(context.Background()), body); again != rt {
			t.Fatalf("not deterministic: %+v then %+v", rt, again)
		}
		want := fmt.Sprintf("%+v", rt)
		for i := range buf {
			buf[i] ^= 0xff
		}
		if got := fmt.Sprintf("%+v", rt); got != want {
			t.Fatalf("the route changed with the body buffer: %s, was %s", got, want)
		}

		// The handler, on the same request (long polls end at once).
		mu.Lock()
		defer mu.Unlock()
		rec.take()
		serveRoute(h, q, cancelledContext())
		checkAgreement(t, rt, rec.take())
	})
}

// BenchmarkRouteOf measures routing the hot requests: a SendMessageBatch of
// ten 1 KiB bodies in each protocol.
func BenchmarkRouteOf(b *testing.B) {
	entries := make([]obj, 10)
	form := []string{"QueueUrl", rtURL + "orders"}
	for i := range entries {
		entries[i] = obj{"Id": fmt.Sprint(i), "MessageBody": strings.Repeat("x", 1024)}
		p := fmt.Sprintf("SendMessageBatchRequestEntry.%d.", i+1)
		form = append(form, p+"Id", fmt.Sprint(i), p+"MessageBody", strings.Repeat("x", 1024))
	}
	for _, q := range []routeReq{
		jsonReq("SendMessageBatch", obj{"QueueUrl": rtURL + "orders", "Entries": entries}),
		queryReq("/", "SendMessageBatch", form...),
	} {
		name := "query"
		if q.target != "" {
			name = "json"
		}
		b.Run(name, func(b *testing.B) {
			r, body := q.request(context.Background()), []byte(q.body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if RouteOf(r, body).Queue != "orders" {
					b.Fatal("wrong queue")
				}
			}
		})
	}
}
