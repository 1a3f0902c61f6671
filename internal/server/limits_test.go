package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

func wantAPICode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

// TestQueueAndMessageLimits is the security issue's "no cap on queues or
// messages" finding: creating queues without end grew memory and /metrics
// without bound. Now max_queues refuses the next queue (SQS OverLimit,
// AMQP 406), max_queue_messages the next message (SQS OverLimit, AMQP
// nack), and /metrics stops growing at metrics_max_queue_series.
func TestQueueAndMessageLimits(t *testing.T) {
	s := startWith(t, func(o *Options) {
		o.MaxQueues = 30
		o.MaxQueueMessages = 5
		o.MetricsMaxQueueSeries = 10
	})
	ctx := context.Background()
	c := client(s.SQSAddr())
	metricsSize := func() int {
		resp, err := http.Get("http://" + s.SQSAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return len(b)
	}
	for i := 0; i < 10; i++ {
		if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("q%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	atTen := metricsSize()
	for i := 10; i < 30; i++ {
		if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("q%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("one-too-many")})
	wantAPICode(t, err, "OverLimit")
	// Re-creating an existing queue is still fine at the cap.
	if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q00")}); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare("amqp-too-many", false, false, false, false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != 406 {
		t.Fatalf("AMQP declare over max_queues: %v", err)
	}
	if n := len(s.Engine().ListQueues("")); n != 30 {
		t.Fatalf("%d queues, cap 30", n)
	}
	// The queues beyond the cap add one "(other)" block (its histograms
	// are most of it), where 20 queues of their own add ~54 KB.
	if grown := metricsSize() - atTen; grown > 8<<10 {
		t.Fatalf("/metrics grew %d bytes from 10 to 30 queues with a 10-queue series cap", grown)
	}

	// Messages: five fit, the sixth is refused, over SQS and AMQP.
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q01")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("m")}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("m")})
	wantAPICode(t, err, "OverLimit")
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch2.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch2.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := ch2.Publish("", "q01", false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	select {
	case cf := <-confirms:
		if cf.Ack {
			t.Fatal("a publish over max_queue_messages was confirmed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no confirm")
	}
	info, err := s.Engine().GetQueue("q01")
	if err != nil || info.Visible != 5 {
		t.Fatalf("q01: %+v %v", info, err)
	}
}
