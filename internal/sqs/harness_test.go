package sqs_test

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

const account = "000000000000"

// env is a real broker (engine on memstore behind the SQS handler on an
// httptest server) with a fake clock shared by engine and handler, and the
// two clients a user would have: aws-sdk-go-v2 (JSON) and a hand-written
// Query client.
type env struct {
	t   *testing.T
	clk *clock.Fake
	eng *engine.Engine
	h   *sluicesqs.Handler
	srv *httptest.Server
	cli *sqs.Client
	ctx context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, sluicesqs.Options{})
}

// newEnvWith is newEnv with the handler's options (its Clock is the
// env's fake clock).
func newEnvWith(t *testing.T, opts sluicesqs.Options) *env {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	opts.Clock = clk
	h := sluicesqs.New(eng, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	cli := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDSLUICETEST", SecretAccessKey: "secret"}, nil
		}),
		Retryer: aws.NopRetryer{},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &env{t: t, clk: clk, eng: eng, h: h, srv: srv, cli: cli, ctx: ctx}
}

func (e *env) url(name string) string { return e.srv.URL + "/" + account + "/" + name }
func (e *env) arn(name string) string { return "arn:aws:sqs:us-east-1:" + account + ":" + name }

// create makes a queue with attributes given as name, value pairs.
func (e *env) create(name string, kv ...string) string {
	e.t.Helper()
	attrs := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		attrs[kv[i]] = kv[i+1]
	}
	out, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		e.t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return *out.QueueUrl
}

func (e *env) send(q, body string, opts ...func(*sqs.SendMessageInput)) *sqs.SendMessageOutput {
	e.t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(body)}
	for _, o := range opts {
		o(in)
	}
	out, err := e.cli.SendMessage(e.ctx, in)
	if err != nil {
		e.t.Fatalf("SendMessage: %v", err)
	}
	return out
}

func (e *env) receive(q string, opts ...func(*sqs.ReceiveMessageInput)) *sqs.ReceiveMessageOutput {
	e.t.Helper()
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MaxNumberOfMessages: 10}
	for _, o := range opts {
		o(in)
	}
	out, err := e.cli.ReceiveMessage(e.ctx, in)
	if err != nil {
		e.t.Fatalf("ReceiveMessage: %v", err)
	}
	return out
}

func (e *env) attr(q, name string) string {
	e.t.Helper()
	out, err := e.cli.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q), AttributeNames: []types.QueueAttributeName{types.QueueAttributeName(name)}})
	if err != nil {
		e.t.Fatalf("GetQueueAttributes: %v", err)
	}
	return out.Attributes[name]
}

// wantAPIError checks an SDK error's code (from x-amzn-query-error), HTTP
// status, and that its message contains msg.
func wantAPIError(t *testing.T, err error, code string, status int, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %s, got success", code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("not an API error: %v", err)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("code %q (%s), want %q", ae.ErrorCode(), ae.ErrorMessage(), code)
	}
	if !strings.Contains(ae.ErrorMessage(), msg) {
		t.Fatalf("message %q, want it to contain %q", ae.ErrorMessage(), msg)
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("no HTTP response in %v", err)
	}
	if re.HTTPStatusCode() != status {
		t.Fatalf("status %d, want %d", re.HTTPStatusCode(), status)
	}
}

// rawJSON posts an AWS JSON 1.0 request without the SDK.
func (e *env) rawJSON(path, action, body string) (*http.Response, string) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	return e.do(req)
}

func (e *env) do(req *http.Request) (*http.Response, string) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req.WithContext(e.ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// query sends a Query-protocol form POST to path.
func (e *env) query(path string, params url.Values) (*http.Response, string) {
	e.t.Helper()
	if params.Get("Version") == "" {
		params.Set("Version", "2012-11-05")
	}
	req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(params.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return e.do(req)
}

// queryError is the Query protocol's error document.
type queryError struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Error   struct {
		Type    string
		Code    string
		Message string
	}
	RequestId string
}

func (e *env) wantQueryError(resp *http.Response, body string, status int, code, msg string) {
	e.t.Helper()
	var qe queryError
	if err := xml.Unmarshal([]byte(body), &qe); err != nil {
		e.t.Fatalf("error body is not an ErrorResponse: %v\n%s", err, body)
	}
	if resp.StatusCode != status || qe.Error.Code != code || qe.Error.Type != "Sender" || !strings.Contains(qe.Error.Message, msg) || qe.RequestId == "" {
		e.t.Fatalf("got %d %+v, want %d %s %q", resp.StatusCode, qe, status, code, msg)
	}
}
