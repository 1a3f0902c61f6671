package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	sqsapi "github.com/sluicemq/sluice/internal/sqs"
)

func TestDeadLetterBase(t *testing.T) {
	for name, want := range map[string]string{
		"orders-dlq":              "orders",
		"orders_DLQ":              "orders",
		"orders.dlq":              "orders",
		"orders-dead-letter":      "orders",
		"orders_dead_letter":      "orders",
		"orders-deadletter":       "orders",
		"jobs-dlq.fifo":           "jobs.fifo",
		"jobs-DeadLetter.fifo":    "jobs.fifo",
		"-dlq":                    "",
		"orders":                  "",
		"dlq":                     "",
		"orders-dlq-2":            "",
		"orders.fifo":             "",
		"orders-dlqs":             "",
		"my-dlq-orders-dlq":       "my-dlq-orders",
		"orders-dead-letter.fifo": "orders.fifo",
	} {
		if got := deadLetterBase(name); got != want {
			t.Errorf("deadLetterBase(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestShardsPlaceANewDLQWithItsQueue: with shards, a dead-letter queue
// created for a queue that already exists lands on that queue's shard —
// by its name (orders-N-dlq) or by the sluice:place-with tag — whatever
// shard its own name hashes to, so that the queue's RedrivePolicy can
// then name it; and the queue dead-letters into it.
func TestShardsPlaceANewDLQWithItsQueue(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := shardClient(nodes[0])
	// A source whose DLQ name hashes to another shard, for each way.
	pick := func(prefix string, dlq func(string) string) string {
		for i := 0; ; i++ {
			src := fmt.Sprintf("%s-%d", prefix, i)
			if hashShard(src, 3) != hashShard(dlq(src), 3) {
				return src
			}
		}
	}
	byName := pick("orders", func(s string) string { return s + "-dlq" })
	byTag := pick("jobs", func(s string) string { return "parked-" + s })
	for _, tc := range []struct {
		src, dlq string
		tags     map[string]string
	}{
		{byName, byName + "-dlq", nil},
		{byTag, "parked-" + byTag, map[string]string{sqsapi.PlaceWithTag: byTag}},
	} {
		src, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(tc.src), Attributes: map[string]string{"VisibilityTimeout": "0"}})
		if err != nil {
			t.Fatal(err)
		}
		dlq, err := shardClient(nodes[1]).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(tc.dlq), Tags: tc.tags})
		if err != nil {
			t.Fatal(err)
		}
		// Node 1's copies hold both once they have applied the creates.
		nodes[0].catchUp(ctx)
		ks, oks := nodes[0].findQueue(tc.src)
		if kd, ok := nodes[0].findQueue(tc.dlq); !ok || !oks || kd != ks {
			t.Fatalf("%s is on shard %d (found %v), %s on %d (found %v)", tc.dlq, kd, ok, tc.src, ks, oks)
		}
		attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shardClient(nodes[2]).SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: map[string]string{
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, attrs.Attributes["QueueArn"]),
		}}); err != nil {
			t.Fatalf("a RedrivePolicy on %s naming %s: %v", tc.src, tc.dlq, err)
		}
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageBody: aws.String("poison")}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: src.QueueUrl}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 2})
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "poison" {
			t.Fatalf("%s holds %+v, %v; want the poison message", tc.dlq, out, err)
		}
	}
}
