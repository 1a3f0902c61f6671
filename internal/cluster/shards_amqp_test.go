package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/server"
)

// TestShardsAMQPPublishesToOtherShards (ADR 0015 step 4, its publish
// part): AMQP lives on shard 0's leader, yet a publish through the default
// exchange to an SQS queue on another shard reaches that queue, confirmed
// only once it is stored there, with its headers as message attributes —
// through every node, for queues on both other shards. A mandatory publish
// to a name no shard holds is still returned. What AMQP does not do with
// such a queue (consume) fails with a 404 that says why.
func TestShardsAMQPPublishesToOtherShards(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(*server.Options) {})
	ctx := context.Background()
	queueOn := func(k int) string {
		name := fmt.Sprintf("orders-%d", k)
		for i := 0; hashShard(name, 3) != k; i++ {
			name = fmt.Sprintf("orders-%d-%d", k, i)
		}
		if _, err := shardClient(nodes[0]).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		if at, ok := nodes[0].findQueue(name); !ok || at != k {
			t.Fatalf("%s is on shard %d (%v), want %d", name, at, ok, k)
		}
		return name
	}
	queues := []string{queueOn(1), queueOn(2)}

	const each = 5
	for i, n := range nodes {
		conn, err := amqp.Dial("amqp://guest:guest@" + n.AMQPAddr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		returns := ch.NotifyReturn(make(chan amqp.Return, 64))
		for _, q := range queues {
			// A publisher's usual first step: declare, then publish.
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatalf("declare %s through node %d: %v", q, i+1, err)
			}
			for j := range each {
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
					DeliveryMode: amqp.Persistent, Headers: amqp.Table{"origin": fmt.Sprintf("node-%d", i+1)},
					Body: []byte(fmt.Sprintf("%s/%d/%d", q, i, j))})
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				ok, err := dc.WaitContext(wctx)
				cancel()
				if err != nil || !ok {
					t.Fatalf("publish to %s through node %d: acked %v, %v", q, i+1, ok, err)
				}
			}
		}
		// A name no shard holds: still unroutable, returned.
		if err := ch.PublishWithContext(ctx, "", "no-such-queue", true, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-returns:
			if r.RoutingKey != "no-such-queue" {
				t.Fatalf("returned a publish to %q through node %d", r.RoutingKey, i+1)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no basic.return for an unroutable mandatory publish through node %d", i+1)
		}
		select {
		case r := <-returns:
			t.Fatalf("returned a publish to %q through node %d", r.RoutingKey, i+1)
		default:
		}
		// Consuming is not reached across shards: a 404 that says so.
		_, err = ch.Consume(queues[0], "", false, false, false, false, nil)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound || !strings.Contains(ae.Reason, "another shard") {
			t.Fatalf("consume from %s through node %d: %v, want 404 naming another shard", queues[0], i+1, err)
		}
		_ = conn.Close() // done with this node
	}

	// Every confirmed publish is in its queue, with its header.
	for qi, q := range queues {
		client := shardClient(nodes[(qi+1)%3])
		url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		deadline := time.Now().Add(30 * time.Second)
		for len(seen) < each*len(nodes) && time.Now().Before(deadline) {
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				body := aws.ToString(m.Body)
				if !strings.HasPrefix(body, q+"/") {
					t.Fatalf("%s holds %q", q, body)
				}
				if a, ok := m.MessageAttributes["origin"]; !ok || !strings.HasPrefix(aws.ToString(a.StringValue), "node-") {
					t.Fatalf("%q arrived without its header as an attribute: %v", body, m.MessageAttributes)
				}
				seen[body] = true
			}
		}
		if len(seen) != each*len(nodes) {
			t.Fatalf("%s holds %d of the %d confirmed publishes", q, len(seen), each*len(nodes))
		}
	}
}
