package server

import (
	"context"
	"errors"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/engine"
)

// alarmClients are an SQS client without retries and an AMQP publisher in
// confirm mode listening for connection.blocked.
type alarmClients struct {
	sqs     *sqs.Client
	url     *string
	ch      *amqp091.Channel
	blocked chan amqp091.Blocking
}

func newAlarmClients(t *testing.T, s *Server) *alarmClients {
	t.Helper()
	c := &alarmClients{sqs: sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + s.SQSAddr()), Region: "us-east-1",
		RetryMaxAttempts: 1, Retryer: aws.NopRetryer{}, Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})}
	q, err := c.sqs.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("alarm")})
	if err != nil {
		t.Fatal(err)
	}
	c.url = q.QueueUrl
	// amqp091-go advertises the connection.blocked capability.
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.blocked = conn.NotifyBlocked(make(chan amqp091.Blocking, 8))
	if c.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	if err := c.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitBlocking waits for a connection.blocked (active) or
// connection.unblocked.
func (c *alarmClients) waitBlocking(t *testing.T, active bool, reason string) {
	t.Helper()
	select {
	case b := <-c.blocked:
		if b.Active != active || active && b.Reason != reason {
			t.Fatalf("got %+v, want active=%v reason %q", b, active, reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no connection.blocked active=%v in 10 s", active)
	}
}

func refusedRetryable(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ServiceUnavailable"
}

// publishBlocked publishes one message while publishers are blocked and
// returns its confirmation; it must not be dropped or refused, only held.
func (c *alarmClients) publishBlocked(t *testing.T) *amqp091.DeferredConfirmation {
	t.Helper()
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "alarm", false, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("held")})
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// confirmed checks that the held publish was confirmed and stored.
func confirmed(t *testing.T, s *Server, dc *amqp091.DeferredConfirmation) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := dc.WaitContext(ctx)
	if err != nil || !ok {
		t.Fatalf("publish held during the alarm: ack=%v err=%v, want a positive confirm once it cleared", ok, err)
	}
	page, err := s.Engine().Browse("alarm", engine.Filter{}, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range page.Messages {
		if string(v.Body) == "held" {
			return
		}
	}
	t.Fatalf("the confirmed publish is not in the queue (%d messages)", len(page.Messages))
}

// TestMemoryWatermarkBlocksPublishers: messages whose bodies are tiny but
// whose attributes are large fill the memory watermark (the body budget
// alone would never trip). Then SQS sends get a retryable 503
// ServiceUnavailable, AMQP publishers get connection.blocked "low on
// memory" and their publishes are held, not dropped; receives and deletes
// go on, and once they drain the backlog below 90% of the watermark the
// publishers get connection.unblocked, the held publish is confirmed and
// SQS sends are accepted again.
func TestMemoryWatermarkBlocksPublishers(t *testing.T) {
	const watermark = 256 << 10
	s := startWith(t, func(o *Options) { o.MemoryHighWatermark = watermark })
	c := newAlarmClients(t, s)
	bg := context.Background()
	attr := map[string]types.MessageAttributeValue{"big": {DataType: aws.String("String"), StringValue: aws.String(strings.Repeat("a", 16<<10))}}
	sent := 0
	for {
		_, err := c.sqs.SendMessage(bg, &sqs.SendMessageInput{QueueUrl: c.url, MessageBody: aws.String("m"), MessageAttributes: attr})
		if refusedRetryable(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if sent++; sent > 200 {
			t.Fatalf("%d messages with 16 KiB attributes (%d bytes accounted) never reached a %d-byte watermark", sent, s.Engine().MemoryHeld(), watermark)
		}
		// Let the 100 ms watch see the count before going far past it.
		if s.Engine().MemoryHeld() >= watermark {
			time.Sleep(2 * memPollInterval)
		}
	}
	if sent*(16<<10) < watermark/2 {
		t.Fatalf("refused after only %d messages", sent)
	}
	c.waitBlocking(t, true, alarmMemory)
	dc := c.publishBlocked(t)

	// Drain over SQS (receives and deletes still work).
	for s.Engine().MemoryHeld() >= watermark-watermark/10 {
		out, err := c.sqs.ReceiveMessage(bg, &sqs.ReceiveMessageInput{QueueUrl: c.url, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatalf("receive during the alarm: %v", err)
		}
		for _, m := range out.Messages {
			if _, err := c.sqs.DeleteMessage(bg, &sqs.DeleteMessageInput{QueueUrl: c.url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("delete during the alarm: %v", err)
			}
		}
	}
	c.waitBlocking(t, false, "")
	confirmed(t, s, dc)
	if _, err := c.sqs.SendMessage(bg, &sqs.SendMessageInput{QueueUrl: c.url, MessageBody: aws.String("again")}); err != nil {
		t.Fatalf("send after the alarm cleared: %v", err)
	}
}

// TestDiskWatermarkBlocksAMQPPublishers: below min_free_disk AMQP
// publishers get RabbitMQ's disk alarm, connection.blocked "low on disk",
// and their publishes are held rather than dropped, while a consuming
// connection still gets messages; when space returns they get
// connection.unblocked and the held publish is confirmed.
func TestDiskWatermarkBlocksAMQPPublishers(t *testing.T) {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	o.MinFreeDisk = 1 << 30
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var free atomic.Uint64
	free.Store(10 << 30)
	s.freeBytes = func(string) (uint64, error) { return free.Load(), nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	c := newAlarmClients(t, s)
	if _, err := c.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: c.url, MessageBody: aws.String("before")}); err != nil {
		t.Fatal(err)
	}
	free.Store(100 << 20)
	c.waitBlocking(t, true, alarmDisk)
	// A connection that only consumes is not blocked: consuming is what
	// frees the resources.
	consumer, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	cch, err := consumer.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok, err := cch.Get("alarm", true); err != nil || !ok || string(m.Body) != "before" {
		t.Fatalf("basic.get during the disk alarm: %q %v %v", m.Body, ok, err)
	}
	if _, err := c.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: c.url, MessageBody: aws.String("m")}); !refusedRetryable(err) {
		t.Fatalf("SQS send on a nearly full disk: %v, want ServiceUnavailable", err)
	}
	dc := c.publishBlocked(t)
	free.Store(10 << 30)
	c.waitBlocking(t, false, "")
	confirmed(t, s, dc)
}

// TestMemoryWatermarkDefault: 0 means 40% of the memory limit (cgroup or
// physical), negative turns the watch off, and a server sets the runtime's
// soft memory limit to 90% of the limit so recovery cannot outgrow it.
func TestMemoryWatermarkDefault(t *testing.T) {
	limit := memoryLimit()
	if limit == 0 {
		t.Skip("no memory limit readable on this machine")
	}
	if got, want := memoryWatermark(0), int64(float64(limit)*defaultMemoryFraction); got != want {
		t.Errorf("default watermark %d, want %d (40%% of %d)", got, want, limit)
	}
	if got := memoryWatermark(-1); got != 0 {
		t.Errorf("negative watermark resolved to %d, want 0 (off)", got)
	}
	if got := memoryWatermark(12345); got != 12345 {
		t.Errorf("explicit watermark resolved to %d", got)
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	startWith(t, func(*Options) {})
	if got, want := debug.SetMemoryLimit(-1), int64(limit/10*9); got != want {
		t.Errorf("runtime soft memory limit %d, want %d", got, want)
	}
}
