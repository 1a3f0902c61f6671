package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
)

// start runs a real server on 127.0.0.1:0 over dir and returns it with a
// stop function that shuts it down cleanly.
func start(t *testing.T, dir string) (*Server, func()) {
	t.Helper()
	return startClock(t, dir, nil)
}

// startClock is start with the server's clock (nil: New's default).
func startClock(t *testing.T, dir string, clk clock.Clock) (*Server, func()) {
	t.Helper()
	o := DefaultOptions()
	o.DataDir = dir
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = "127.0.0.1:0"
	o.ReadyFile = filepath.Join(dir, "ready.json")
	return run(t, o, clk)
}

// run starts a server with o and runs it until the returned stop.
func run(t *testing.T, o Options, clk clock.Clock) (*Server, func()) {
	t.Helper()
	s, err := New(o, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	return s, stop
}

func client(addr string) *sqs.Client {
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String("http://" + addr),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	})
}

func TestServeRestartKeepsMessagesAndCounts(t *testing.T) {
	dir := t.TempDir()
	s, stop := start(t, dir)
	ctx := context.Background()
	c := client(s.SQSAddr())
	cq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"VisibilityTimeout": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: cq.QueueUrl, MessageBody: aws.String("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: cq.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	// The ready file names the address and pid. Run writes it once it
	// serves; the listeners answer from New on, so the requests above may
	// have come first (it failed once under -race in CI): poll for it.
	var ready struct {
		SQS string `json:"sqs"`
		PID int    `json:"pid"`
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		data, err := os.ReadFile(filepath.Join(dir, "ready.json"))
		if err != nil || json.Unmarshal(data, &ready) != nil || ready.SQS != s.SQSAddr() || ready.PID != os.Getpid() {
			return fmt.Errorf("ready file %q: %v", data, err)
		}
		return nil
	})
	stop()

	s, stop = start(t, dir)
	defer stop()
	c = client(s.SQSAddr())
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || *out.Messages[0].MessageId != *sent.MessageId || *out.Messages[0].Body != "hello" {
		t.Fatalf("after restart: %+v", out.Messages)
	}
	if got := out.Messages[0].Attributes["ApproximateReceiveCount"]; got != "2" {
		t.Fatalf("receive count after restart = %s, want 2", got)
	}
	resp, err := http.Get("http://" + s.SQSAddr() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestValidateRejectsBadOptions(t *testing.T) {
	cases := []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Store = "tape" }, "store:"},
		{func(o *Options) { o.DataDir = "" }, "data_dir:"},
		{func(o *Options) { o.SQSListen = "nonsense" }, "sqs_listen:"},
		{func(o *Options) { o.SQSListen = "0.0.0.0:9324" }, "allow_non_loopback"},
		{func(o *Options) { o.AccountID = "12" }, "account_id:"},
		{func(o *Options) { o.LogLevel = "loud" }, "log_level:"},
		{func(o *Options) { o.LogFormat = "xml" }, "log_format:"},
		{func(o *Options) { o.AMQPFlowMinBacklog = -1 }, "amqp_flow_min_backlog:"},
		{func(o *Options) { o.AMQPFlowCreditFactor = -1 }, "amqp_flow_credit_factor:"},
		{func(o *Options) { o.AMQPFlowMaxWait = duration(2 * time.Minute) }, "amqp_flow_max_wait:"},
		{func(o *Options) { o.SQSSendFlowBacklog = -1 }, "sqs_send_flow_backlog:"},
		{func(o *Options) { o.SQSSendFlowMaxWait = duration(2 * time.Second) }, "sqs_send_flow_max_wait:"},
	}
	for _, c := range cases {
		o := DefaultOptions()
		c.mod(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want error containing %q, got %v", c.want, err)
		}
	}
	o := DefaultOptions()
	o.SQSListen = "0.0.0.0:9324"
	o.AllowNonLoopback = true
	if err := o.Validate(); err != nil {
		t.Errorf("explicit non-loopback refused: %v", err)
	}
	if d := DefaultOptions(); d.Validate() != nil {
		t.Errorf("defaults invalid: %v", d.Validate())
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.toml")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	o := DefaultOptions()
	if err := o.LoadFile(write("data_dir = \"/x\"\nsqs_listen = \"127.0.0.1:1\"\n")); err != nil || o.DataDir != "/x" || o.SQSListen != "127.0.0.1:1" {
		t.Fatalf("load: %v %+v", err, o)
	}
	if err := o.LoadFile(write("data_dri = \"/x\"\n")); err == nil || !strings.Contains(err.Error(), "data_dri") {
		t.Fatalf("misspelt key: %v", err)
	}
	if err := o.LoadFile(write("data_dir = \n")); err == nil {
		t.Fatal("broken TOML accepted")
	}
	if err := o.LoadFile(filepath.Join(dir, "missing.toml")); err == nil {
		t.Fatal("missing file accepted")
	}
	// The shipped example must load and validate.
	o = DefaultOptions()
	if err := o.LoadFile("../../docs/sluice.example.toml"); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o, DefaultOptions()) {
		t.Fatalf("example config differs from the defaults:\n got %+v\nwant %+v", o, DefaultOptions())
	}
}

func TestOpenTwiceFails(t *testing.T) {
	dir := t.TempDir()
	_, stop := start(t, dir)
	defer stop()
	o := DefaultOptions()
	o.DataDir = dir
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = "127.0.0.1:0"
	s, err := New(o, nil, nil)
	if err == nil {
		s.Close()
		t.Fatal("a second server opened the same data directory")
	}
}

func TestMetricsAndAlertsEndpoints(t *testing.T) {
	s, stop := start(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	c := client(s.SQSAddr())
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x")})
	for _, p := range []struct{ path, want string }{
		{"/metrics", `sluice_sent_total{queue="m"} 1`},
		{"/metrics", "sluice_store_wal_sync_seconds_count"},
		{"/sluice/v1/alerts", `"alerts"`},
		{"/sluice/v1/queues", `"name":"m"`},
	} {
		resp, err := http.Get("http://" + s.SQSAddr() + p.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), p.want) {
			t.Errorf("GET %s: %d, want %q in:\n%.2000s", p.path, resp.StatusCode, p.want, body)
		}
	}
}

func TestDashboardServedAndRootRedirects(t *testing.T) {
	s, stop := start(t, t.TempDir())
	defer stop()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get("http://" + s.SQSAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET / = %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/ui/", "/sluice/v1/dashboard/overview", "/sluice/v1/advisor", "/sluice/v1/amqp/topology"} {
		resp, err := http.Get("http://" + s.SQSAddr() + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d", p, resp.StatusCode)
		}
	}
	// A Query-protocol GET on the root still reaches the SQS API.
	resp, err = http.Get("http://" + s.SQSAddr() + "/?Action=ListQueues")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "ListQueuesResponse") {
		t.Fatalf("Query GET on /: %d %s", resp.StatusCode, body)
	}
}

// TestDeletedNameWaitsAfterARestart: through an SQS client, a queue
// deleted just before the server restarts still cannot be made again
// (QueueDeletedRecently): the delete's 60 s wait is in its own write (a
// gone record), not only in the engine's memory.
func TestDeletedNameWaitsAfterARestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := start(t, dir)
	ctx := context.Background()
	q, err := client(s.SQSAddr()).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("phoenix")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(s.SQSAddr()).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	stop()
	s, stop = start(t, dir)
	defer stop()
	_, err = client(s.SQSAddr()).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("phoenix")})
	var recently *types.QueueDeletedRecently
	if !errors.As(err, &recently) {
		t.Fatalf("create right after the delete and a restart: %v, want QueueDeletedRecently", err)
	}
}
