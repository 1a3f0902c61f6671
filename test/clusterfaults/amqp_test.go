package clusterfaults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/test/faults"
)

// The AMQP part of the workload: its own standard queue, declared over
// AMQP (so that every new leader requeues what the old leader's AMQP
// connections held unacknowledged, as a restarted single node does), fed
// by AMQP publishers with publisher confirms and drained by AMQP consumers
// (manual acks) and one SQS consumer, all through random nodes.
const (
	amqpQueue      = "cf-amqp"
	amqpPublishers = 2
	amqpConsumers  = 2
	amqpRate       = 100 // publishes per second per publisher, at most
	amqpWindow     = 32  // unconfirmed publishes per publisher
	amqpPrefetch   = 20
	amqpConfirmMax = 8 * time.Second // a confirm not in by then: the connection is given up
	amqpHeartbeat  = time.Second     // a stopped or cut-off node's connection dies in a few
	// While publishers run, consumers hold off while fewer confirmed
	// messages than this wait unconsumed: a backlog that a leader's loss
	// of acknowledged writes shows in (consumers that kept up would take
	// every message as soon as it was confirmed, settling it, and a lost
	// write would never be missed).
	amqpMinBacklog = 500
)

// amqpLoad drives the AMQP queue and records its history in its own
// Checker. What it can judge is less than on the SQS queues (see
// docs/reliability.md): a publish counts as acknowledged only when its
// basic.ack confirm arrives, so every confirmed message must be delivered
// and its last delivery settled (a consumer ack, or an acknowledged SQS
// delete); nothing may be delivered that was never published, or with
// another body. A basic.ack gets no answer of its own, but a consumer
// follows its acks with basic.qos, whose reply proves them durable
// (docs/guarantees.md): those deletes are certain, and a later delivery of
// their messages is a resurrection. A queue declared over AMQP has its
// leases ended by every new leader, so no AMQP lease is checked; the SQS
// consumer's deletes on it are certain when answered in their receive's
// term, as on the SQS queues.
type amqpLoad struct {
	w  *workload // the SQS workload: node picking and error counts
	Ck *faults.Checker
	// queue is where the publishers publish (through the default
	// exchange) and the consumers consume: amqpQueue; another shard's
	// SQS workload queue (publishers only, spreadWorkloads); or an SQS
	// queue on another shard (remoteAMQPLoads).
	queue string

	seq atomic.Int64 // message ids
	// epochs numbers the AMQP deliveries, one epoch each (above
	// noTermEpoch, clear of the terms that are the SQS consumer's).
	epochs    atomic.Int64
	Publishes atomic.Int64 // publishes written
	Confirms  atomic.Int64 // basic.ack confirms
	// AcksConfirmed counts consumer acks a basic.qos reply proved
	// applied (certain deletes).
	AcksConfirmed atomic.Int64
	AMQPDels      atomic.Int64 // deliveries to AMQP consumers
	SQSDels       atomic.Int64 // deliveries to the SQS consumer
	// SQSSameTerm counts the SQS consumer's delete batches answered in
	// their receive's term (certain deletes).
	SQSSameTerm atomic.Int64

	publishing               atomic.Bool // see amqpMinBacklog
	stopPublish, stopConsume context.CancelFunc
	pwg, cwg                 sync.WaitGroup
}

func newAMQPLoad(w *workload) *amqpLoad {
	ck := faults.NewChecker(false, 0)
	ck.UnorderedFrom = noTermEpoch // an AMQP delivery has no term
	return &amqpLoad{w: w, Ck: ck, queue: amqpQueue}
}

// declare declares the durable queue through node 1's AMQP listener,
// with an argument that keeps it on shard 0 in every layout (x-expires,
// of a day: idle that long, which no run is) — with placement "subset"
// a queue declared without one (or with others: x-queue-type, limits) is
// placed by its name, on shard 1, and shard 0's own AMQP queues are then
// covered by no load.
func (a *amqpLoad) declare() error {
	m := a.w.c.nodes[0]
	m.mu.Lock()
	url := m.amqp
	m.mu.Unlock()
	conn, ch, err := amqpDial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := ch.QueueDeclare(amqpQueue, true, false, false, false, amqp.Table{"x-expires": int32(24 * 3600 * 1000)}); err != nil {
		return fmt.Errorf("declare %s: %w", amqpQueue, err)
	}
	return nil
}

// stepError is an error of one step of an AMQP client's set-up, which the
// error summary names (its kinds keep only an error's last part).
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// amqpStep is " (step)" for an error of a set-up step, else "".
func amqpStep(err error) string {
	var s *stepError
	if errors.As(err, &s) {
		return " (" + s.step + ")"
	}
	return ""
}

// amqpDial connects with a short dial timeout and heartbeat, and opens a
// channel.
func amqpDial(url string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Heartbeat: amqpHeartbeat, Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return nil, nil, &stepError{"dial", err}
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close() // the channel's error is the one to report
		return nil, nil, &stepError{"channel.open", err}
	}
	return conn, ch, nil
}

// pickAMQP returns the AMQP URL of a random node that is not killed.
func (a *amqpLoad) pickAMQP(ctx context.Context, rng *rand.Rand) (string, error) {
	return a.w.c.pickAMQP(ctx, rng)
}

// pickAMQP returns the AMQP URL of a random node of c that is not killed.
func (c *testCluster) pickAMQP(ctx context.Context, rng *rand.Rand) (string, error) {
	for ctx.Err() == nil {
		m := c.nodes[rng.IntN(len(c.nodes))]
		m.mu.Lock()
		url := m.amqp
		m.mu.Unlock()
		if url != "" {
			return url, nil
		}
		faults.SleepCtx(ctx, time.Millisecond) // no spinning while nodes are down
	}
	return "", ctx.Err()
}

// Start starts the publishers, the AMQP consumers and the SQS consumer.
func (a *amqpLoad) Start(ctx context.Context, rng *rand.Rand) {
	a.StartPublishers(ctx, rng)
	cctx, stopC := context.WithCancel(ctx)
	a.stopConsume = stopC
	for c := range amqpConsumers {
		a.cwg.Add(1)
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(300+c)))
		go func() { defer a.cwg.Done(); a.consumeLoop(cctx, r) }()
	}
	a.cwg.Add(1)
	r := rand.New(rand.NewPCG(rng.Uint64(), 399))
	go func() { defer a.cwg.Done(); a.sqsConsume(cctx, r) }()
}

// StartPublishers starts the publishers alone.
func (a *amqpLoad) StartPublishers(ctx context.Context, rng *rand.Rand) {
	pctx, stopP := context.WithCancel(ctx)
	a.stopPublish = stopP
	a.publishing.Store(true)
	for p := range amqpPublishers {
		a.pwg.Add(1)
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(200+p)))
		go func() { defer a.pwg.Done(); a.publishLoop(pctx, p, r) }()
	}
}

// StopPublishers stops the publishers and waits for them.
func (a *amqpLoad) StopPublishers() {
	a.stopPublish()
	a.pwg.Wait()
	a.publishing.Store(false)
}

// holdOff waits while publishers run and the backlog is under
// amqpMinBacklog (pacing, not synchronisation), or until ctx ends.
func (a *amqpLoad) holdOff(ctx context.Context) {
	for ctx.Err() == nil && a.publishing.Load() && a.Ck.Backlog() < amqpMinBacklog {
		faults.SleepCtx(ctx, 5*time.Millisecond)
	}
}

// StopConsumers stops the consumers and waits for them.
func (a *amqpLoad) StopConsumers() {
	a.stopConsume()
	a.cwg.Wait()
}

// publishLoop publishes through one connection at a time, reconnecting to
// a random node after any failure, until ctx ends.
func (a *amqpLoad) publishLoop(ctx context.Context, p int, rng *rand.Rand) {
	for ctx.Err() == nil {
		url, err := a.pickAMQP(ctx, rng)
		if err != nil {
			return
		}
		if err := a.publish(ctx, url, p); err != nil && ctx.Err() == nil {
			a.w.note("amqp publish"+amqpStep(err), err)
			faults.SleepCtx(ctx, 20*time.Millisecond) // pacing after an error
		}
	}
}

// publish publishes persistent messages with publisher confirms on one
// connection, at most amqpWindow unconfirmed and amqpRate a second. A
// message is attempted before its publish is written and acknowledged only
// when its basic.ack arrives; a nack, or a connection that ends first,
// leaves it unknown (amqp091-go reports both as a negative confirm). It
// returns when the connection fails or ctx ends, after the confirms in
// flight are settled or given up.
func (a *amqpLoad) publish(ctx context.Context, url string, p int) error {
	conn, ch, err := amqpDial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return &stepError{"confirm.select", err}
	}
	type inflight struct {
		id string
		dc *amqp.DeferredConfirmation
	}
	window := make(chan inflight, amqpWindow)
	failed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range window {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), amqpConfirmMax)
			ok, err := f.dc.WaitContext(wctx)
			cancel()
			switch {
			case err != nil:
				select {
				case failed <- fmt.Errorf("no confirm in %v", amqpConfirmMax):
				default:
				}
				_ = conn.Close() // give the connection up; its publishes stay unknown
			case ok:
				a.Ck.Acked(f.id, "", time.Now())
				a.Confirms.Add(1)
			case !conn.IsClosed():
				a.w.note("amqp confirm", errors.New("basic.nack"))
			}
		}
	}()
	defer func() { close(window); <-done }()
	tick := time.NewTicker(time.Second / amqpRate)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-tick.C:
		}
		if a.Ck.Backlog() > maxBacklog {
			continue
		}
		id := fmt.Sprintf("a-%s-%d-%07d", a.w.Run, p, a.seq.Add(1))
		body := faults.Body(id, false)
		a.Ck.Attempt(faults.Send{ID: id, Body: body}, time.Now())
		a.w.Ops.Add(1)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", a.queue, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
		if err != nil {
			return &stepError{"basic.publish", err}
		}
		a.Publishes.Add(1)
		select {
		case window <- inflight{id, dc}:
		case err := <-failed:
			return err
		}
	}
}

// consumeLoop consumes through one connection at a time, reconnecting to
// a random node after any failure, until ctx ends.
func (a *amqpLoad) consumeLoop(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		url, err := a.pickAMQP(ctx, rng)
		if err != nil {
			return
		}
		if err := a.consume(ctx, url); err != nil && ctx.Err() == nil {
			a.w.note("amqp consume"+amqpStep(err), err)
			faults.SleepCtx(ctx, 20*time.Millisecond) // pacing after an error
		}
	}
}

// confirmAcksEvery is how many acks a consumer writes before it sends
// basic.qos to learn that they were applied (also whenever no delivery
// waits).
const confirmAcksEvery = 10

// consume consumes with manual acks on one connection. Each delivery is
// recorded with no lease to check, and acked in order; an ack written to a
// live connection is recorded with Checker.Consumed. A delivery is dated
// from the latest moment the broker can have taken it: for the first
// amqpPrefetch deliveries, the consumer's start; for the k-th after that,
// the moment the consumer began to write the ack of delivery k −
// amqpPrefetch. The broker takes a message for a consumer only within its
// prefetch credit (unacknowledged deliveries plus reserved credit ≤ the
// prefetch), and deliveries leave it in the order taken, so when it took
// the k-th at least k − amqpPrefetch of the earlier ones had been acked,
// in order. Every
// confirmAcksEvery acks, and whenever no delivery waits, the consumer
// sends basic.qos (the same prefetch): its reply proves the acks before it
// applied, and they are recorded with Checker.AckConfirmed.
func (a *amqpLoad) consume(ctx context.Context, url string) error {
	conn, ch, err := amqpDial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	// For a violation's report: the node dialled and the client's port,
	// which the node's relay or server sees.
	host := url
	if u, err := neturl.Parse(url); err == nil {
		host = u.Host
	}
	via := fmt.Sprintf("amqp %s from %s", host, conn.LocalAddr())
	if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
		return err
	}
	begin := time.Now()
	a.w.Ops.Add(1)
	ds, err := ch.ConsumeWithContext(ctx, a.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	type acked struct {
		id    string
		lease faults.Lease
	}
	var pending []acked   // written, not yet proved applied
	var ackAt []time.Time // when the ack of each delivery, in order, began
	confirm := func() error {
		if len(pending) == 0 {
			return nil
		}
		if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
			return err // unknown: they stay merely consumed
		}
		at := time.Now()
		for _, p := range pending {
			a.Ck.AckConfirmed(p.id, p.lease, at)
		}
		a.AcksConfirmed.Add(int64(len(pending)))
		pending = pending[:0]
		return nil
	}
	for {
		if len(pending) >= confirmAcksEvery || (len(pending) > 0 && len(ds) == 0) {
			if err := confirm(); err != nil {
				return err
			}
		}
		a.holdOff(ctx)
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			if e == nil {
				return errors.New("connection closed")
			}
			return e
		case d, ok := <-ds:
			if !ok {
				return errors.New("deliveries ended")
			}
			end := time.Now()
			body := string(d.Body)
			id, _ := faults.ParseBody(body)
			count := 1
			if n, ok := d.Headers["x-delivery-count"].(int64); ok {
				count += int(n)
			}
			lease := faults.Lease{Count: count, Epoch: noTermEpoch + int(a.epochs.Add(1))}
			taken := begin
			if k := len(ackAt) + 1; k > amqpPrefetch {
				taken = ackAt[k-amqpPrefetch-1]
			}
			a.Ck.Received(faults.Receipt{ID: id, Body: body, MessageID: "", Queue: a.queue,
				Begin: taken, End: end, Count: count, Epoch: lease.Epoch, Via: fmt.Sprintf("%s redelivered %v", via, d.Redelivered)})
			a.AMQPDels.Add(1)
			ackAt = append(ackAt, time.Now())
			if err := d.Ack(false); err != nil {
				return err // not written: the message must come back
			}
			a.Ck.Consumed(id, lease, time.Now())
			pending = append(pending, acked{id, lease})
		}
	}
}

// sqsConsume receives the AMQP queue over SQS through random nodes and
// deletes what it receives, sending a delete the broker did not answer
// again as the SQS workload does. A delete batch answered in its
// receive's term is certain; one answered in another only settles (the
// leases of an AMQP-declared queue end at every new leader).
func (a *amqpLoad) sqsConsume(ctx context.Context, rng *rand.Rand) {
	w := a.w
	for ctx.Err() == nil {
		a.holdOff(ctx)
		_, client, url, err := w.pick(ctx, rng, a.queue)
		if err != nil {
			return
		}
		begin := time.Now()
		w.Ops.Add(1)
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			VisibilityTimeout:           int32(faults.LeaseTime / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.note("amqp queue: receive", err)
			faults.SleepCtx(ctx, 20*time.Millisecond) // pacing after an error
			continue
		}
		end := time.Now()
		// The receive's epoch is the term that served it, as on the SQS
		// queues (workload.go); without one, an epoch of its own.
		epoch, ok := w.termOf(out.ResultMetadata)
		if !ok {
			w.noTerm.Add(1)
			epoch = noTermEpoch + int(a.epochs.Add(1))
		}
		var dels []types.DeleteMessageBatchRequestEntry
		var ids []string
		var leases []faults.Lease
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			id, _ := faults.ParseBody(body)
			count, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			l := faults.Lease{Count: count, Epoch: epoch}
			a.Ck.Received(faults.Receipt{ID: id, Body: body, MessageID: aws.ToString(m.MessageId), Queue: a.queue,
				Begin: begin, End: end, Count: count, Visibility: faults.LeaseTime, Epoch: l.Epoch, Via: "sqs " + url})
			a.SQSDels.Add(1)
			a.Ck.DeleteAttempted(id, l, time.Now())
			dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(dels))), ReceiptHandle: m.ReceiptHandle})
			ids, leases = append(ids, id), append(leases, l)
		}
		if len(dels) == 0 {
			continue
		}
		w.Ops.Add(1)
		dout, err := client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: dels})
		for err != nil {
			w.note("amqp queue: delete", err)
			faults.SleepCtx(ctx, 20*time.Millisecond) // pacing after an error
			if ctx.Err() != nil {
				return
			}
			if _, client, url, err = w.pick(ctx, rng, a.queue); err != nil {
				return
			}
			w.Ops.Add(1)
			dout, err = client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: dels})
		}
		done := time.Now()
		// Certain when the receive's term answered it (see workload), as
		// the leases of a queue declared over AMQP end only with a
		// leadership, like an SQS queue's; epoch -1 (another term, or
		// none) settles without being certain.
		certain := -1
		if term, ok := w.termOf(dout.ResultMetadata); ok && term == epoch {
			certain = term
			a.SQSSameTerm.Add(1)
		}
		for _, s := range dout.Successful {
			if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(ids) {
				a.Ck.DeleteAcked(ids[i], leases[i], certain, done)
			}
		}
		for _, f := range dout.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(ids) {
				a.Ck.DeleteFailed(ids[i], leases[i])
			}
			w.note("amqp queue: delete", fmt.Errorf("entry failed: %s %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
}

// summary describes the AMQP queue's counts and verdict r, for the test
// log.
func (a *amqpLoad) summary(r faults.Report) string {
	return fmt.Sprintf("AMQP queue %s: publishes %d, confirms %d; deliveries to AMQP consumers %d (acks proved applied by a basic.qos reply, checked for resurrection: %d), to the SQS consumer %d (delete batches answered in their receive's term, checked for resurrection: %d); %s",
		a.queue, a.Publishes.Load(), a.Confirms.Load(), a.AMQPDels.Load(), a.AcksConfirmed.Load(), a.SQSDels.Load(), a.SQSSameTerm.Load(), r)
}

// held reports whether the broker, asked through any live node, counts
// messages in the AMQP queue (or cannot be asked: then they may be).
func (a *amqpLoad) held(ctx context.Context, rng *rand.Rand) bool {
	empty, _, err := a.counts(ctx, rng)
	return err != nil || !empty
}

// counts asks any live node whether the AMQP queue is empty, with a
// description of its counts.
func (a *amqpLoad) counts(ctx context.Context, rng *rand.Rand) (empty bool, desc string, err error) {
	_, client, url, err := a.w.pick(ctx, rng, a.queue)
	if err != nil {
		return false, "", err
	}
	return faults.QueueCounts(ctx, client, url, a.queue)
}

// drained reports whether every confirmed message of the AMQP queue is
// settled and the broker, asked through any live node, counts no message
// in it (for the drain).
func (a *amqpLoad) drained(ctx context.Context, rng *rand.Rand) (bool, string) {
	if n := a.Ck.Unsettled(); n > 0 {
		return false, fmt.Sprintf("%s: %d confirmed messages unsettled: %s", a.queue, n, strings.Join(a.Ck.UnsettledDetails(3), "; "))
	}
	empty, desc, err := a.counts(ctx, rng)
	if err != nil {
		return false, err.Error()
	}
	return empty, desc
}
