package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/worker"
)

// broker is a real Sluice (the cmd/sluice binary TestMain built) on
// 127.0.0.1:0.
type broker struct {
	t        *testing.T
	addr     string // SQS/HTTP listener
	amqpAddr string
	c        *sqs.Client
}

func startBroker(t *testing.T) *broker {
	t.Helper()
	s, err := startSluiced(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	b := &broker{t: t, addr: s.SQSAddr, amqpAddr: s.AMQPAddr}
	b.c = sqs.New(sqs.Options{
		BaseEndpoint: aws.String("http://" + b.addr),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	})
	return b
}

// queue creates name with a DLQ name+"-dlq" (when maxReceives > 0) and the
// given extra attributes, and returns the queue URLs.
func (b *broker) queue(name string, visibility, maxReceives int, attrs map[string]string) (url, dlqURL string) {
	b.t.Helper()
	ctx := context.Background()
	a := map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)}
	if maxReceives > 0 {
		d, err := b.c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
		if err != nil {
			b.t.Fatal(err)
		}
		dlqURL = *d.QueueUrl
		arn, err := b.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			b.t.Fatal(err)
		}
		a["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn.Attributes["QueueArn"], maxReceives)
	}
	for k, v := range attrs {
		a[k] = v
	}
	q, err := b.c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: a})
	if err != nil {
		b.t.Fatal(err)
	}
	return *q.QueueUrl, dlqURL
}

func (b *broker) send(url string, bodies ...string) []string {
	b.t.Helper()
	var ids []string
	for _, body := range bodies {
		out, err := b.c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
		if err != nil {
			b.t.Fatal(err)
		}
		ids = append(ids, *out.MessageId)
	}
	return ids
}

// depth is every message in the queue: visible, in flight and delayed.
func (b *broker) depth(url string) int {
	b.t.Helper()
	out, err := b.c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		b.t.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n
}

// extension reports whether the broker serves the failure-report
// extension (the admin API is mounted).
func (b *broker) extension() bool {
	resp, err := http.Get("http://" + b.addr + "/sluice/v1/queues")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
}

// dlqMessage is a dead-lettered message with its Sluice context, read by
// receiving from the DLQ with the Sluice* system attributes.
type dlqMessage struct {
	ID    string
	Body  string
	Attrs map[string]string
}

func (b *broker) drainDLQ(url string) []dlqMessage {
	b.t.Helper()
	var out []dlqMessage
	for {
		r, err := b.c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All", "Sluice*"}})
		if err != nil {
			b.t.Fatal(err)
		}
		if len(r.Messages) == 0 {
			return out
		}
		for _, m := range r.Messages {
			out = append(out, dlqMessage{ID: *m.MessageId, Body: *m.Body, Attrs: m.Attributes})
		}
	}
}

// admin POSTs body to the admin API path and fails the test unless the
// answer is 2xx.
func (b *broker) admin(path, body string) {
	b.t.Helper()
	resp, err := http.Post("http://"+b.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		b.t.Fatalf("POST %s: %s: %s", path, resp.Status, out)
	}
}

// browse lists a queue through the admin API (only when mounted).
func (b *broker) browse(queue string) []map[string]any {
	b.t.Helper()
	resp, err := http.Get("http://" + b.addr + "/sluice/v1/queues/" + queue + "/messages")
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		b.t.Fatal(err)
	}
	return page.Messages
}

// source returns an SQSSource for url with a short long-poll.
func (b *broker) source(url string, o worker.SQSSourceOptions) *worker.SQSSource {
	b.t.Helper()
	if o.WaitTime == 0 {
		o.WaitTime = time.Second
	}
	if o.Logger == nil {
		o.Logger = testLogger(b.t)
	}
	s, err := worker.NewSQSSource(b.c, url, o)
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// run starts w and returns a stop function that cancels it and waits for
// Run to return.
func run(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// fastOptions are DefaultOptions with short timers for tests.
func fastOptions(t *testing.T) worker.Options {
	o := worker.DefaultOptions()
	o.Backoff = worker.Backoff{Base: 100 * time.Millisecond, Cap: time.Second}
	o.ShutdownTimeout = 5 * time.Second
	o.Logger = testLogger(t)
	o.Version = "test-1.0"
	return o
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("WORKER_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorder is a Metrics that remembers breaker changes.
type recorder struct {
	worker.NopMetrics
	mu      sync.Mutex
	changes []worker.BreakerState
}

func (r *recorder) BreakerChanged(_, to worker.BreakerState) {
	r.mu.Lock()
	r.changes = append(r.changes, to)
	r.mu.Unlock()
}

func (r *recorder) states() []worker.BreakerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]worker.BreakerState(nil), r.changes...)
}
