package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQP message body layout (binary; AMQP bodies are opaque):
//
//	offset 0       4        8              16
//	       "SAB1"  run:u32  stamp:i64 (BE)  filler 'x' up to Size
//
// run is a random id of this RunAMQP call, so messages of an earlier run are
// recognised (acked, not counted). stamp is the publish time in nanoseconds
// since the run's start on the monotonic clock: publishers and consumers
// share one process, so deliver − publish is an exact end-to-end latency.
const (
	amqpMagic = "SAB1"
	// AMQPPrefixLen is the length of the body prefix and so the smallest
	// -size of `sluice bench amqp`.
	AMQPPrefixLen = 16
)

func newAMQPBody(run uint32, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = 'x'
	}
	copy(b, amqpMagic)
	binary.BigEndian.PutUint32(b[4:8], run)
	return b
}

// parseAMQPBody returns the run id and stamp of a bench body.
func parseAMQPBody(b []byte) (run uint32, stamp time.Duration, ok bool) {
	if len(b) < AMQPPrefixLen || string(b[:4]) != amqpMagic {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(b[4:8]), time.Duration(binary.BigEndian.Uint64(b[8:16])), true
}

// AMQPResult is what one RunAMQP measured. Durations are in nanoseconds in
// JSON.
type AMQPResult struct {
	URL           string         `json:"url"` // password redacted
	Queue         string         `json:"queue"`
	QueueArgs     map[string]any `json:"queue_args,omitempty"` // the declare's arguments
	Producers     int            `json:"producers"`
	Consumers     int            `json:"consumers"`
	Size          int            `json:"size_bytes"`
	Rate          float64        `json:"target_rate"` // 0 = as fast as possible
	ConfirmWindow int            `json:"confirm_window"`
	Prefetch      int            `json:"prefetch"`
	AckEvery      int            `json:"ack_every"`
	NoAck         bool           `json:"no_ack,omitempty"`
	Persistent    bool           `json:"persistent"`
	Priorities    int            `json:"priorities,omitempty"` // -priorities
	Product       string         `json:"server_product"`       // server-properties product and version
	Purged        int            `json:"purged"`               // messages left in the queue by earlier runs
	Backlog       int            `json:"backlog"`              // messages published before the run (-backlog)
	BacklogTime   time.Duration  `json:"backlog_ns"`           // how long publishing them took

	Published   uint64 `json:"published"`   // basic.publish calls that were written
	Confirmed   uint64 `json:"confirmed"`   // publisher confirms (basic.ack)
	Nacked      uint64 `json:"nacked"`      // basic.nack confirms
	Received    uint64 `json:"received"`    // deliveries of this run's messages, redeliveries included
	Redelivered uint64 `json:"redelivered"` // of which redelivered=true
	Acked       uint64 `json:"acked"`       // basic.ack sent for this run's messages
	Stale       uint64 `json:"stale"`       // other messages delivered (and acked)

	SendElapsed time.Duration `json:"send_elapsed_ns"` // start → last confirm
	Elapsed     time.Duration `json:"elapsed_ns"`      // start → last consumer ack
	SendRate    float64       `json:"send_rate"`       // Confirmed / SendElapsed
	Throughput  float64       `json:"throughput"`      // Acked / Elapsed, end to end
	// ConsumeRate is the ack rate while producers were running: with a
	// backlog building up it shows the consumers' sustained rate, which
	// Throughput averages with the drain.
	ConsumeRate float64 `json:"consume_rate"`

	// Latency is publish → deliver of this run's messages, from the stamp
	// in each body. ConfirmRTT is publish → its confirm.
	Latency    LatencySummary `json:"latency"`
	ConfirmRTT LatencySummary `json:"confirm_rtt"`

	Errors map[string]uint64 `json:"errors"`

	// CPU is the broker's (with -pid), this process's and the machine's
	// CPU time during the run, per 100,000 acked messages.
	CPUUse
}

// AMQPCommand is `sluice bench amqp [flags]`: it parses args, runs, and
// returns the process exit code.
func AMQPCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o AMQPOptions
	fs := flag.NewFlagSet("sluice bench amqp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice bench amqp: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if _, err := RunAMQP(ctx, o, stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "sluice bench amqp: %v\n", err)
		return 1
	}
	return 0
}

// RunAMQP declares and purges the queue, runs o.Producers publishers (confirm
// mode, at most o.ConfirmWindow unconfirmed each) for o.Duration and
// o.Consumers consumers (manual ack, prefetch o.Prefetch) until every
// confirmed message is acked or o.DrainTimeout passed, then writes a table
// (or JSON) to out. Canceling ctx ends the run early with ctx.Err().
func RunAMQP(ctx context.Context, o AMQPOptions, out io.Writer) (AMQPResult, error) {
	if err := o.Validate(); err != nil {
		return AMQPResult{}, err
	}
	r := &amqpRun{o: o, id: rand.Uint32()}
	setup, err := r.dial("setup")
	if err != nil {
		return AMQPResult{}, err
	}
	product := fmt.Sprint(setup.Properties["product"], " ", setup.Properties["version"])
	ch, err := setup.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(o.Queue, true, false, false, false, amqp.Table(o.QueueArgs))
	}
	purged := 0
	if err == nil {
		purged, err = ch.QueuePurge(o.Queue, false)
	}
	_ = setup.Close() // the declare and purge already succeeded or failed
	if err != nil {
		return AMQPResult{}, fmt.Errorf("bench: declare and purge queue %q: %w", o.Queue, err)
	}
	filled, err := fillBacklog(ctx, o.Backlog, r.fill)
	if err != nil {
		return AMQPResult{}, err
	}
	res, err := r.do(ctx)
	res.Product, res.Purged, res.Backlog, res.BacklogTime = product, purged, o.Backlog, filled
	if err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	if werr := writeResult(out, o.JSON, &res); werr != nil {
		return res, werr
	}
	return res, err
}

// amqpRun is the shared state of one RunAMQP. Counters are atomics;
// histograms and error maps belong to one goroutine each and are merged
// after all stopped.
type amqpRun struct {
	o  AMQPOptions
	id uint32
	t0 time.Time

	published, confirmed, nacked atomic.Uint64
	received, redelivered, acked atomic.Uint64
	stale                        atomic.Uint64
	lastConfirm, lastAck         atomic.Int64 // ns since t0
	producersDone                atomic.Bool
	stopConsumers                context.CancelFunc
	stopOnce                     sync.Once
	errMu                        sync.Mutex
	errors                       map[string]uint64
	firstErr                     error
	latency, confirmRTT          Histogram
	histMu                       sync.Mutex
}

func (r *amqpRun) dial(name string) (*amqp.Connection, error) {
	c, err := amqp.DialConfig(r.o.URL, amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "sluice-bench-" + name},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: connect to %s: %w", redactURL(r.o.URL), err)
	}
	return c, nil
}

func (r *amqpRun) countErr(kind string, err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.errors == nil {
		r.errors = make(map[string]uint64)
	}
	r.errors[kind]++
	if r.firstErr == nil && err != nil {
		r.firstErr = fmt.Errorf("%s: %w", kind, err)
	}
}

func (r *amqpRun) merge(lat, rtt *Histogram) {
	r.histMu.Lock()
	defer r.histMu.Unlock()
	r.latency.Merge(lat)
	r.confirmRTT.Merge(rtt)
}

// maybeStop ends the consumers once producers are done and every confirmed
// message was acked.
func (r *amqpRun) maybeStop() {
	if r.producersDone.Load() && r.acked.Load() >= r.confirmed.Load() {
		r.stopOnce.Do(r.stopConsumers)
	}
}

func (r *amqpRun) do(ctx context.Context) (AMQPResult, error) {
	o := r.o
	cpu, err := startCPU(o.PID)
	if err != nil {
		return AMQPResult{}, err
	}

	consumeCtx, stop := context.WithCancel(ctx)
	defer stop()
	r.stopConsumers = stop

	// Consumers first, each subscribed before any publish, so that the
	// first messages' latency is not a queueing artefact. t0 is set before
	// they start: with -backlog they take messages at once.
	r.t0 = time.Now()
	var cwg sync.WaitGroup
	ready := make(chan error, o.Consumers)
	for i := range o.Consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			r.consume(consumeCtx, i, ready)
		}()
	}
	for range o.Consumers {
		if err := <-ready; err != nil {
			stop()
			cwg.Wait()
			return AMQPResult{}, err
		}
	}

	deadline := time.Now().Add(o.Duration)
	var pwg sync.WaitGroup
	for i := range o.Producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			r.produce(ctx, i, deadline)
		}()
	}
	pwg.Wait()
	sendEnd, ackedAtSendEnd := time.Since(r.t0), r.acked.Load()
	r.producersDone.Store(true)
	r.maybeStop()
	drain := time.AfterFunc(o.DrainTimeout, stop)
	cwg.Wait()
	drain.Stop()

	res := AMQPResult{
		URL: redactURL(o.URL), Queue: o.Queue, QueueArgs: o.QueueArgs, Producers: o.Producers, Consumers: o.Consumers,
		Size: o.Size, Rate: o.Rate, ConfirmWindow: o.ConfirmWindow, Prefetch: o.Prefetch, AckEvery: o.AckEvery, NoAck: o.NoAck, Persistent: o.Persistent, Priorities: o.Priorities,
		Published: r.published.Load(), Confirmed: r.confirmed.Load(), Nacked: r.nacked.Load(),
		Received: r.received.Load(), Redelivered: r.redelivered.Load(), Acked: r.acked.Load(), Stale: r.stale.Load(),
		SendElapsed: time.Duration(r.lastConfirm.Load()), Elapsed: time.Duration(r.lastAck.Load()),
		Latency: amqpSummary(&r.latency), ConfirmRTT: amqpSummary(&r.confirmRTT),
		Errors: map[string]uint64{},
	}
	for k, v := range r.errors {
		res.Errors[k] = v
	}
	if res.SendElapsed > 0 {
		res.SendRate = float64(res.Confirmed) / res.SendElapsed.Seconds()
	}
	if sendEnd > 0 {
		res.ConsumeRate = float64(ackedAtSendEnd) / sendEnd.Seconds()
	}
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Acked) / res.Elapsed.Seconds()
	}
	if res.CPUUse, err = cpu.stop(res.Acked); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.Published == 0 && r.firstErr != nil {
		return res, r.firstErr
	}
	return res, nil
}

// produce publishes on its own connection in confirm mode until the
// deadline, keeping at most ConfirmWindow publishes unconfirmed, then waits
// for the outstanding confirms.
func (r *amqpRun) produce(ctx context.Context, id int, deadline time.Time) {
	o := r.o
	conn, err := r.dial("producer-" + strconv.Itoa(id))
	if err != nil {
		r.countErr("connect", err)
		return
	}
	defer func() { _ = conn.Close() }() // a load generator's connection: nothing to report
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		r.countErr("channel", err)
		return
	}
	window := o.ConfirmWindow
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	// sem holds one token per unconfirmed publish. sent[tag%window] is the
	// publish time of delivery tag tag: confirms arrive in tag order
	// (amqp091-go resequences them), so at most window tags are live and
	// the slot of a new tag was freed by the confirm of tag−window.
	sem := make(chan struct{}, window)
	sent := make([]atomic.Int64, window)
	confirmDone := make(chan struct{})
	var rtt Histogram
	go func() {
		defer close(confirmDone)
		for c := range confirms {
			now := time.Since(r.t0)
			rtt.Record(now - time.Duration(sent[c.DeliveryTag%uint64(window)].Load()))
			if c.Ack {
				r.confirmed.Add(1)
			} else {
				r.nacked.Add(1)
				r.countErr("nack", nil)
			}
			amqpStoreMax(&r.lastConfirm, int64(now))
			<-sem
		}
	}()

	msg := amqp.Publishing{Body: newAMQPBody(r.id, o.Size)}
	if o.Persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	var interval time.Duration
	var next time.Time
	if o.Rate > 0 {
		interval = time.Duration(float64(o.Producers) / o.Rate * float64(time.Second))
		next = r.t0.Add(interval * time.Duration(id) / time.Duration(o.Producers))
	}
	timer := time.NewTimer(0)
	<-timer.C
	var tag uint64
publish:
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if interval > 0 {
			if next.After(deadline) {
				break
			}
			if d := time.Until(next); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					break publish
				case <-timer.C:
				}
			}
			next = next.Add(interval)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break publish
		}
		tag++
		now := time.Since(r.t0)
		sent[tag%uint64(window)].Store(int64(now))
		binary.BigEndian.PutUint64(msg.Body[8:16], uint64(now))
		msg.Priority = cyclePriority(tag, o.Priorities)
		// Publish writes the frames before it returns, so the body is
		// reused for the next message.
		if err := ch.PublishWithContext(ctx, "", o.Queue, false, false, msg); err != nil {
			if ctx.Err() == nil {
				r.countErr("publish", err)
			}
			<-sem
			break
		}
		r.published.Add(1)
	}
	// Wait for every outstanding confirm: all tokens back.
	wait := time.NewTimer(o.DrainTimeout)
	defer wait.Stop()
	for range window {
		select {
		case sem <- struct{}{}:
			continue
		case <-confirmDone: // channel closed: no more confirms will come
		case <-wait.C:
			r.countErr("confirm-timeout", nil)
		case <-ctx.Done():
		}
		break
	}
	// Closing ends the confirm listener; errors of an ending run change no result.
	_ = ch.Close()
	_ = conn.Close()
	<-confirmDone
	r.merge(&Histogram{}, &rtt)
}

// consume subscribes on its own connection with manual acks (unless
// NoAck) and acks every delivery until consumeCtx ends. It reports on ready once subscribed.
func (r *amqpRun) consume(ctx context.Context, id int, ready chan<- error) {
	o := r.o
	conn, err := r.dial("consumer-" + strconv.Itoa(id))
	if err != nil {
		ready <- err
		return
	}
	defer func() { _ = conn.Close() }() // a load generator's connection: nothing to report
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(o.Prefetch, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(o.Queue, "", o.NoAck, false, false, false, nil)
	}
	if err != nil {
		ready <- fmt.Errorf("bench: consume %q: %w", o.Queue, err)
		return
	}
	ready <- nil
	var lat Histogram
	defer func() { r.merge(&lat, &Histogram{}) }()
	// With AckEvery > 1, deliveries are acked together (multiple=true) every
	// AckEvery deliveries or as soon as no further delivery is waiting.
	var last amqp.Delivery
	var pending, pendingMine uint64
	flush := func() bool {
		if pending == 0 {
			return true
		}
		// With NoAck the broker settled them as it sent them: they
		// count as acked.
		if !o.NoAck {
			if err := last.Ack(o.AckEvery > 1); err != nil {
				r.countErr("ack", err)
				return false
			}
		}
		if pendingMine > 0 { // acks of stale messages only do not end the run's clock
			r.acked.Add(pendingMine)
			amqpStoreMax(&r.lastAck, int64(time.Since(r.t0)))
		}
		pending, pendingMine = 0, 0
		r.maybeStop()
		return true
	}
	for {
		var d amqp.Delivery
		var ok bool
		if pending > 0 {
			select {
			case d, ok = <-deliveries:
			default:
				if !flush() {
					return
				}
				continue
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case d, ok = <-deliveries:
			}
		}
		if !ok {
			if ctx.Err() == nil {
				r.countErr("consumer-closed", errors.New("delivery channel closed"))
			}
			return
		}
		now := time.Since(r.t0)
		run, stamp, ok := parseAMQPBody(d.Body)
		if ok && run == r.id {
			lat.Record(now - stamp)
			r.received.Add(1)
			if d.Redelivered {
				r.redelivered.Add(1)
			}
			pendingMine++
		} else {
			r.stale.Add(1)
		}
		last = d
		pending++
		if pending >= uint64(o.AckEvery) && !flush() {
			return
		}
	}
}

func amqpStoreMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func amqpSummary(h *Histogram) LatencySummary {
	return LatencySummary{
		Count: h.Count(), Mean: h.Mean(), Max: h.Max(),
		P50: h.Quantile(0.50), P90: h.Quantile(0.90), P99: h.Quantile(0.99), P999: h.Quantile(0.999),
	}
}

// WriteTable prints the result as a compact table.
func (res *AMQPResult) WriteTable(w io.Writer) {
	rate := "max"
	if res.Rate > 0 {
		rate = strconv.FormatFloat(res.Rate, 'f', -1, 64) + " msg/s"
	}
	queue := res.Queue
	if len(res.QueueArgs) > 0 {
		queue += fmt.Sprint(res.QueueArgs)
	}
	fmt.Fprintf(w, "sluice bench amqp: %s (%s) queue=%s producers=%d consumers=%d size=%dB persistent=%t confirm-window=%d prefetch=%d ack-every=%d no-ack=%t rate=%s\n",
		res.URL, res.Product, queue, res.Producers, res.Consumers, res.Size, res.Persistent, res.ConfirmWindow, res.Prefetch, res.AckEvery, res.NoAck, rate)
	if res.Priorities > 0 {
		fmt.Fprintf(w, "  %-12s %10d  priorities 0..%[2]d published in turn\n", "priorities", res.Priorities)
	}
	if res.Purged > 0 {
		fmt.Fprintf(w, "  %-12s %10d  (left by earlier runs)\n", "purged", res.Purged)
	}
	if res.Backlog > 0 {
		fmt.Fprintf(w, "  %-12s %10d  published with no consumer in %s before the run\n", "backlog",
			res.Backlog, res.BacklogTime.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  %-12s %10d  %10.0f msg/s over %s (published %d, nacked %d)\n", "confirmed",
		res.Confirmed, res.SendRate, res.SendElapsed.Round(time.Millisecond), res.Published, res.Nacked)
	fmt.Fprintf(w, "  %-12s %10d  (%d redelivered)\n", "received", res.Received, res.Redelivered)
	fmt.Fprintf(w, "  %-12s %10d  %10.0f msg/s end to end over %s (%.0f msg/s while publishing)\n", "acked",
		res.Acked, res.Throughput, res.Elapsed.Round(time.Millisecond), res.ConsumeRate)
	if res.Stale > 0 {
		fmt.Fprintf(w, "  %-12s %10d  (other messages, acked)\n", "stale", res.Stale)
	}
	printLatencies(w, namedLatency{"latency", res.Latency}, namedLatency{"confirm rtt", res.ConfirmRTT})
	printCPU(w, res.CPUUse, res.Elapsed)
	printErrors(w, res.Errors)
}

// cyclePriority is the priority property of the n-th publish when
// priorities 0 … max are published in turn (max 0: none).
func cyclePriority(n uint64, max int) uint8 {
	if max == 0 {
		return 0
	}
	return uint8(n % uint64(max+1))
}

// fill publishes o.Backlog persistent messages of another run id to the
// queue on one confirming channel (window 1,000) and returns once every
// one is confirmed; a nack is an error.
func (r *amqpRun) fill(ctx context.Context) error {
	conn, err := r.dial("backlog")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // a load generator's connection: nothing to report
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		return fmt.Errorf("bench: backlog channel: %w", err)
	}
	const window = 1000
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	msg := amqp.Publishing{Body: newAMQPBody(r.id+1, r.o.Size)} // not this run: consumers count it stale
	if r.o.Persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	outstanding := 0
	wait := func() error {
		select {
		case c, ok := <-confirms:
			if !ok {
				return errors.New("bench: backlog channel closed")
			}
			if !c.Ack {
				return fmt.Errorf("bench: backlog publish %d nacked", c.DeliveryTag)
			}
			outstanding--
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; i < r.o.Backlog; i++ {
		for outstanding >= window {
			if err := wait(); err != nil {
				return err
			}
		}
		msg.Priority = cyclePriority(uint64(i), r.o.Priorities)
		if err := ch.PublishWithContext(ctx, "", r.o.Queue, false, false, msg); err != nil {
			return fmt.Errorf("bench: backlog publish: %w", err)
		}
		outstanding++
	}
	for outstanding > 0 {
		if err := wait(); err != nil {
			return err
		}
	}
	return nil
}
