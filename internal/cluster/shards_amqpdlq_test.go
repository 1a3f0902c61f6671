package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// TestShardsAMQPDeadLetterQueueElsewhere: with placement "subset", a queue
// that an AMQP source's dead-letter exchange routes to, on another shard
// than the source and than shard 0 (whose topology routes it), is that
// source's dead-letter queue where SQS and the operator look: its shard's
// engine learns the route from shard 0's leader, so
// ListDeadLetterSourceQueues names the source — also after shard 0's
// leadership moved, before any dead letter (the source's shard tells the
// new leader of it) — and a redrive (StartMessageMoveTask without a
// destination) returns the dead letters to their source. Until
// 2026-12-07 it was no dead-letter queue there: no sources listed, and
// the redrive refused.
func TestShardsAMQPDeadLetterQueueElsewhere(t *testing.T) {
	nodes := subsetNodes(t)
	ctx := context.Background()
	ch := amqpChannel(t, nodes[0], true)
	if err := ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	graves := subsetName(nodes[0], "graves", 2)
	if _, err := ch.QueueDeclare(graves, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// And one that stays on shard 0 (x-expires), which shard 0's own
	// engine counts as a dead-letter queue of the source elsewhere.
	morgue := subsetName(nodes[0], "morgue", 2)
	if _, err := ch.QueueDeclare(morgue, true, false, false, false, amqp.Table{"x-expires": int32(3600000)}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{graves, morgue} {
		if err := ch.QueueBind(q, "", "dlx", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	jobs := subsetName(nodes[0], "jobs", 1)
	if _, err := ch.QueueDeclare(jobs, true, false, false, false, amqp.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	held := func(name string) []int { return heldBy(t, nodes[1], name) } // node 2 holds every shard
	for name, k := range map[string]int{graves: 2, jobs: 1, morgue: 0} {
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("%s is on shard %d alone", name, k), func() bool { return slices.Equal(held(name), []int{k}) }))
	}

	client := shardClient(nodes[2])
	url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(graves)})
	if err != nil {
		t.Fatal(err)
	}
	morgueURL, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(morgue)})
	if err != nil {
		t.Fatal(err)
	}
	sources := func(what string) {
		t.Helper()
		poll.CheckFor(t, 30*time.Second, func() error {
			for _, n := range nodes {
				for _, u := range []*string{url.QueueUrl, morgueURL.QueueUrl} {
					out, err := shardClient(n).ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: u})
					if err != nil {
						return err
					}
					if len(out.QueueUrls) != 1 || !strings.HasSuffix(out.QueueUrls[0], "/"+jobs) {
						return fmt.Errorf("%s: sources of %s through node %d: %v, want %s", what, *u, n.opts.Cluster.NodeID, out.QueueUrls, jobs)
					}
				}
			}
			return nil
		})
	}
	sources("after the declares")

	// Shard 0's leadership to another voter of it: the new leader's
	// topology knows the placed source only once its shard says so.
	var from *Node
	for _, n := range nodes {
		if n.leadsShard(0) {
			from = n
		}
	}
	if from == nil {
		t.Fatal("no node leads shard 0")
	}
	var to uint64
	for _, m := range from.shards.Shard(0).Status().Members {
		if m.ID != from.opts.Cluster.NodeID && m.Membership == raftstore.Voter {
			to = m.ID
		}
	}
	if to == 0 {
		t.Fatal("shard 0 has no other voter")
	}
	handOver(t, nodes, 0, to)
	sources("after shard 0's leadership moved")

	// Dead letters, then a redrive of the dead-letter queue without a
	// destination: back in their source.
	ch = amqpChannel(t, nodes[0], true)
	const poison = 3
	rejectPublished(t, ch, jobs, "poison/", poison)
	awaitMessages(t, amqpChannel(t, nodes[2], false), graves, poison, 30*time.Second)
	arn, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn.Attributes["QueueArn"])}); err != nil {
		t.Fatalf("a redrive of %s, the dead-letter queue of %s through an AMQP dead-letter exchange: %v", graves, jobs, err)
	}
	awaitMessages(t, amqpChannel(t, nodes[2], false), jobs, poison, 30*time.Second)
	awaitMessages(t, amqpChannel(t, nodes[2], false), graves, 0, 30*time.Second)
}

// TestSubsetFindsAQueueItsCopyLacks: with placement "subset", a queue
// whose placement names a shard this node holds is found there even when
// this node's copy of that shard lacks it — a copy catching up, as on a
// member the placement controller just added, still receiving its
// snapshot. Before, such a node's engines took the queue for one that
// lives nowhere: a dead letter routed to it by shard 0's leader there was
// dropped as routed nowhere. Played here with a placement written for a
// queue no copy holds.
func TestSubsetFindsAQueueItsCopyLacks(t *testing.T) {
	nodes, _ := startThreeWith(t, func(o *server.Options) {
		o.Cluster.Shards = 3
		o.Cluster.ReplicationFactor = 2
		o.Cluster.Placement = server.PlacementSubset
	}, func(_ int, o *Options) {
		o.BalanceInterval = 100 * time.Millisecond
		o.PlacementInterval = time.Hour // the keepers leave the played placement alone
	}, nil, 3)
	poll.CheckFor(t, 30*time.Second, func() error { return balancerSettled(nodes, 3) })
	behind := subsetName(nodes[0], "behind", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poll.CheckFor(t, 30*time.Second, func() error {
		_, err := nodes[0].nameCall(ctx, 0, 2*time.Second, server.PlacementsCall(1, []string{behind}, false), nil)
		return err
	})
	holders := 0
	for _, n := range nodes {
		if !n.shards.Held(1) {
			continue
		}
		holders++
		poll.CheckFor(t, 10*time.Second, func() error {
			if k, ok := n.findQueue(behind); !ok || k != 1 {
				return fmt.Errorf("node %d, which holds shard 1, finds %s at %d, %v; want shard 1 (its placement)", n.opts.Cluster.NodeID, behind, k, ok)
			}
			return nil
		})
	}
	if holders == 0 {
		t.Fatal("no node holds shard 1")
	}
}

// rejectPublished publishes n confirmed messages to queue through ch
// (bodies prefix0, prefix1, …), then gets each and rejects it without
// requeue: n dead letters of queue.
func rejectPublished(t *testing.T, ch *amqp.Channel, queue, prefix string, n int) {
	t.Helper()
	for j := range n {
		publishConfirmed(t, ch, queue, prefix+strconv.Itoa(j))
	}
	for range n {
		d, ok, err := ch.Get(queue, false)
		if err != nil || !ok {
			t.Fatalf("get from %s: %v, %v", queue, ok, err)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
}
