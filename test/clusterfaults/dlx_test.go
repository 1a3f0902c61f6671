package clusterfaults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/test/faults"
)

// dlxLoad, with placement "subset", is RabbitMQ's dead-letter practice on
// queues placed off shard 0 (ADR 0016 decision 6): a source declared over
// AMQP with x-dead-letter-exchange, placed by its name on a shard above 0,
// whose every message is rejected (requeue false) by an AMQP consumer, and
// a dead-letter queue declared over AMQP without arguments, placed on
// another shard above 0 when there is one, bound to the exchange (a
// fanout), drained over SQS. Each dead letter goes from the source's shard
// to shard 0 as a route transfer, is routed there by the AMQP topology,
// and goes on to the dead-letter queue's shard as a transfer. This load
// keeps its own account by body, as redriveLoad does: a body whose publish
// was confirmed and which is never deleted from the dead-letter queue,
// once both queues have drained, is lost (unless a delete of it went
// unanswered: it may have been applied); a body received that no publish
// carried is unexpected; duplicates are allowed.
//
// A second such load (zero) has its source on shard 0 instead (declared
// with x-expires, which keeps it there, and a TTL of a second, so that
// messages are dead-lettered as expired too): its dead letters are routed
// at once by shard 0's topology, or, while a new leader of shard 0 restores
// its bindings to queues of other shards, kept as route transfers that
// its own mover routes once it has (engine.Options.RouteLater).
type dlxLoad struct {
	w        *workload // pick, note, queuesEmpty, the error summary (Main: the source, DLQ: the dead-letter queue)
	exchange string
	zero     bool // the source is on shard 0

	mu      sync.Mutex
	sent    map[string]bool // body → confirmed (false: attempted only)
	deleted map[string]bool // body → a delete of it acknowledged
	tried   map[string]bool // body → a delete of it sent and not answered
	deaths  map[string]bool // body → received with DeadLetterQueueSourceArn naming the source
	unknown []string        // bodies received that no publish carried

	prodCtx, consCtx   context.Context
	stopProd, stopCons context.CancelFunc
	prodDone, consDone sync.WaitGroup
	attempts, confirms atomic.Int64
	rejects, recvs     atomic.Int64
}

// newDLXLoads returns, with placement "subset", the two dlx loads (the
// source off shard 0, and on it); none otherwise (without a subset
// placement AMQP keeps such queues on shard 0, where other loads cover
// them).
func newDLXLoads(c *testCluster, run string) ([]*dlxLoad, error) {
	if !c.subset {
		return nil, nil
	}
	var out []*dlxLoad
	for _, zero := range []bool{false, true} {
		d, err := newDLXLoad(c, run, zero)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// newDLXLoad declares the exchange cfx-dlx, the dead-letter queue
// cfxt<k> bound to it and the source cfxs<k> with it as its dead-letter
// exchange, through node 1's AMQP listener; with zero, cfy-dlx, cfyt<k>
// and cfys<k>, the source declared with x-expires (kept on shard 0).
func newDLXLoad(c *testCluster, run string, zero bool) (*dlxLoad, error) {
	letter, args := "x", amqp.Table{}
	if zero {
		// A TTL too: the messages that wait out a failover expire and
		// are dead-lettered as the new leader of shard 0 starts, when
		// its bindings to other shards may not be restored yet.
		letter, args = "y", amqp.Table{"x-expires": int32((24 * time.Hour).Milliseconds()), "x-message-ttl": int32(1000)}
	}
	w := newWorkload(c, run+letter, false)
	for k := 1; k < 10000; k++ {
		w.Main, w.DLQ = fmt.Sprintf("cf%ss%d", letter, k), fmt.Sprintf("cf%st%d", letter, k)
		if zero || c.shards-1 < 2 || c.shardOf(w.Main) != c.shardOf(w.DLQ) {
			break
		}
	}
	d := &dlxLoad{w: w, exchange: "cf" + letter + "-dlx", zero: zero, sent: map[string]bool{}, deleted: map[string]bool{}, tried: map[string]bool{}, deaths: map[string]bool{}}
	args["x-dead-letter-exchange"] = d.exchange
	m := c.nodes[0]
	m.mu.Lock()
	url := m.amqp
	m.mu.Unlock()
	conn, ch, err := amqpDial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := ch.ExchangeDeclare(d.exchange, "fanout", true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("declare exchange %s: %w", d.exchange, err)
	}
	if _, err := ch.QueueDeclare(w.DLQ, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("declare %s: %w", w.DLQ, err)
	}
	if err := ch.QueueBind(w.DLQ, "", d.exchange, false, nil); err != nil {
		return nil, fmt.Errorf("bind %s: %w", w.DLQ, err)
	}
	if _, err := ch.QueueDeclare(w.Main, true, false, false, false, args); err != nil {
		return nil, fmt.Errorf("declare %s: %w", w.Main, err)
	}
	return d, nil
}

// Start starts the publisher, the rejecting consumer and the dead-letter
// queue's SQS consumer.
func (d *dlxLoad) Start(ctx context.Context, rng *rand.Rand) {
	d.prodCtx, d.stopProd = context.WithCancel(ctx)
	d.consCtx, d.stopCons = context.WithCancel(ctx)
	d.prodDone.Go(func() { d.produce(d.prodCtx, rand.New(rand.NewPCG(rng.Uint64(), 11))) })
	d.consDone.Go(func() { d.reject(d.consCtx, rand.New(rand.NewPCG(rng.Uint64(), 12))) })
	d.consDone.Go(func() { d.consume(d.consCtx, rand.New(rand.NewPCG(rng.Uint64(), 13))) })
}

// StopProducers stops the publisher and waits for it.
func (d *dlxLoad) StopProducers() {
	d.stopProd()
	d.prodDone.Wait()
}

// StopConsumers stops the consumers and waits for them.
func (d *dlxLoad) StopConsumers() {
	d.stopCons()
	d.consDone.Wait()
}

// produce publishes one persistent body at a time with a confirm, about
// every 20 ms, through a connection to a random node (a new one after any
// failure).
func (d *dlxLoad) produce(ctx context.Context, rng *rand.Rand) {
	for i := 0; ctx.Err() == nil; {
		url, err := d.w.c.pickAMQP(ctx, rng)
		if err != nil {
			return
		}
		conn, ch, err := amqpDial(url)
		if err == nil {
			if err = ch.Confirm(false); err != nil {
				err = &stepError{"confirm.select", err}
			}
		}
		for err == nil && ctx.Err() == nil {
			body := fmt.Sprintf("%s-%d", d.w.Run, i)
			i++
			d.mu.Lock()
			d.sent[body] = false
			d.mu.Unlock()
			d.attempts.Add(1)
			var dc *amqp.DeferredConfirmation
			dc, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", d.w.Main, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
			if err != nil {
				break
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), amqpConfirmMax)
			ok, werr := dc.WaitContext(wctx)
			cancel()
			switch {
			case werr != nil:
				err = fmt.Errorf("no confirm in %v", amqpConfirmMax)
			case !ok:
				err = errors.New("basic.nack, or the connection closed")
			default:
				d.mu.Lock()
				d.sent[body] = true
				d.mu.Unlock()
				d.confirms.Add(1)
				faults.SleepCtx(ctx, 20*time.Millisecond)
			}
		}
		if conn != nil {
			_ = conn.Close()
		}
		if err != nil && ctx.Err() == nil {
			d.w.note("dlx publish"+amqpStep(err), err)
			faults.SleepCtx(ctx, 20*time.Millisecond)
		}
	}
}

// reject consumes the source through a random node and rejects every
// delivery without requeue: each is dead-lettered through the exchange.
// A reject lost with its connection is redelivered, and rejected again.
func (d *dlxLoad) reject(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		url, err := d.w.c.pickAMQP(ctx, rng)
		if err != nil {
			return
		}
		if err := d.rejectOn(ctx, url); err != nil && ctx.Err() == nil {
			d.w.note("dlx reject"+amqpStep(err), err)
			faults.SleepCtx(ctx, 20*time.Millisecond)
		}
	}
}

func (d *dlxLoad) rejectOn(ctx context.Context, url string) error {
	conn, ch, err := amqpDial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
		return &stepError{"basic.qos", err}
	}
	ds, err := ch.ConsumeWithContext(ctx, d.w.Main, "", false, false, false, false, nil)
	if err != nil {
		return &stepError{"basic.consume", err}
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			if e == nil {
				return errors.New("connection closed")
			}
			return e
		case m, ok := <-ds:
			if !ok {
				return errors.New("deliveries ended")
			}
			if err := m.Reject(false); err != nil {
				return err
			}
			d.rejects.Add(1)
		}
	}
}

// consume receives the dead-letter queue over SQS through random nodes
// and deletes what it receives (an unanswered delete is noted: it may
// have been applied).
func (d *dlxLoad) consume(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		_, client, url, err := d.w.pick(ctx, rng, d.w.DLQ)
		if err != nil {
			return
		}
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, VisibilityTimeout: 5, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		if err != nil {
			d.w.note("dlx receive", err)
			faults.SleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			d.recvs.Add(1)
			d.mu.Lock()
			if _, carried := d.sent[body]; !carried {
				d.unknown = append(d.unknown, body)
			}
			if strings.HasSuffix(m.Attributes["DeadLetterQueueSourceArn"], ":"+d.w.Main) {
				d.deaths[body] = true
			}
			d.mu.Unlock()
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				d.w.note("dlx delete", err)
				d.mu.Lock()
				d.tried[body] = true
				d.mu.Unlock()
				continue
			}
			d.mu.Lock()
			d.deleted[body] = true
			d.mu.Unlock()
		}
	}
}

// owed counts the confirmed bodies no acknowledged delete has settled,
// and of those the ambiguous ones (a delete sent and not answered).
func (d *dlxLoad) owed() (owed, ambiguous int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for body, acked := range d.sent {
		if acked && !d.deleted[body] {
			owed++
			if d.tried[body] {
				ambiguous++
			}
		}
	}
	return owed, ambiguous
}

// drained reports whether every confirmed body was deleted and both
// queues are empty.
func (d *dlxLoad) drained(ctx context.Context, rng *rand.Rand) (bool, string) {
	if n, amb := d.owed(); n > amb {
		return false, fmt.Sprintf("%s: %d confirmed bodies not in %s and deleted yet (and %d whose unanswered delete may have been applied)", d.w.Main, n-amb, d.w.DLQ, amb)
	}
	return d.w.queuesEmpty(ctx, rng)
}

// finish reports the load and fails the test on a lost or unexpected
// body, and on a run in which no dead letter arrived.
func (d *dlxLoad) finish(t testing.TB, held bool) {
	t.Helper()
	owed, ambiguous := d.owed()
	owed -= ambiguous
	d.mu.Lock()
	unknown := append([]string(nil), d.unknown...)
	deleted, deaths := len(d.deleted), len(d.deaths)
	var lost []string
	for body, acked := range d.sent {
		if acked && !d.deleted[body] && !d.tried[body] {
			lost = append(lost, body)
		}
	}
	d.mu.Unlock()
	slices.Sort(lost)
	src := d.w.c.shardOf(d.w.Main)
	if d.zero {
		src = 0
	}
	t.Logf("dlx (source %s on shard %d, rejected into exchange %s, bound %s on shard %d; routed by shard 0): publishes attempted %d, confirmed %d; rejects %d; dead letters received %d (%d bodies with DeadLetterQueueSourceArn %s), bodies deleted %d; confirmed and not deleted %d (and %d whose unanswered delete may have been applied), unexpected %d; errors: %s",
		d.w.Main, src, d.exchange, d.w.DLQ, d.w.c.shardOf(d.w.DLQ), d.attempts.Load(), d.confirms.Load(),
		d.rejects.Load(), d.recvs.Load(), deaths, d.w.Main, deleted, owed, ambiguous, len(unknown), d.w.errorSummary())
	switch {
	case owed > 0 && held:
		t.Errorf("dlx: %d confirmed bodies still queued after the drain (on their way between the shards), e.g. %q", owed, lost[:min(len(lost), 5)])
	case owed > 0:
		t.Errorf("dlx: %d confirmed bodies lost (never in the dead-letter queue, and both queues empty), e.g. %q", owed, lost[:min(len(lost), 5)])
	}
	if len(unknown) > 0 {
		t.Errorf("dlx: %d bodies received that no publish carried, e.g. %q", len(unknown), unknown[:min(len(unknown), 5)])
	}
	if d.confirms.Load() == 0 || deleted == 0 || deaths == 0 {
		t.Errorf("dlx: %d publishes confirmed, %d dead letters deleted, %d naming their source: the routed dead letters went unchecked", d.confirms.Load(), deleted, deaths)
	}
}

func (d *dlxLoad) pair() *workload { return d.w }
