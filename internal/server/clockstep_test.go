package server

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/clock"
)

// TestClockStepIsSlewed: a single node's clock steps 20 s forward while a
// message is in flight with a 15 s visibility timeout. On clock.Slewed
// (New's default, there over the machine's clock) the step is slewed at
// 1 %, so the message is not redelivered early; on the stepped clock
// itself it is, at once.
func TestClockStepIsSlewed(t *testing.T) {
	wall := &clock.Stepping{}
	s, stop := startClock(t, t.TempDir(), clock.NewSlewed(wall))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client(s.SQSAddr())
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("step")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("in flight")}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, VisibilityTimeout: 15})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(got.Messages))
	}
	received := time.Now()
	wall.Step(20 * time.Second)
	for range 2 {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) > 0 {
			t.Fatalf("the message in flight was redelivered %v after its 15s receive, after the clock stepped 20s",
				time.Since(received).Round(time.Millisecond))
		}
	}
	if took := time.Since(received); took > 12*time.Second {
		t.Skipf("the check took %v, too close to the 15s visibility timeout to judge", took)
	}
}
