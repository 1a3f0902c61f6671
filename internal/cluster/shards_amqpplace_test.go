package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// TestShardsAMQPDeclaresSpread (ADR 0015 step 4, ADR 0016 decision 6):
// with placement "subset", a new durable queue declared over AMQP is
// placed as an SQS CreateQueue is — on the shard above 0 its name hashes
// to — and created there with the settings the declare gives (no SQS
// retention of four days; its arguments' limits, applied by that shard's
// engine), not on shard 0, every node's, where the AMQP server runs.
// Declared through any node, it takes confirmed publishes, a redeclare
// answers its count, an AMQP consumer consumes it, and queue.delete
// removes it. Declares that cannot live elsewhere (x-expires, exclusive,
// a name with a dot) stay on shard 0, and a redeclare of a spread queue
// with other arguments is refused as RabbitMQ refuses it. A spread
// source with a dead-letter exchange has its rejected messages routed by
// shard 0 into a spread queue and a queue of shard 0 bound to it (route
// transfers, then transfers across shards), with x-death; one routed
// nowhere is counted as dropped in its source.
func TestShardsAMQPDeclaresSpread(t *testing.T) {
	nodes := subsetNodes(t)
	held := func(name string) []int { return heldBy(t, nodes[1], name) } // node 2 holds every shard
	ctx := context.Background()

	// Through node 1: declares that stay on shard 0 — expiring,
	// exclusive, or a name that is no SQS queue's.
	ch := amqpChannel(t, nodes[0], true)
	expiring := subsetName(nodes[0], "exp", 2)
	if _, err := ch.QueueDeclare(expiring, true, false, false, false, amqp.Table{"x-expires": int32(3600000)}); err != nil {
		t.Fatal(err)
	}
	excl := subsetName(nodes[0], "mine", 1)
	if _, err := ch.QueueDeclare(excl, true, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{expiring, excl} {
		// Node 2's copy of shard 0 may apply the create a moment after
		// the declare-ok.
		poll.CheckFor(t, 10*time.Second, poll.True(name+" is on shard 0 alone", func() bool { return slices.Equal(held(name), []int{0}) }))
	}
	if _, err := ch.QueueDeclare("tasks.email", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	// Through node 1 too: one queue placed by its name on each shard
	// above 0 (node 1 holds no copy of shard 2).
	names := []string{subsetName(nodes[0], "work", 1), subsetName(nodes[0], "work", 2)}
	for i, name := range names {
		k := i + 1
		dq, err := ch.QueueDeclare(name, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("declare %s: %v", name, err)
		}
		if dq.Messages != 0 || dq.Name != name {
			t.Fatalf("declare-ok of %s: %+v", name, dq)
		}
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("%s is on shard %d alone", name, k), func() bool {
			return slices.Equal(held(name), []int{k})
		}))
	}
	const each = 5
	for _, name := range names {
		for j := range each {
			publishConfirmed(t, ch, name, name+"/"+strconv.Itoa(j))
		}
	}

	// A redeclare through another node answers each queue's own count.
	ch3 := amqpChannel(t, nodes[2], false)
	for _, name := range names {
		dq, err := ch3.QueueDeclare(name, true, false, false, false, nil)
		if err != nil || dq.Messages != each {
			t.Fatalf("redeclare of %s: %+v, %v; want %d messages", name, dq, err, each)
		}
	}

	// The queues elsewhere got an AMQP declare's settings: the retention
	// of an AMQP queue on shard 0, not SQS's default of four days.
	client := shardClient(nodes[1])
	retention := func(name string) string {
		t.Helper()
		url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)]
	}
	want := retention(expiring)
	if want == "345600" {
		t.Fatalf("the AMQP queue on shard 0 keeps messages for SQS's default %s s", want)
	}
	for _, name := range names {
		if got := retention(name); got != want {
			t.Fatalf("%s keeps messages for %s s, the AMQP queue on shard 0 for %s s", name, got, want)
		}
	}

	// An AMQP consumer (through node 3) takes a spread queue's messages,
	// with a nack, a requeue on close and acks.
	consumeRemote(t, nodes, names[0], each)

	// Queues declared with arguments that their shard's engine applies
	// are spread too: a TTL, a length limit that refuses publishes (a
	// nack), a delivery limit that drops a message returned once too
	// often (no dead-letter exchange), as on shard 0.
	withArgs := subsetName(nodes[0], "ttl", 2)
	limited := subsetName(nodes[0], "lim", 1)
	quorum := subsetName(nodes[0], "quorum", 2)
	declares := map[string]amqp.Table{
		withArgs: {"x-message-ttl": int32(60000)},
		limited:  {"x-max-length": int32(1), "x-overflow": "reject-publish"},
		quorum:   {"x-queue-type": "quorum", "x-delivery-limit": int32(1)},
	}
	for name, args := range declares {
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatalf("declare %s %v: %v", name, args, err)
		}
		k := nodes[0].nameShard(name)
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("%s is on shard %d alone", name, k), func() bool {
			return slices.Equal(held(name), []int{k})
		}))
		// The same declare through another node: its count; other
		// arguments: 406, the channel closed.
		if dq, err := amqpChannel(t, nodes[2], false).QueueDeclare(name, true, false, false, false, args); err != nil || dq.Messages != 0 {
			t.Fatalf("redeclare of %s %v through node 3: %+v, %v", name, args, dq, err)
		}
		_, err := amqpChannel(t, nodes[2], false).QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-length": int32(7)})
		if ae := (*amqp.Error)(nil); !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			t.Fatalf("redeclare of %s with other arguments: %v, want 406", name, err)
		}
	}
	publishConfirmed(t, ch, limited, "first")
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	dc, perr := ch.PublishWithDeferredConfirmWithContext(pctx, "", limited, true, false, amqp.Publishing{Body: []byte("second")})
	if perr != nil {
		t.Fatal(perr)
	}
	if acked, err := dc.WaitContext(pctx); err != nil || acked {
		t.Fatalf("a publish over %s's x-max-length of 1: acked %v, %v; want a nack", limited, acked, err)
	}
	pcancel()
	publishConfirmed(t, ch, quorum, "poison")
	for i := range 2 {
		d, ok, err := ch.Get(quorum, false)
		if err != nil || !ok {
			t.Fatalf("get %d from %s: %v, %v", i+1, quorum, ok, err)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	awaitMessages(t, amqpChannel(t, nodes[2], false), quorum, 0, 10*time.Second) // dropped after two returns (x-delivery-limit 1)

	// A spread queue redeclared with arguments: 406, as RabbitMQ answers
	// an inequivalent redeclare.
	_, err := ch3.QueueDeclare(names[1], true, false, false, false, amqp.Table{"x-message-ttl": int32(1000)})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("redeclare of %s with arguments: %v, want 406", names[1], err)
	}

	// RabbitMQ's dead-letter practice: a source declared with
	// x-dead-letter-exchange (placed by its name, on shard 1, with its
	// arguments), a dead-letter queue declared without arguments (placed
	// by its name, on shard 2) and the expiring queue (on shard 0) bound
	// to that exchange. Rejected messages arrive in both, routed by shard
	// 0's topology, with RabbitMQ's x-death history.
	if err := ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	graves := subsetName(nodes[0], "graves", 2)
	if _, err := ch.QueueDeclare(graves, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, poll.True(graves+" is on shard 2 alone", func() bool { return slices.Equal(held(graves), []int{2}) }))
	for _, q := range []string{graves, expiring} {
		if err := ch.QueueBind(q, "", "dlx", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	jobs := subsetName(nodes[0], "jobs", 1)
	if _, err := ch.QueueDeclare(jobs, true, false, false, false, amqp.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, poll.True(jobs+" is on shard 1 alone", func() bool { return slices.Equal(held(jobs), []int{1}) }))
	const poison = 3
	rejectPublished(t, ch, jobs, "poison/", poison)
	awaitMessages(t, amqpChannel(t, nodes[2], false), graves, poison, 30*time.Second)
	awaitMessages(t, amqpChannel(t, nodes[2], false), expiring, poison, 30*time.Second)
	for _, q := range []string{graves, expiring} {
		d, ok, err := amqpChannel(t, nodes[2], false).Get(q, true)
		if err != nil || !ok {
			t.Fatalf("get from %s: %v, %v", q, ok, err)
		}
		deaths, _ := d.Headers["x-death"].([]any)
		if len(deaths) != 1 {
			t.Fatalf("%s's dead letter has x-death %v (headers %v)", q, d.Headers["x-death"], d.Headers)
		}
		death, _ := deaths[0].(amqp.Table)
		if death["queue"] != jobs || death["reason"] != "rejected" || death["count"] != int64(1) || d.Headers["x-first-death-queue"] != jobs {
			t.Fatalf("%s's dead letter has x-death %v, headers %v", q, death, d.Headers)
		}
	}
	// A dead letter that its exchange routes nowhere (no binding) is
	// dropped on shard 0 and counted in its source's dropped count, on
	// the source's shard, as one routed nowhere on shard 0 is.
	if err := ch.ExchangeDeclare("void", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	lonely := subsetName(nodes[0], "lonely", 1)
	if _, err := ch.QueueDeclare(lonely, true, false, false, false, amqp.Table{"x-dead-letter-exchange": "void"}); err != nil {
		t.Fatal(err)
	}
	rejectPublished(t, ch, lonely, "nowhere/", 1)
	poll.CheckFor(t, 30*time.Second, func() error {
		sum := 0.0
		for _, n := range nodes {
			vals, _ := scrape(t, n)
			sum += vals[`sluice_dropped_total{queue="`+lonely+`"}`]
		}
		if sum != 1 {
			return fmt.Errorf("%s's dropped count %v over the nodes, want 1", lonely, sum)
		}
		return nil
	})

	// The definitions export (through a node that holds no copy of shard
	// 2) lists the spread queues as AMQP queues, declared as they were,
	// not as SQS queues; the ones on shard 0 with their arguments. An
	// import of it changes nothing.
	resp, err := http.Get("http://" + nodes[0].HTTPAddr() + "/sluice/v1/definitions")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body) // checked below
	_ = resp.Body.Close()
	var defs server.Definitions
	if resp.StatusCode != http.StatusOK || json.Unmarshal(doc, &defs) != nil {
		t.Fatalf("export: %d %s", resp.StatusCode, doc)
	}
	for _, q := range defs.Queues {
		if slices.Contains(names, q.Name) || q.Name == graves {
			t.Errorf("%s exported as an SQS queue", q.Name)
		}
	}
	declared := map[string]string{}
	for _, q := range defs.AMQPQueues {
		args, _ := json.Marshal(q.Arguments)
		if _, twice := declared[q.Name]; twice {
			t.Errorf("%s exported twice", q.Name)
		}
		declared[q.Name] = fmt.Sprintf("vhost %s durable %v auto-delete %v arguments %s", q.Vhost, q.Durable, q.AutoDelete, args)
	}
	for name, want := range map[string]string{names[0]: "null", names[1]: "null", graves: "null",
		withArgs: `{"x-message-ttl":60000}`, jobs: `{"x-dead-letter-exchange":"dlx"}`, expiring: `{"x-expires":3600000}`,
		limited: `{"x-max-length":1,"x-overflow":"reject-publish"}`, quorum: `{"x-delivery-limit":1,"x-queue-type":"quorum"}`} {
		if got := declared[name]; got != "vhost / durable true auto-delete false arguments "+want {
			t.Errorf("exported AMQP queue %s: %q, want arguments %s", name, got, want)
		}
	}
	if t.Failed() {
		t.Fatalf("export:\n%s", doc)
	}
	resp, err = http.Post("http://"+nodes[2].HTTPAddr()+"/sluice/v1/definitions", "application/json", bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body) // for the failure message
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("import of the export: %d %s", resp.StatusCode, b)
	}
	for _, name := range append([]string{withArgs, limited, quorum, jobs}, names...) {
		if got, want := held(name), []int{nodes[0].nameShard(name)}; !slices.Equal(got, want) {
			t.Fatalf("after the import %s is on shards %v", name, got)
		}
	}

	// queue.delete of a spread queue deletes it on its shard.
	n, err := ch.QueueDelete(names[1], false, false, false)
	if err != nil || n != each {
		t.Fatalf("delete of %s: %d messages, %v; want %d", names[1], n, err, each)
	}
	poll.CheckFor(t, 10*time.Second, poll.True(names[1]+" is gone", func() bool { return len(held(names[1])) == 0 }))
}

// TestSubsetAMQPDeclaresOffShardZero: with [cluster] placement "subset"
// shard 0 is on every node, so an AMQP queue kept there would cost every
// node its messages (ADR 0016 decision 6). A queue declared over AMQP
// (with arguments or without) goes to a shard above 0, declared through
// a node that holds no copy of it; its placement is written before the
// declare-ok, so that node finds it once its copy of shard 0 has caught
// up. Its
// confirmed messages outlive a move of shard 0's leadership (the AMQP
// server moves with it, and knows the queue only from its shard): a
// redeclare with its arguments counts them, one without is refused, and
// basic.get gets them all.
func TestSubsetAMQPDeclaresOffShardZero(t *testing.T) {
	nodes := subsetNodes(t)
	// Node 1 holds shards 0 and 1, node 3 shards 0 and 2: a queue of
	// shard 2 declared through node 1, one of shard 1 through node 3.
	through := map[int]int{2: 0, 1: 2}
	ctx := context.Background()
	const each = 4
	var names []string
	declared := map[string]amqp.Table{} // the arguments of each declare, none for shard 1's
	for _, k := range []int{2, 1} {
		var name string
		for i := 0; ; i++ {
			if name = fmt.Sprintf("amqp-%d-%d", k, i); nodes[0].nameShard(name) == k {
				break
			}
		}
		via := nodes[through[k]]
		if via.shards.Held(k) {
			t.Fatalf("node %d holds shard %d", via.opts.Cluster.NodeID, k)
		}
		ch := amqpChannel(t, via, true)
		if k == 2 {
			declared[name] = amqp.Table{"x-queue-type": "quorum", "x-max-length": int32(100)}
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, declared[name]); err != nil {
			t.Fatalf("declare %s through node %d: %v", name, via.opts.Cluster.NodeID, err)
		}
		if at, ok, err := via.locateQueue(ctx, name); !ok || at != k {
			t.Fatalf("after its declare-ok node %d finds %s on shard %d (%v, %v), want %d", via.opts.Cluster.NodeID, name, at, ok, err, k)
		}
		poll.CheckFor(t, 10*time.Second, poll.True(fmt.Sprintf("%s is on shard %d alone in node 2's copies", name, k), func() bool {
			return slices.Equal(heldBy(t, nodes[1], name), []int{k})
		}))
		for j := range each {
			publishConfirmed(t, ch, name, name+"/"+strconv.Itoa(j))
		}
		names = append(names, name)
	}

	// Shard 0's leadership, and with it the AMQP server, moves to node 1
	// or node 3 (a transfer, not a stop: with a factor of 2 a stopped
	// node takes down the shards it is one of two voters of).
	l0 := slices.IndexFunc(nodes, func(n *Node) bool { return n.leadsShard(0) })
	if l0 < 0 {
		t.Fatal("no node leads shard 0")
	}
	poll.CheckFor(t, 30*time.Second, poll.True("shard 0's leadership moved", func() bool {
		if slices.ContainsFunc(nodes, func(n *Node) bool { return n != nodes[l0] && n.leadsShard(0) }) {
			return true
		}
		// A voter of shard 0 other than l0 (a transfer that does not
		// finish in time, or to a member that is no voter, is tried again).
		for _, n := range nodes {
			if n != nodes[l0] {
				tctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = nodes[l0].raft.TransferLeadershipTo(tctx, n.opts.Cluster.NodeID) // checked by the loop
				cancel()
			}
		}
		return false
	}))
	via := nodes[l0]
	for _, name := range names {
		var got map[string]bool
		poll.CheckFor(t, 60*time.Second, func() (err error) {
			defer func() {
				if err != nil {
					t.Logf("through node %d: %v", via.opts.Cluster.NodeID, err)
				}
			}()
			got = map[string]bool{}
			conn, err := amqp.Dial("amqp://guest:guest@" + via.AMQPAddr() + "/")
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }() // this attempt is over
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			dq, err := ch.QueueDeclare(name, true, false, false, false, declared[name])
			if err != nil {
				return err
			}
			if dq.Messages != each {
				return fmt.Errorf("%s: declare-ok counts %d messages, want %d", name, dq.Messages, each)
			}
			// Unacknowledged: an attempt that fails midway leaves them
			// all in the queue (they come back when the connection
			// closes).
			for range each {
				d, ok, err := ch.Get(name, false)
				if err != nil || !ok {
					return fmt.Errorf("get from %s: %v, %v", name, ok, err)
				}
				got[string(d.Body)] = true
			}
			return nil
		})
		if len(got) != each {
			t.Fatalf("%s: got %v", name, got)
		}
		// The new leader's AMQP server compares a redeclare with the
		// arguments the queue was declared with, which it learnt from the
		// queue's shard: without them, 406.
		if declared[name] != nil {
			_, err := amqpChannel(t, via, false).QueueDeclare(name, true, false, false, false, nil)
			if ae := (*amqp.Error)(nil); !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
				t.Fatalf("redeclare of %s without its arguments after shard 0's leader moved: %v, want 406", name, err)
			}
		}
	}
}

// TestShardsAMQPDeclaresStayOnShardZero: with every node in every shard
// (placement "all"), a queue declared over AMQP without arguments stays
// on shard 0, whatever its name hashes to: spreading it would copy it to
// no fewer nodes, and while AMQP enters through shard 0's leader each
// call to another shard's leader costs both ends more than the local
// engine (docs/benchmarks.md, "AMQP queues placed off shard 0").
func TestShardsAMQPDeclaresStayOnShardZero(t *testing.T) {
	nodes, _ := shardedNodes(t)
	ch := amqpChannel(t, nodes[1], true)
	name := nameOnShard("work", 1)
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, poll.True(name+" is on shard 0 alone", func() bool { return slices.Equal(heldBy(t, nodes[0], name), []int{0}) }))
	publishConfirmed(t, ch, name, "x")
	if d, ok, err := ch.Get(name, true); err != nil || !ok || string(d.Body) != "x" {
		t.Fatalf("get from %s: %q, %v, %v", name, d.Body, ok, err)
	}
}
