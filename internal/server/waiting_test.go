package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestWaitingCountsRealClients: an aws-sdk-go-v2 long poll and an
// amqp091-go consumer, each on its own empty queue, show as one waiting
// receive on that queue in the admin API, and the long poll's count goes
// back to 0 once a message ends its wait.
func TestWaitingCountsRealClients(t *testing.T) {
	s := startWith(t, func(*Options) {})
	ctx := context.Background()
	c := client(s.SQSAddr())
	polled, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("polled")})
	if err != nil {
		t.Fatal(err)
	}
	ch := amqpChannel(t, s)
	if _, err := ch.QueueDeclare("consumed", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("consumed", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	waiting := func() map[string]int {
		resp, err := http.Get("http://" + s.SQSAddr() + "/sluice/v1/queues")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list api.QueueList
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, q := range list.Queues {
			out[q.Name] = q.Waiting
		}
		return out
	}

	got := make(chan int, 1)
	go func() {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: polled.QueueUrl, WaitTimeSeconds: 20})
		if err != nil {
			got <- -1
			return
		}
		got <- len(out.Messages)
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("the long poll and the consumer counted", func() bool {
		w := waiting()
		return w["polled"] == 1 && w["consumed"] == 1
	}))
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: polled.QueueUrl, MessageBody: aws.String("wake")}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 1 {
			t.Fatalf("the long poll returned %d messages", n)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll did not return")
	}
	if w := waiting(); w["polled"] != 0 || w["consumed"] != 1 {
		t.Fatalf("after the long poll returned: %v", w)
	}
}
