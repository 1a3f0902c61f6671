package crash

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestAMQPDeliveriesRequeuedAfterKill: a queue created over SQS and
// consumed over AMQP. After kill -9, the messages an AMQP consumer held
// unacknowledged are deliverable again as soon as the server is back (their
// connection died with it, as RabbitMQ requeues them), not after the
// consumer timeout (30 minutes), marked redelivered; a message an SQS
// client received keeps its visibility timeout, as in SQS.
func TestAMQPDeliveriesRequeuedAfterKill(t *testing.T) {
	bin := Binary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Kill() })
	c := NewClient(srv.URL(), "session", 2, 30*time.Second)
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("sqs-made")})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"a1", "a2", "s1"} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	// Two deliveries to an AMQP consumer, never acknowledged.
	conn, err := amqp.Dial(srv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("sqs-made", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for len(held) < 2 {
		select {
		case d := <-ds:
			held[string(d.Body)] = true
		case <-ctx.Done():
			t.Fatalf("AMQP consumer got %d of 2 deliveries", len(held))
		}
	}
	// The third to an SQS receive with a long visibility timeout.
	var sqsHeld string
	for sqsHeld == "" {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, VisibilityTimeout: 3600, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 1 {
			sqsHeld = *out.Messages[0].Body
		}
	}
	if held[sqsHeld] {
		t.Fatalf("%q delivered to both consumers", sqsHeld)
	}
	// The SQS lease and the queue's session mark (the AMQP deliveries
	// write no lease) are written without a sync; a send is synced, and
	// the log is sequential, so after it they are on disk too and the
	// kill cannot undo them.
	other, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("barrier")})
	if err == nil {
		_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: other.QueueUrl, MessageBody: aws.String("sync")})
	}
	if err != nil {
		t.Fatal(err)
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	srv, err = Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c = NewClient(srv.URL(), "session", 2, 30*time.Second)
	u, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("sqs-made")})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	if v, nv := attrs.Attributes["ApproximateNumberOfMessages"], attrs.Attributes["ApproximateNumberOfMessagesNotVisible"]; v != "2" || nv != "1" {
		t.Fatalf("after the restart: %s visible, %s not visible; want the 2 AMQP deliveries visible and the SQS lease running", v, nv)
	}
	// The two come back to an AMQP consumer at once, marked redelivered
	// (ADR 0014: the delivery wrote no lease; the queue's session mark
	// says they may have gone out before the kill).
	conn2, err := amqp.Dial(srv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	ch2, err := conn2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds2, err := ch2.Consume("sqs-made", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case d := <-ds2:
			if !held[string(d.Body)] {
				t.Fatalf("received %q after the restart; the SQS lease on %q should still run", d.Body, sqsHeld)
			}
			if !d.Redelivered {
				t.Fatalf("%q: not marked redelivered after the kill", d.Body)
			}
			if _, has := d.Headers["x-delivery-count"]; has {
				t.Fatalf("%q: x-delivery-count %v, but the kill forgot the only delivery's count", d.Body, d.Headers["x-delivery-count"])
			}
			got[string(d.Body)] = true
		case <-ctx.Done():
			t.Fatalf("AMQP consumer got %d of 2 after the restart", len(got))
		}
	}
}
