package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestAMQPQueueOverSQSHasSQSMaximumMessageSize: a queue declared over AMQP
// (whose engine limit is the largest, its publishes bounded by the AMQP
// front-end) shows SQS clients a MaximumMessageSize SQS can have, 1 MiB —
// until 2026-12-07 it showed 536870912 — and takes SQS sends up to it,
// refusing a larger one with SQS's error.
func TestAMQPQueueOverSQSHasSQSMaximumMessageSize(t *testing.T) {
	s := startWith(t, func(*Options) {})
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("declared", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := client(s.SQSAddr())
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("declared")})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{"MaximumMessageSize"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := attrs.Attributes["MaximumMessageSize"]; got != "1048576" {
		t.Fatalf("MaximumMessageSize %q, want 1048576", got)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String(strings.Repeat("x", 1<<20))}); err != nil {
		t.Fatalf("a 1 MiB send: %v", err)
	}
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String(strings.Repeat("x", 1<<20+1))})
	var ae smithy.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.ErrorMessage(), "1048576") {
		t.Fatalf("a send over 1 MiB: %v, want it refused at 1048576 bytes", err)
	}
}

// The AMQP product property and message size limit are settable from the
// server's configuration (amqp_product, amqp_max_message_size; the flags
// map to the same options).
func TestAMQPProductAndMaxMessageSizeFromConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(cfg, []byte("amqp_product = \"RabbitMQ\"\namqp_max_message_size = 2048\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startWith(t, func(o *Options) {
		if err := o.LoadFile(cfg); err != nil {
			t.Fatal(err)
		}
	})
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.Properties["product"]; p != "RabbitMQ" {
		t.Fatalf("product %v", p)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("sized", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Publish("", "sized", false, false, amqp091.Publishing{Body: make([]byte, 2049)}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 || !strings.Contains(e.Reason, "configured max size 2048") {
			t.Fatalf("close: %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an oversized message did not close the channel")
	}
}

func TestAMQPOptionDefaultsAndValidation(t *testing.T) {
	o := DefaultOptions()
	if o.AMQPMaxMessageSize != 16<<20 || o.AMQPProduct != "Sluice" {
		t.Fatalf("defaults: %d %q", o.AMQPMaxMessageSize, o.AMQPProduct)
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.AMQPMaxMessageSize = 0 },
		func(o *Options) { o.AMQPMaxMessageSize = 512<<20 + 1 },
		func(o *Options) { o.AMQPProduct = "" },
	} {
		o := DefaultOptions()
		o.DataDir = t.TempDir()
		bad(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), "amqp_") {
			t.Fatalf("accepted: %v", err)
		}
	}
}
