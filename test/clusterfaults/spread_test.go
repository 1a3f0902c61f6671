package clusterfaults

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/test/faults"
)

// With several shards one SQS queue pair lives on one shard, so the
// workload's queues alone would put every SQS fault under one shard's
// leader. spreadWorkloads adds a workload (its own queue pair, producers,
// consumers and Checker) for every other shard, so that each shard's
// leader serves acknowledged sends, receives and deletes under the faults
// and each shard's history is checked. On a standard run each such
// workload also has AMQP publishers (through the default exchange, with
// confirms, into its source queue, under its Checker), so that AMQP's
// publishes to other shards than its own (ADR 0015 step 4) are checked
// under the faults too.

// shardOf is the shard a new queue pair lands on: the one its DLQ's name
// hashes to (the DLQ is created first, and its source is placed with it).
// It mirrors the placement rule of internal/cluster (FNV-32a of the name
// modulo the shard count); the run checks afterwards, from the shards
// named by the answers themselves (monitor.answeringShards), that every
// shard served, so a change of the rule fails the run rather than
// narrowing it quietly.
func shardOf(name string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name)) // a hash.Hash never fails
	return int(h.Sum32() % uint32(shards))
}

// shardOf is the package function for this cluster: with a subset
// placement a queue placed by its name goes to shards 1 and up (shard 0,
// on every node, holds none), as internal/cluster's nameShard places it.
func (c *testCluster) shardOf(name string) int {
	if c.subset {
		return 1 + shardOf(name, c.shards-1)
	}
	return shardOf(name, c.shards)
}

// sqsShards is how many shards a queue can be placed on by its name.
func (c *testCluster) sqsShards() int {
	if c.subset {
		return c.shards - 1
	}
	return c.shards
}

// spreadWorkloads returns, with more than one shard, one more workload for
// every shard w's queues are not on (queues cf<k> and cf<k>-dlq, .fifo
// for a FIFO run), reporting to the same monitor; nil with one shard.
func spreadWorkloads(c *testCluster, w *workload, shards int) []*workload {
	if shards <= 1 {
		return nil
	}
	if !w.FIFO && c.shardOf(w.DLQ) != 0 {
		w.pub = &amqpLoad{w: w, Ck: w.Ck, queue: w.Main}
	}
	covered := map[int]bool{c.shardOf(w.DLQ): true}
	var out []*workload
	for k := 1; len(covered) < c.sqsShards() && k < 10000; k++ {
		main, dlq := fmt.Sprintf("cf%d", k), fmt.Sprintf("cf%d-dlq", k)
		if w.FIFO {
			main, dlq = main+".fifo", dlq+".fifo"
		}
		s := c.shardOf(dlq)
		if covered[s] {
			continue
		}
		covered[s] = true
		e := newWorkload(c, fmt.Sprintf("%ss%d", w.Run, s), w.FIFO)
		e.Main, e.DLQ = main, dlq
		e.served = w.served
		if !w.FIFO && s != 0 { // AMQP cannot use FIFO queues; shard 0's are AMQP's own
			e.pub = &amqpLoad{w: e, Ck: e.Ck, queue: e.Main}
		}
		out = append(out, e)
	}
	// And one pair whose queues live on two shards (the RedrivePolicy
	// set after both exist): its dead letters cross shards as transfers
	// (ADR 0015 step 5), under the faults, checked by its Checker.
	for k := 1; k < 10000; k++ {
		main, dlq := fmt.Sprintf("cfx%d", k), fmt.Sprintf("cfx%d-graves", k)
		if w.FIFO {
			main, dlq = main+".fifo", dlq+".fifo"
		}
		if c.shardOf(main) == c.shardOf(dlq) {
			continue
		}
		e := newWorkload(c, fmt.Sprintf("%sx", w.Run), w.FIFO)
		e.Main, e.DLQ, e.PolicyLater = main, dlq, true
		e.served = w.served
		out = append(out, e)
		break
	}
	return out
}

// startSpread starts the AMQP publishers of w (the main workload, when
// its queues are not on shard 0) and every extra workload with its own.
func startSpread(ctx context.Context, rng *rand.Rand, w *workload, extra []*workload) {
	if w.pub != nil {
		w.pub.StartPublishers(ctx, rng)
	}
	for _, e := range extra {
		e.Start(ctx, rng)
		if e.pub != nil {
			e.pub.StartPublishers(ctx, rng)
		}
	}
}

// stopSpreadProducers stops the AMQP publishers of w and every extra
// workload's producers and AMQP publishers, and waits for them.
func stopSpreadProducers(w *workload, extra []*workload) {
	if w.pub != nil {
		w.pub.StopPublishers()
	}
	for _, e := range extra {
		e.StopProducers()
		if e.pub != nil {
			e.pub.StopPublishers()
		}
	}
}

// pubSummary is what w's AMQP publishers did, for its report line.
func pubSummary(w *workload) string {
	if w.pub == nil {
		return "no AMQP publishers"
	}
	return fmt.Sprintf("AMQP publishes %d, confirmed %d (counted in the sends above)", w.pub.Publishes.Load(), w.pub.Confirms.Load())
}

// checkPub fails the test when w has AMQP publishers and none of their
// publishes was confirmed.
func checkPub(t testing.TB, w *workload) {
	t.Helper()
	if w.pub != nil && w.pub.Confirms.Load() == 0 {
		t.Errorf("%s: no AMQP publish confirmed: AMQP's publishes to shard %d went unchecked", w.Main, w.c.shardOf(w.DLQ))
	}
}

// spreadDrained reports whether every extra workload's Checker has
// settled everything and its queues are empty, then (when so) what also
// reports: the condition the main workload's drain waits for.
func spreadDrained(extra []*workload, also func(context.Context, *rand.Rand) (bool, string)) func(context.Context, *rand.Rand) (bool, string) {
	return func(ctx context.Context, rng *rand.Rand) (bool, string) {
		for _, e := range extra {
			if n := e.Ck.Unsettled(); n > 0 {
				return false, fmt.Sprintf("%s: %d acknowledged messages unsettled", e.Main, n)
			}
			if empty, desc := e.queuesEmpty(ctx, rng); !empty {
				return false, desc
			}
		}
		return also(ctx, rng)
	}
}

// spreadHeld reports whether any extra workload's queues, or what also
// reports on, still hold messages.
func spreadHeld(extra []*workload, also func(context.Context, *rand.Rand) bool) func(context.Context, *rand.Rand) bool {
	return func(ctx context.Context, rng *rand.Rand) bool {
		for _, e := range extra {
			if empty, _ := e.queuesEmpty(ctx, rng); !empty {
				return true
			}
		}
		return also(ctx, rng)
	}
}

// finishSpread ends each extra workload once the main drain is over (its
// own drain, brief when the main one waited for it; it stops its
// consumers and tells its Checker if messages are still held), then
// reports its history and fails the test on any violation or on a
// workload that had no send acknowledged.
func finishSpread(t testing.TB, ctx context.Context, extra []*workload) {
	t.Helper()
	for _, e := range extra {
		e.drain(t, ctx, 20*time.Second, nil, nil)
		r := e.Ck.Report()
		where := fmt.Sprintf("shard %d's workload", e.c.shardOf(e.DLQ))
		if e.PolicyLater {
			where = fmt.Sprintf("source on shard %d, DLQ on shard %d: dead letters cross shards", e.c.shardOf(e.Main), e.c.shardOf(e.DLQ))
		}
		t.Logf("%s / %s (%s): %s; %s; requests %d (errors %d); acknowledged deletes %d, of which %d answered in their receive's term: %s",
			e.Main, e.DLQ, where, r, pubSummary(e), e.Ops.Load(), e.nerrs.Load(), e.deletes.Load(), e.sameTerm.Load(), e.errorSummary())
		if r.Violations() > 0 {
			t.Errorf("the checker found violations on %s:\n%s", e.Main, r.Details(10))
		}
		if r.Acked == 0 {
			t.Errorf("%s: no send acknowledged: its shard's part of the run proves nothing", e.Main)
		}
		checkPub(t, e)
	}
}

// remoteAMQPLoads returns, with more than one shard, an AMQP load for
// every shard but 0 on an SQS queue placed there (cf-amqp-r<k>, its name
// chosen to hash to the shard): publishers with confirms, AMQP consumers
// with manual acks and an SQS consumer, all through random nodes, each
// load under its own Checker. AMQP clients reach shard 0's leader, whose
// router makes every publish, delivery, ack and requeue a call to the
// queue's shard's leader (ADR 0015 step 4), so the faults hit those
// calls, the remote sessions and their leases: a remote ack lost or
// applied twice, a delivery handed to two consumers, or a confirm for a
// publish the other shard never stored is a violation as on shard 0's
// queue. The queues are created over SQS through node 1 (an AMQP declare
// without arguments would place them by their names too).
func remoteAMQPLoads(ctx context.Context, c *testCluster, w *workload, shards int) ([]*amqpLoad, error) {
	if shards <= 1 {
		return nil, nil
	}
	var out []*amqpLoad
	covered := map[int]bool{0: true}
	for k := 1; len(covered) < shards && k < 10000; k++ {
		name := fmt.Sprintf("cf-amqp-r%d", k)
		s := c.shardOf(name)
		if covered[s] {
			continue
		}
		covered[s] = true
		rw := newWorkload(c, fmt.Sprintf("%sr%d", w.Run, s), false)
		rw.served = w.served
		_, client := c.nodes[0].current()
		if _, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		ck := faults.NewChecker(false, 0)
		ck.UnorderedFrom = noTermEpoch // an AMQP delivery has no term
		out = append(out, &amqpLoad{w: rw, Ck: ck, queue: name})
	}
	return out, nil
}

// amqpDrained is the drain's condition over a and the remote loads: every
// confirmed message settled and every queue empty.
func amqpDrained(a *amqpLoad, remote []*amqpLoad) func(context.Context, *rand.Rand) (bool, string) {
	return func(ctx context.Context, rng *rand.Rand) (bool, string) {
		for _, r := range remote {
			if ok, desc := r.drained(ctx, rng); !ok {
				return false, desc
			}
		}
		return a.drained(ctx, rng)
	}
}

// amqpHeld reports whether a's queue or any remote load's still holds
// messages (or cannot be asked).
func amqpHeld(a *amqpLoad, remote []*amqpLoad) func(context.Context, *rand.Rand) bool {
	return func(ctx context.Context, rng *rand.Rand) bool {
		for _, r := range remote {
			if r.held(ctx, rng) {
				return true
			}
		}
		return a.held(ctx, rng)
	}
}

// finishRemote reports each remote AMQP load's history and fails the
// test on any violation, on a load with no publish confirmed, and on one
// whose AMQP consumers got no delivery (the remote consume path then went
// unchecked).
func finishRemote(t testing.TB, remote []*amqpLoad) {
	t.Helper()
	for _, r := range remote {
		rep := r.Ck.Report()
		t.Logf("remote (shard %d): %s; errors: %s", r.w.c.shardOf(r.queue), r.summary(rep), r.w.errorSummary())
		if rep.Violations() > 0 {
			t.Errorf("the checker found violations on %s:\n%s", r.queue, rep.Details(10))
		}
		if rep.Acked == 0 {
			t.Errorf("%s: no AMQP publish confirmed: its shard's AMQP part proves nothing", r.queue)
		}
		if r.AMQPDels.Load() == 0 {
			t.Errorf("%s: no delivery to an AMQP consumer: the remote consume path went unchecked", r.queue)
		}
	}
}
