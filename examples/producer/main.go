// Command producer creates a queue with a dead-letter queue and sends
// orders to it, a few of them poison. It is the first half of the
// walkthrough in docs/worker.md; examples/worker consumes them.
//
//	go -C examples run ./producer -n 20 -poison 3
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func main() {
	endpoint := flag.String("endpoint", "http://127.0.0.1:9324", "SQS endpoint (a `sluice server`)")
	queue := flag.String("queue", "orders", "queue to send to")
	dlq := flag.String("dlq", "", "its dead-letter queue (default QUEUE-dlq)")
	maxReceives := flag.Int("max-receives", 3, "maxReceiveCount of the redrive policy")
	visibility := flag.Int("visibility", 10, "visibility timeout of the queue, seconds")
	retryPolicy := flag.String("retry-policy", "", `SluiceRetryPolicy for broker-side backoff, e.g. {"strategy":"full-jitter","baseSeconds":1,"capSeconds":30} (default: none; the worker backs off itself)`)
	n := flag.Int("n", 20, "orders to send")
	poison := flag.Int("poison", 3, "of which poison")
	flag.Parse()
	if *dlq == "" {
		*dlq = *queue + "-dlq"
	}
	if err := run(context.Background(), *endpoint, *queue, *dlq, *maxReceives, *visibility, *retryPolicy, *n, *poison); err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

// order is the message body examples/worker expects.
type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer,omitempty"`
	Amount   int    `json:"amount"`
}

func run(ctx context.Context, endpoint, queue, dlq string, maxReceives, visibility int, retryPolicy string, n, poison int) error {
	c := sqs.New(sqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("example", "example", ""),
	})
	d, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlq)})
	if err != nil {
		return fmt.Errorf("create %s: %w", dlq, err)
	}
	arn, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	attrs := map[string]string{
		"VisibilityTimeout": strconv.Itoa(visibility),
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn.Attributes["QueueArn"], maxReceives),
	}
	if retryPolicy != "" {
		attrs["SluiceRetryPolicy"] = retryPolicy
	}
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queue)})
	if err != nil {
		return fmt.Errorf("create %s: %w", queue, err)
	}
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl, Attributes: attrs}); err != nil {
		return fmt.Errorf("configure %s: %w", queue, err)
	}
	fmt.Printf("queue %s → dead-letter queue %s after %d receives (visibility %ds)\n", *q.QueueUrl, dlq, maxReceives, visibility)

	// Poison comes in two kinds, spread through the stream:
	//   - no customer: the worker's validation fails → terminal, DLQ at once;
	//   - customer "c-404": the lookup fails with an unclassified error →
	//     retried with backoff, then dead-lettered after max-receives.
	for i := 1; i <= n; i++ {
		o := order{ID: fmt.Sprintf("o-%d", i), Customer: fmt.Sprintf("c-%d", i%7+1), Amount: 10 * i}
		kind := "ok"
		if poison > 0 && i%max(n/poison, 1) == 0 && i/max(n/poison, 1) <= poison {
			if (i/max(n/poison, 1))%2 == 1 {
				o.Customer, kind = "", "poison: no customer"
			} else {
				o.Customer, kind = "c-404", "poison: unknown customer"
			}
		}
		body, _ := json.Marshal(o)
		out, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(string(body))})
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		fmt.Printf("sent %-5s %s  %s\n", o.ID, *out.MessageId, kind)
	}
	return nil
}
