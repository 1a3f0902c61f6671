package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/worker"
)

// A poison message goes to the dead-letter queue on its first attempt,
// with the error that condemned it; the good ones are processed.
func Example_poison() {
	endpoint, stopBroker := startSluice() // in your program: `sluice server`
	defer stopBroker()
	ctx := context.Background()
	client := sqs.New(sqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
	})

	// orders, with a dead-letter queue after 5 receives.
	dlq, _ := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders-dlq")})
	queue, _ := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":5}`,
	}})
	for _, body := range []string{`{"id":"o-1","qty":2}`, `not json`, `{"id":"o-2","qty":1}`} {
		client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: queue.QueueUrl, MessageBody: aws.String(body)})
	}

	src, err := worker.NewSQSSource(client, *queue.QueueUrl, worker.SQSSourceOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var processed atomic.Int32
	handler := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		var order struct {
			ID  string `json:"id"`
			Qty int    `json:"qty"`
		}
		if err := json.Unmarshal(m.Body, &order); err != nil {
			return worker.Terminal(fmt.Errorf("decode order: %w", err))
		}
		processed.Add(1)
		return nil
	})
	opts := worker.DefaultOptions()
	opts.Version = "orders-1.4.2"
	w, err := worker.New(src, handler, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for w.Stats().Processed < 2 || w.Stats().DeadLettered < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done

	fmt.Println("processed:", processed.Load())
	out, _ := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{"Sluice*"}})
	for _, m := range out.Messages {
		a := m.Attributes
		fmt.Printf("dead-lettered: %q\n  reason=%s attempts=%s\n  class=%s\n  message=%s\n  version=%s\n",
			*m.Body, a["SluiceDeadLetterReason"], a["SluiceAttempts"], a["SluiceErrorClass"], a["SluiceErrorMessage"], a["SluiceConsumerVersion"])
	}
	// Output:
	// processed: 2
	// dead-lettered: "not json"
	//   reason=terminal attempts=1
	//   class=*json.SyntaxError
	//   message=decode order: invalid character 'o' in literal null (expecting 'u')
	//   version=orders-1.4.2
}

// startSluice runs a broker (the binary TestMain built) for the example.
func startSluice() (endpoint string, stop func()) {
	dir, _ := os.MkdirTemp("", "sluice-example")
	s, err := startSluiced(dir)
	if err != nil {
		panic(err)
	}
	return "http://" + s.SQSAddr, func() { s.stop(); os.RemoveAll(dir) }
}
