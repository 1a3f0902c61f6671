package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// Fuzz properties, for every decoder: no panic, no 5xx, and a bad request
// always answered with a well-formed SQS error of the request's protocol.

// fuzzHandler is a handler on a real engine with a fake clock (long polls
// end at once: the request context is already cancelled) and two queues.
func fuzzHandler(f *testing.F) *Handler {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { eng.Close() })
	cfg := engine.DefaultQueueConfig()
	if _, _, err := eng.CreateQueue("q", cfg, nil); err != nil {
		f.Fatal(err)
	}
	cfg.FIFO = true
	if _, _, err := eng.CreateQueue("q.fifo", cfg, nil); err != nil {
		f.Fatal(err)
	}
	return New(eng, Options{Clock: clk})
}

func cancelledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

var fuzzActions = []string{
	"SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch",
	"ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "CreateQueue", "DeleteQueue",
	"GetQueueUrl", "GetQueueAttributes", "SetQueueAttributes", "ListQueues", "PurgeQueue",
	"ListDeadLetterSourceQueues", "TagQueue", "UntagQueue", "ListQueueTags", "AddPermission",
	"RemovePermission", "StartMessageMoveTask", "Bogus",
	// Appended, so the seeds' indices above keep their meaning.
	"CancelMessageMoveTask", "ListMessageMoveTasks",
}

func checkJSONResponse(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("response is not a JSON object: %v: %q", err, rec.Body)
	}
	if rec.Code != 200 {
		typ, _ := doc["__type"].(string)
		msg, _ := doc["message"].(string)
		if !strings.Contains(typ, "#") || msg == "" || !strings.HasSuffix(rec.Header().Get("x-amzn-query-error"), ";Sender") {
			t.Fatalf("malformed error %d %v %q", rec.Code, doc, rec.Header().Get("x-amzn-query-error"))
		}
	}
	if rec.Header().Get("x-amzn-RequestId") == "" {
		t.Fatal("no request id")
	}
}

func FuzzJSONRequest(f *testing.F) {
	h := fuzzHandler(f)
	seeds := []struct {
		action int
		body   string
	}{
		{0, `{"QueueUrl":"http://h/000000000000/q","MessageBody":"hi","MessageAttributes":{"a":{"DataType":"String","StringValue":"v"}}}`},
		{0, `{"QueueUrl":"/000000000000/q.fifo","MessageBody":"hi","MessageGroupId":"g","MessageDeduplicationId":"d","DelaySeconds":"0"}`},
		{1, `{"QueueUrl":"q","Entries":[{"Id":"a","MessageBody":"x"},{"Id":"a","MessageBody":"y"}]}`},
		{2, `{"QueueUrl":"q","MaxNumberOfMessages":10,"WaitTimeSeconds":1.5,"MessageAttributeNames":["All"],"AttributeNames":["All"]}`},
		{3, `{"QueueUrl":"q","ReceiptHandle":"garbage"}`},
		{6, `{"QueueUrl":"q","Entries":[{"Id":"x","ReceiptHandle":"h","VisibilityTimeout":99999}]}`},
		{7, `{"QueueName":"n.fifo","Attributes":{"FifoQueue":"true","RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:q.fifo\",\"maxReceiveCount\":\"3\"}"},"tags":{"k":"v"}}`},
		{11, `{"QueueUrl":"q","Attributes":{"Policy":"{}","DelaySeconds":"x"}}`},
		{12, `{"MaxResults":1,"NextToken":"!!"}`},
		{18, `{"QueueUrl":"q","Label":"l","AWSAccountIds":["1"],"Actions":["*"]}`},
		{0, `{"QueueUrl":5}`},
		{0, "\xff\xfe"},
		{0, `[`},
		{21, `{}`},
		{20, `{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q","DestinationArn":"arn:aws:sqs:us-east-1:000000000000:q.fifo","MaxNumberOfMessagesPerSecond":0}`},
		{20, `{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q","MaxNumberOfMessagesPerSecond":"500"}`},
		{20, `{"SourceArn":"arn:aws:sqs::::","DestinationArn":5}`},
		{22, `{"TaskHandle":"eyJ0YXNrSWQiOiJ4Iiwic291cmNlQXJuIjoiYXJuOmF3czpzcXM6dXMtZWFzdC0xOjAwMDAwMDAwMDAwMDpxIn0="}`},
		{22, `{"TaskHandle":"e30="}`},
		{23, `{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q","MaxResults":11}`},
		{7, `{"QueueName":"r","Attributes":{"SluiceRetryPolicy":"{\"strategy\":\"decorrelated\",\"baseSeconds\":0.2,\"capSeconds\":\"30\"}"}}`},
		{2, `{"QueueUrl":"q","MessageSystemAttributeNames":["Sluice*","SluiceErrorClass","All"]}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.action), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, action uint8, body []byte) {
		req := httptest.NewRequest("POST", "/", bytes.NewReader(body)).WithContext(cancelledContext())
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("X-Amz-Target", "AmazonSQS."+fuzzActions[int(action)%len(fuzzActions)])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkJSONResponse(t, rec)
	})
}

// checkXML verifies a Query response is well-formed XML, and an error is an
// ErrorResponse with a code.
func checkXML(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	dec := xml.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("malformed XML: %v: %q", err, rec.Body)
		}
	}
	if rec.Code == 404 && strings.Contains(rec.Body.String(), "<UnknownOperationException/>") {
		return // AWS's answer to a request without Action on a queue path
	}
	if rec.Code != 200 {
		var e struct {
			XMLName xml.Name `xml:"ErrorResponse"`
			Error   struct{ Code, Message, Type string }
		}
		if err := xml.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Type != "Sender" {
			t.Fatalf("malformed error: %v %q", err, rec.Body)
		}
	}
}

func FuzzQueryRequest(f *testing.F) {
	h := fuzzHandler(f)
	f.Add("POST", "/", "Action=SendMessage&QueueUrl=http%3A%2F%2Fh%2F000000000000%2Fq&MessageBody=hi&MessageAttribute.1.Name=a&MessageAttribute.1.Value.DataType=Binary&MessageAttribute.1.Value.BinaryValue=AAE%3D")
	f.Add("POST", "/000000000000/q", "Action=ReceiveMessage&AttributeName.1=All&MessageAttributeName.1=a.*&MaxNumberOfMessages=11")
	f.Add("POST", "/000000000000/q", "Action=CreateQueue&QueueName=x")
	f.Add("GET", "/000000000000/q", "")
	f.Add("POST", "/", "Action=SendMessageBatch&QueueUrl=q&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=%01&SendMessageBatchRequestEntry.99999999999.Id=b")
	f.Add("POST", "/", "Action=CreateQueue&QueueName=x.fifo&Attribute.1.Name=FifoQueue&Attribute.1.Value=true&Tag.1.Key=k&Tag.1.Value=v")
	f.Add("POST", "/", "Action=DeleteMessage&QueueUrl=q&ReceiptHandle=%22%0D%3C")
	f.Add("POST", "/", "Action=AddPermission&QueueUrl=q&Label=l&AWSAccountId.1=1&ActionName.1=SendMessage")
	f.Add("POST", "/", "%zz")
	f.Add("GET", "/", "Action=Bogus")
	f.Add("POST", "/", "Action=StartMessageMoveTask&SourceArn=arn%3Aaws%3Asqs%3Aus-east-1%3A000000000000%3Aq&MaxNumberOfMessagesPerSecond=501")
	f.Add("POST", "/", "Action=CancelMessageMoveTask&TaskHandle=%3D%3D")
	f.Add("GET", "/", "Action=ListMessageMoveTasks&SourceArn=arn%3Aaws%3Asqs%3Aus-east-1%3A000000000000%3Aq&MaxResults=10")
	f.Add("POST", "/000000000000/q", "Action=SetQueueAttributes&Attribute.1.Name=SluiceRetryPolicy&Attribute.1.Value=%7B%22capSeconds%22%3A1e9%7D")
	f.Fuzz(func(t *testing.T, method, path, raw string) {
		if method != "GET" {
			method = "POST"
		}
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\x00\r\n\t") || len(path) > 300 {
			path = "/"
		}
		var req *http.Request
		if method == "GET" {
			req = httptest.NewRequest("GET", "/", nil)
			req.URL.Path, req.URL.RawQuery = path, raw
		} else {
			req = httptest.NewRequest("POST", "/", strings.NewReader(raw))
			req.URL.Path = path
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req = req.WithContext(cancelledContext())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkXML(t, rec)
	})
}

var md5Pattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func FuzzMessageAttributes(f *testing.F) {
	f.Add("MessageAttribute.1.Name=a&MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=v")
	f.Add("MessageAttribute.1.Name=b&MessageAttribute.1.Value.DataType=Binary.gz&MessageAttribute.1.Value.BinaryValue=AAE%3D")
	f.Add("MessageAttribute.1.Name=n&MessageAttribute.1.Value.DataType=Number&MessageAttribute.1.Value.StringValue=1e400")
	f.Add("MessageAttribute.1.Name=.x&MessageAttribute.2.Name=AWS.y&MessageAttribute.1.Value.DataType=String")
	f.Fuzz(func(t *testing.T, raw string) {
		fm := form{}
		if err := parseForm(fm, raw); err != nil {
			if err.kind.status >= 500 {
				t.Fatal(err)
			}
			return
		}
		m, aerr := fm.msgAttrs("MessageAttribute")
		if aerr != nil {
			if aerr.kind != kindInvalidParameter {
				t.Fatalf("unexpected kind %v", aerr)
			}
			return
		}
		attrs, aerr := checkMessageAttributes(m)
		if aerr != nil {
			if aerr.kind != kindInvalidParameter || aerr.msg == "" {
				t.Fatalf("unexpected error %v", aerr)
			}
			return
		}
		if len(attrs) > 0 && !md5Pattern.MatchString(md5OfAttributes(attrs)) {
			t.Fatal("bad digest")
		}
		// Selection by the receive filter never invents attributes.
		if sel := selectAttributes(attrs, []string{"All"}); len(sel) != len(attrs) {
			t.Fatal("All did not select everything")
		}
	})
}

func FuzzPolicies(f *testing.F) {
	h := fuzzHandler(f)
	c := &call{h: h, ctx: context.Background()}
	f.Add(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:q","maxReceiveCount":"5"}`, `{"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:a"]}`, `{"Version":"2012-10-17","Statement":{"Sid":"l"}}`, "l")
	f.Add(`{"deadLetterTargetArn":1,"maxReceiveCount":1e3}`, `{"redrivePermission":"denyAll","sourceQueueArns":[]}`, `{"Statement":[{"Sid":5}]}`, "x")
	f.Add(``, `null`, `[]`, "")
	f.Fuzz(func(t *testing.T, redrive, allow, policy, label string) {
		if p, err := c.parseRedrivePolicy(redrive, "src", false); err != nil {
			if err.kind != kindInvalidParameter {
				t.Fatalf("RedrivePolicy: %v", err)
			}
		} else if p != nil && (p.MaxReceiveCount < 1 || p.MaxReceiveCount > 1000 || p.Target != "q") {
			t.Fatalf("accepted %+v", p)
		}
		if p, err := c.parseRedriveAllowPolicy(allow); err != nil {
			if err.kind != kindInvalidParameter {
				t.Fatalf("RedriveAllowPolicy: %v", err)
			}
		} else if p != nil && p.Permission != "allowAll" && p.Permission != "denyAll" && p.Permission != "byQueue" {
			t.Fatalf("accepted %+v", p)
		}
		// As in AddPermission: the label is validated before the policy is edited.
		if err := checkPermission(&addPermissionInput{Label: label, AWSAccountIds: []string{"111122223333"}, Actions: []string{"SendMessage"}}); err != nil {
			if err.kind != kindInvalidParameter && err.kind != kindMissingParameter {
				t.Fatalf("checkPermission: %v", err)
			}
			return
		}
		out, err := addPolicyStatement(policy, h.queueARN("q"), label, []string{"111122223333"}, []string{"SendMessage"})
		if err != nil {
			if err.kind != kindInvalidParameter && err.kind != kindInvalidAttrValue {
				t.Fatalf("AddPermission: %v", err)
			}
			return
		}
		if !json.Valid([]byte(out)) {
			t.Fatalf("policy is not JSON: %q", out)
		}
		doc, perr := parsePolicy(out, "")
		if perr != nil || doc.find(label) < 0 {
			t.Fatalf("added statement not found in %q", out)
		}
		if _, err := removePolicyStatement(out, label); err != nil {
			t.Fatalf("cannot remove the statement just added: %v", err)
		}
	})
}

// FuzzSluiceInputs covers the decoders of this package's own formats: task
// handles (CancelMessageMoveTask) and SluiceRetryPolicy values. Properties:
// no panic; a handle that decodes re-encodes to the same task and source;
// an accepted policy is one the engine accepts and survives a render/parse
// round trip; a rejected one is an InvalidParameterValue with a reason; and
// CancelMessageMoveTask never answers 5xx.
func FuzzSluiceInputs(f *testing.F) {
	h := fuzzHandler(f)
	f.Add(h.taskHandle(&engine.MoveTask{ID: "0123456789abcdef0123456789abcdef", Source: "q"}), `{"strategy":"full-jitter","baseSeconds":1,"capSeconds":30}`)
	f.Add("garbage", `{"strategy":"exponential","baseSeconds":"0.2","capSeconds":30}`)
	f.Add("e30=", `{"capSeconds":30}`)
	f.Add("eyJ0YXNrSWQiOiIiLCJzb3VyY2VBcm4iOiIifQ==", `{"baseSeconds":1}`)
	f.Add("eyJ0YXNrSWQiOjEsInNvdXJjZUFybiI6bnVsbH0=", `{"capSeconds":"NaN"}`)
	f.Add("", `{"capSeconds":1e400}`)
	f.Add("====", `{"strategy":"fixed","baseSeconds":0.0001,"capSeconds":0.0004}`)
	f.Add("W10=", `{"cap":30,"strategy":null}`)
	f.Fuzz(func(t *testing.T, handle, policy string) {
		if id, arn, ok := decodeTaskHandle(handle); ok {
			if id == "" || !isQueueARN(arn) {
				t.Fatalf("accepted %q: %q %q", handle, id, arn)
			}
			if name, mine := h.queueNameFromARN(arn); mine {
				id2, arn2, ok := decodeTaskHandle(h.taskHandle(&engine.MoveTask{ID: id, Source: name}))
				if !ok || id2 != id || arn2 != arn {
					t.Fatalf("round trip %q %q → %q %q %v", id, arn, id2, arn2, ok)
				}
			}
		}
		req := httptest.NewRequest("POST", "/", bytes.NewReader(marshalJSON(map[string]string{"TaskHandle": handle})))
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("X-Amz-Target", "AmazonSQS.CancelMessageMoveTask")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkJSONResponse(t, rec)

		p, err := parseRetryPolicy(policy)
		if err != nil {
			if err.kind != kindInvalidParameter || !strings.Contains(err.msg, "Reason: ") {
				t.Fatalf("SluiceRetryPolicy error %v", err)
			}
			return
		}
		if policy == "" {
			if p != nil {
				t.Fatal(`"" must remove the policy`)
			}
			return
		}
		if p == nil || p.Base <= 0 || p.Cap < p.Base || p.Cap > engine.MaxVisibility {
			t.Fatalf("accepted %q as %+v", policy, p)
		}
		again, err := parseRetryPolicy(renderRetryPolicy(p))
		if err != nil || *again != *p {
			t.Fatalf("render/parse round trip of %+v: %+v %v", p, again, err)
		}
	})
}

// FuzzSluiceDLQAttrs covers the dead-letter practice attributes
// (SluiceCrashLoopPolicy, SluiceRequeuePolicy, SluiceRetentionPeriod): no
// panic; a rejected value is an InvalidParameterValue with a reason; an
// accepted one sets values in the engine's ranges and survives a
// render/parse round trip.
func FuzzSluiceDLQAttrs(f *testing.F) {
	for _, s := range []string{`{"limit":3,"windowSeconds":60}`, `{"limit":0}`, `{"windowSeconds":0.5}`, `{"limit":1e9}`,
		`{"lmit":3}`, `[]`, `null`, `{"limit":3}{}`, "tail", "delayed", "head", "", "2592000", "59", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, name := range []string{attrSluiceCrashLoopPolicy, attrSluiceRequeuePolicy, attrSluiceRetentionPeriod, attrSluiceRetryBudget, attrSluiceUnknownFailure} {
			edit, err := parseSluiceDLQAttr(name, v)
			if err != nil {
				if err.kind != kindInvalidParameter || !strings.Contains(err.msg, "Reason: ") {
					t.Fatalf("%s error %v", name, err)
				}
				continue
			}
			cfg := engine.DefaultQueueConfig()
			edit(&cfg)
			if cfg.CrashLimit < 0 || cfg.CrashLimit > 1000 || cfg.CrashWindow < 0 || cfg.CrashWindow > engine.MaxVisibility ||
				cfg.Retention < engine.MinRetention || cfg.Retention > engine.MaxExtendedRetention {
				t.Fatalf("%s=%q accepted as %+v", name, v, cfg)
			}
			m := map[string]string{}
			renderSluiceDLQAttrs(&cfg, m)
			if r, ok := m[name]; ok {
				edit2, err := parseSluiceDLQAttr(name, r)
				if err != nil {
					t.Fatalf("%s render %q does not parse: %v", name, r, err)
				}
				cfg2 := engine.DefaultQueueConfig()
				edit2(&cfg2)
				if cfg2.CrashLimit != cfg.CrashLimit || cfg2.Requeue != cfg.Requeue || cfg2.Retention != cfg.Retention || cfg2.RetryBudgetPercent != cfg.RetryBudgetPercent || cfg2.UnknownFailure != cfg.UnknownFailure ||
					(cfg.CrashLimit > 0 && cfg2.CrashWindow != cfg.CrashWindow) {
					t.Fatalf("%s round trip %+v → %+v", name, cfg, cfg2)
				}
			}
		}
	})
}
