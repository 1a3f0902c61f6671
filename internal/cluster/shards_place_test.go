package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
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

// TestShardsPlaceDeclaredQueues: with shards, the config's [[queues]] are
// placed as CreateQueue places queues, each declared by its own shard's
// server: a plain queue on the shard its name hashes to, a queue and its
// dead-letter queue together (declared source first, by the shorthand,
// or dead-letter queue first, by a RedrivePolicy ARN), each on exactly
// one shard, and the source dead-letters into it. Declared by shard 0's
// server alone, as before, every one of them was on shard 0.
func TestShardsPlaceDeclaredQueues(t *testing.T) {
	// Names whose halves hash to different shards.
	pair := func(src func(int) string, dlq func(int) string) (string, string) {
		for i := 0; ; i++ {
			if hashShard(src(i), 3) != hashShard(dlq(i), 3) {
				return src(i), dlq(i)
			}
		}
	}
	jobs, failed := pair(func(i int) string { return fmt.Sprintf("jobs-%d", i) }, func(i int) string { return fmt.Sprintf("failed-%d", i) })
	orders, ordersDLQ := pair(func(i int) string { return fmt.Sprintf("orders-%d", i) }, func(i int) string { return fmt.Sprintf("orders-%d-dlq", i) })
	plain := []string{"cfg-0", "cfg-1", "cfg-2"} // they hash to shards 1, 0 and 2
	decl := []server.QueueDeclaration{
		{Name: jobs, DeadLetterQueue: failed, MaxReceiveCount: 1},
		{Name: failed},
		{Name: ordersDLQ},
		{Name: orders, Attributes: map[string]string{
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:%s","maxReceiveCount":"1"}`, ordersDLQ)}},
	}
	for _, p := range plain {
		decl = append(decl, server.QueueDeclaration{Name: p})
	}
	nodes, _ := shardedNodesWith(t, func(o *server.Options) { o.Queues = decl })
	held := func(name string) []int { return heldBy(t, nodes[1], name) }
	poll.CheckFor(t, 20*time.Second, func() error {
		for _, q := range decl {
			if at := held(q.Name); len(at) != 1 {
				return fmt.Errorf("%s is held by shards %v", q.Name, at)
			}
		}
		return nil
	})
	for _, p := range plain {
		if at := held(p)[0]; at != hashShard(p, 3) {
			t.Errorf("%s is on shard %d, want %d (its name's)", p, at, hashShard(p, 3))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, pr := range [][2]string{{jobs, failed}, {orders, ordersDLQ}} {
		src, dlq := pr[0], pr[1]
		if a, b := held(src)[0], held(dlq)[0]; a != b {
			t.Fatalf("%s is on shard %d, its dead-letter queue %s on %d", src, a, dlq, b)
		}
		// It dead-letters there: received once, the receive after its lease moves it.
		c := shardClient(nodes[2])
		srcURL, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(src)})
		if err != nil {
			t.Fatal(err)
		}
		dlqURL, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(dlq)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: srcURL.QueueUrl, MessageBody: aws.String("poison of " + src)}); err != nil {
			t.Fatal(err)
		}
		poll.CheckFor(t, 20*time.Second, func() error {
			if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: srcURL.QueueUrl, VisibilityTimeout: 1}); err != nil {
				return err
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dlqURL.QueueUrl})
			if err != nil {
				return err
			}
			if len(out.Messages) == 0 || aws.ToString(out.Messages[0].Body) != "poison of "+src {
				return fmt.Errorf("%s: nothing dead-lettered into %s yet", src, dlq)
			}
			return nil
		})
	}
	shards := map[int]bool{}
	for _, q := range decl {
		shards[held(q.Name)[0]] = true
	}
	if len(shards) != 3 {
		t.Errorf("the declared queues are on shards %v, want all three", shards)
	}

	// Two queues made apart (on different shards), then declared as a
	// source and its dead-letter queue: each stays where it is, and the
	// source's server applies the RedrivePolicy naming the other shard's
	// queue (before transfers, it was placed nowhere).
	lone, loneDLQ := pair(func(i int) string { return fmt.Sprintf("lone-%d", i) }, func(i int) string { return fmt.Sprintf("apart-%d", i) })
	c := shardClient(nodes[0])
	for _, q := range []string{lone, loneDLQ} {
		if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		for _, q := range []string{lone, loneDLQ} {
			if _, ok := nodes[0].findQueue(q); !ok || len(held(q)) != 1 {
				return fmt.Errorf("%s not in the copies yet", q)
			}
		}
		return nil
	})
	got := nodes[0].placeDeclared([]server.QueueDeclaration{{Name: lone, DeadLetterQueue: loneDLQ, MaxReceiveCount: 3}, {Name: loneDLQ}})
	if want := []int{held(lone)[0], held(loneDLQ)[0]}; !slices.Equal(got, want) {
		t.Errorf("placeDeclared of %s (on shard %v) naming %s (on %v) = %v, want %v", lone, held(lone), loneDLQ, held(loneDLQ), got, want)
	}
}

// TestShardsPlaceImportedQueues: an imported definitions document (POST
// /sluice/v1/definitions, through any node) is placed as the config's
// [[queues]] are: its plain queues on the shards their names hash to, a
// source with its dead-letter queue, each declared by its own shard's
// leader; a declaration that a shard's leader refuses makes the import
// answer 400 with that refusal. Declared by shard 0's server alone, as
// before, every queue of it was on shard 0.
func TestShardsPlaceImportedQueues(t *testing.T) {
	nodes, _ := shardedNodes(t)
	src, dlq := "imp-src", "imp-dlq"
	for i := 0; hashShard(src, 3) == hashShard(dlq, 3); i++ {
		src, dlq = fmt.Sprintf("imp-src-%d", i), fmt.Sprintf("imp-dlq-%d", i)
	}
	plain := []string{"cfg-0", "cfg-1", "cfg-2"} // they hash to shards 1, 0 and 2
	doc := fmt.Sprintf(`{"queues":[{"name":%q,"dead_letter_queue":%q,"max_receive_count":2},{"name":%q},{"name":"cfg-0"},{"name":"cfg-1"},{"name":"cfg-2"}]}`, src, dlq, dlq)
	post := func(via *Node, doc string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+via.HTTPAddr()+"/sluice/v1/definitions", "application/json", strings.NewReader(doc))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body) // for the checks only
		_ = resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, b := post(nodes[2], doc); code != http.StatusOK || !strings.Contains(b, `"queues":5`) {
		t.Fatalf("import through node 3: %d %s", code, b)
	}
	ctx := context.Background()
	where := func(name string) int {
		k, ok, err := nodes[1].locateQueue(ctx, name)
		if !ok {
			t.Fatalf("%s: not found (%v)", name, err)
		}
		return k
	}
	for _, p := range plain {
		if k := where(p); k != hashShard(p, 3) {
			t.Errorf("%s is on shard %d, want %d (its name's)", p, k, hashShard(p, 3))
		}
	}
	if a, b := where(src), where(dlq); a != b {
		t.Errorf("%s is on shard %d, its dead-letter queue %s on %d", src, a, dlq, b)
	}
	// A refusal on another shard than 0: a bad attribute of a queue whose
	// name hashes elsewhere.
	bad := "bad-import"
	for i := 0; hashShard(bad, 3) == 0; i++ {
		bad = fmt.Sprintf("bad-import-%d", i)
	}
	code, b := post(nodes[0], fmt.Sprintf(`{"queues":[{"name":%q,"attributes":{"VisibilityTimeout":"-5"}}]}`, bad))
	if code != http.StatusBadRequest || !strings.Contains(b, "InvalidDefinitions") || !strings.Contains(b, bad) {
		t.Fatalf("an import refused by shard %d: %d %s, want 400 InvalidDefinitions naming %s", hashShard(bad, 3), code, b, bad)
	}
	if !strings.Contains(b, fmt.Sprintf("refused by shard %d", hashShard(bad, 3))) {
		t.Fatalf("the refusal does not name the shard that refused: %s", b)
	}
}

// TestShardsConcurrentCreatesMeetOnOneShard: creates of one new name sent
// at once through every node — tied to a dead-letter queue on shard 1, to
// one on shard 2, or to none (the name hashes to shard 0) — make the queue
// on one shard only: the name's hash shard reserves it for the first
// (engine.ReserveName), and the others are sent there, where they are
// answered as on one node (the same queue, or QueueAlreadyExists for other
// attributes). Before, each could pass its own shard's check that no
// other shard held the name, and the name lived on two or three shards.
func TestShardsConcurrentCreatesMeetOnOneShard(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(*server.Options) {})
	dlqA, _ := queueOnShard(t, nodes, "graves-a", 1)
	dlqB, _ := queueOnShard(t, nodes, "graves-b", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	arn := func(q string) string { return "arn:aws:sqs:us-east-1:000000000000:" + q }
	policies := []string{
		fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"3"}`, arn(dlqA)),
		fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"3"}`, arn(dlqB)),
		"",
	}
	const rounds, per = 6, 12
	for r := range rounds {
		name := fmt.Sprintf("contested-%d", r)
		for i := 0; hashShard(name, 3) != 0; i++ {
			name = fmt.Sprintf("contested-%d-%d", r, i)
		}
		errs := make([]error, per)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range per {
			wg.Go(func() {
				in := &sqs.CreateQueueInput{QueueName: aws.String(name)}
				if p := policies[i%len(policies)]; p != "" {
					in.Attributes = map[string]string{"RedrivePolicy": p}
				}
				<-start
				_, errs[i] = shardClient(nodes[i%len(nodes)]).CreateQueue(ctx, in)
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, err := range errs {
			var exists *types.QueueNameExists
			switch {
			case err == nil:
				ok++
			case !errors.As(err, &exists):
				t.Fatalf("round %d: create %d: %v, want success or QueueAlreadyExists", r, i, err)
			}
		}
		if ok == 0 {
			t.Fatalf("round %d: no create of %s succeeded", r, name)
		}
		for _, n := range nodes {
			if err := n.catchUp(ctx); err != nil {
				t.Fatal(err)
			}
			if at := heldBy(t, n, name); len(at) != 1 {
				t.Fatalf("round %d: node %d's copies hold %s on shards %v, want one", r, n.opts.Cluster.NodeID, name, at)
			}
		}
	}
}

// TestShardsDeletedNameWaitsOnEveryShard: a queue deleted on one shard
// cannot be made again within NameReuseDelay (QueueDeletedRecently, as on
// one node) by a create that placement puts on another shard (here, by
// its name, without the dead-letter queue that had put it with that
// queue); deleted over SQS, through the admin API or over AMQP, through
// any node: the shard that deletes it holds the name on the shard it
// hashes to (server.Options.HoldDeleted).
// Before, only the queue's own shard remembered the delete, and such a
// create made the queue at once. (The queues are declared in the
// configuration, which places them without a name reservation: a create
// of the name within a minute of its own reservation would be sent to the
// same shard anyway.)
func TestShardsDeletedNameWaitsOnEveryShard(t *testing.T) {
	on := nameOnShard
	dlq := on("aaa-graves", 1) // first by name: the group lives on its shard
	names := map[string]string{"sqs": on("reborn-sqs", 0), "admin": on("reborn-admin", 0), "amqp": on("reborn-amqp", 0)}
	nodes, _ := shardedNodesWith(t, func(o *server.Options) {
		o.Queues = []server.QueueDeclaration{{Name: dlq},
			{Name: names["sqs"], DeadLetterQueue: dlq, MaxReceiveCount: 3},
			{Name: names["admin"], DeadLetterQueue: dlq, MaxReceiveCount: 3},
			{Name: names["amqp"], DeadLetterQueue: dlq, MaxReceiveCount: 3}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, via := range []string{"sqs", "admin", "amqp"} {
		name := names[via]
		poll.CheckFor(t, 10*time.Second, poll.True(name+" declared on shard 1, with its dead-letter queue", func() bool {
			return slices.Equal(heldBy(t, nodes[i], name), []int{1})
		}))
		switch via {
		case "sqs":
			url, err := shardClient(nodes[i]).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := shardClient(nodes[(i+1)%3]).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
				t.Fatal(err)
			}
		case "admin":
			req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+nodes[(i+1)%3].HTTPAddr()+"/sluice/v1/queues/"+name, nil)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("admin delete of %s: %d", name, resp.StatusCode)
			}
		case "amqp":
			if _, err := amqpChannel(t, nodes[(i+1)%3], false).QueueDelete(name, false, false, false); err != nil {
				t.Fatalf("AMQP delete of %s: %v", name, err)
			}
		}
		for _, n := range nodes {
			_, err := shardClient(n).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
			var recently *types.QueueDeletedRecently
			if !errors.As(err, &recently) {
				t.Fatalf("a create of %s (deleted over %s) through node %d right after: %v, want QueueDeletedRecently", name, via, n.opts.Cluster.NodeID, err)
			}
		}
		for _, n := range nodes {
			if err := n.catchUp(ctx); err != nil {
				t.Fatal(err)
			}
			if at := heldBy(t, n, name); len(at) != 0 {
				t.Fatalf("%s (deleted over %s) was made again on shards %v", name, via, at)
			}
		}
	}
}

// TestShardsCreateWaitsForItsNamesShard: a create of a new queue tied to
// a dead-letter queue on one shard, whose name hashes to another shard
// that has no leader now (its group cut on every node, the others
// serving), is answered 503 ServiceUnavailable — which the SDKs retry —
// and makes nothing, since it cannot reserve the name; once that shard
// elects a leader again, the create is made, on the dead-letter queue's
// shard. Before, the create went on without the reservation, and two such
// creates through two nodes could make one name on two shards.
func TestShardsCreateWaitsForItsNamesShard(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(*server.Options) {})
	const k, h = 1, 2
	dlq, _ := queueOnShard(t, nodes, "tomb", k)
	name := nameOnShard("tied", h)
	cutShard(t, nodes, h, true)
	c := oneTryClient(nodes[0])
	in := &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:%s","maxReceiveCount":"3"}`, dlq)}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.CreateQueue(ctx, in)
	want503(t, err, fmt.Sprintf("create while shard %d (its name's) has no leader", h))
	if err := nodes[0].shards.Shard(k).ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	if at := heldBy(t, nodes[0], name); len(at) != 0 {
		t.Fatalf("the refused create made %s on shards %v", name, at)
	}
	cutShard(t, nodes, h, false)
	if _, err := shardClient(nodes[0]).CreateQueue(ctx, in); err != nil {
		t.Fatalf("create once shard %d is back: %v", h, err)
	}
	if at := heldBy(t, nodes[0], name); !slices.Equal(at, []int{k}) {
		t.Fatalf("%s is on shards %v, want [%d] (its dead-letter queue's)", name, at, k)
	}
}

// TestShardsDeletedNameWaitsAfterALeaderChange: through an SQS client, a
// queue deleted just before its shard's leader stops still cannot be made
// again through the new leader (QueueDeletedRecently): the delete's 60 s
// wait is in the shard's replicated log (a gone record), which the next
// leader's engine reads as it opens, not only in the old leader's memory.
// The name hashes to its own shard, so no other shard holds it.
func TestShardsDeletedNameWaitsAfterALeaderChange(t *testing.T) {
	nodes, stop := shardedNodes(t)
	const k = 1
	name, url := queueOnShard(t, nodes, "phoenix", k)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := shardClient(nodes[0]).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url}); err != nil {
		t.Fatal(err)
	}
	_, old, ok := nodes[0].target(k)
	if !ok {
		t.Fatalf("no leader of shard %d", k)
	}
	if err := stop(int(old - 1)); err != nil {
		t.Fatal(err)
	}
	survivor := nodes[old%3] // another node
	poll.CheckFor(t, 30*time.Second, poll.True(fmt.Sprintf("a new leader of shard %d serves", k), func() bool {
		_, leader, ok := survivor.target(k)
		return ok && leader != old
	}))
	_, err := shardClient(survivor).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	var recently *types.QueueDeletedRecently
	if !errors.As(err, &recently) {
		t.Fatalf("create through node %d after shard %d's leader (node %d) stopped: %v, want QueueDeletedRecently", survivor.opts.Cluster.NodeID, k, old, err)
	}
}

// TestShardsDeleteWaitsForItsNamesShard: a delete of a queue whose name
// hashes to another shard, while that shard has no leader (its group cut
// on every node), is answered 503 ServiceUnavailable and deletes nothing:
// the name could not be held there, and without the hold a create placed
// elsewhere could make it again at once. Once that shard elects a leader
// again, the delete goes through, and a create of the name through any
// node is refused as deleted recently. Before, the delete went on and the
// hold was only logged.
func TestShardsDeleteWaitsForItsNamesShard(t *testing.T) {
	nodes, _ := shardedNodesWith(t, func(*server.Options) {})
	const k, h = 1, 2
	dlq, _ := queueOnShard(t, nodes, "grave", k)
	name := nameOnShard("doomed", h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := shardClient(nodes[0]).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:%s","maxReceiveCount":"3"}`, dlq)}})
	if err != nil {
		t.Fatal(err)
	}
	if at := heldBy(t, nodes[0], name); !slices.Equal(at, []int{k}) {
		t.Fatalf("%s is on shards %v, want [%d] (its dead-letter queue's)", name, at, k)
	}
	cutShard(t, nodes, h, true)
	c := oneTryClient(nodes[1])
	_, err = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	want503(t, err, fmt.Sprintf("delete while shard %d (its name's) has no leader", h))
	if err := nodes[0].shards.Shard(k).ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	// Through the admin API: 503 ServiceUnavailable.
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+nodes[2].HTTPAddr()+"/sluice/v1/queues/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json") // the admin API's CSRF guard
	adm, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(adm.Body)
	_ = adm.Body.Close()
	if adm.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"ServiceUnavailable"`) {
		t.Fatalf("admin API delete while shard %d has no leader: %d %s, want 503 ServiceUnavailable", h, adm.StatusCode, body)
	}
	// Over AMQP (shard 0's leader deletes it on shard 1): a channel
	// error, 506, the queue kept — and its bindings with it: a publish
	// routed to it still reaches it (the refused delete had taken them
	// out of the routing until the next start).
	pub := amqpChannel(t, nodes[2], true)
	if err := pub.ExchangeDeclare("keep", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.QueueBind(name, "k", "keep", false, nil); err != nil {
		t.Fatal(err)
	}
	_, err = amqpChannel(t, nodes[2], false).QueueDelete(name, false, false, false)
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.ResourceError {
		t.Fatalf("AMQP delete while shard %d has no leader: %v, want 506 RESOURCE_ERROR", h, err)
	}
	returned := pub.NotifyReturn(make(chan amqp.Return, 1))
	conf, err := pub.PublishWithDeferredConfirmWithContext(ctx, "keep", "k", true, false, amqp.Publishing{Body: []byte("after the refused delete")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish through the bound exchange after the refused delete: ack %v, %v", ok, err)
	}
	select {
	case r := <-returned:
		t.Fatalf("publish through the bound exchange after the refused AMQP delete came back unroutable: %d %s", r.ReplyCode, r.ReplyText)
	default:
	}
	if err := nodes[0].shards.Shard(k).ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	if at := heldBy(t, nodes[0], name); !slices.Equal(at, []int{k}) {
		t.Fatalf("after the refused deletes %s is on shards %v, want still [%d]", name, at, k)
	}
	cutShard(t, nodes, h, false)
	if _, err := shardClient(nodes[1]).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
		t.Fatalf("delete once shard %d is back: %v", h, err)
	}
	for _, n := range nodes {
		_, err := shardClient(n).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		var recently *types.QueueDeletedRecently
		if !errors.As(err, &recently) {
			t.Fatalf("a create of %s through node %d right after its delete: %v, want QueueDeletedRecently", name, n.opts.Cluster.NodeID, err)
		}
	}
}

// cutShard drops shard h's Raft traffic on every node (cut) and waits
// until no node routes the shard, or lets it through again.
func cutShard(t *testing.T, nodes []*Node, h int, cut bool) {
	t.Helper()
	for _, n := range nodes {
		n.shards.Shard(h).BlockTransport(cut)
	}
	if !cut {
		return
	}
	poll.CheckFor(t, 30*time.Second, poll.True(fmt.Sprintf("no node routes shard %d", h), func() bool {
		for _, n := range nodes {
			if _, _, ok := n.target(h); ok {
				return false
			}
		}
		return true
	}))
}

// oneTryClient is an aws-sdk-go-v2 client of node n that does not retry,
// so that a test sees a 503 the SDK would otherwise retry.
func oneTryClient(n *Node) *sqs.Client {
	return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: shardClient(n).Options().Credentials})
}

// want503 fails the test unless err is an SQS 503 ServiceUnavailable.
func want503(t *testing.T, err error, what string) {
	t.Helper()
	var api smithy.APIError
	var resp *awshttp.ResponseError
	if !errors.As(err, &api) || !errors.As(err, &resp) || api.ErrorCode() != "ServiceUnavailable" || resp.HTTPStatusCode() != http.StatusServiceUnavailable {
		t.Fatalf("%s: %v, want 503 ServiceUnavailable", what, err)
	}
}
