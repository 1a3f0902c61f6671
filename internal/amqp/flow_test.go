package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// flowOptions make the high-water mark small and exact: with factor 1 it
// is max(minBacklog, Σ prefetch). The wait bound is long enough that no
// test here ever reaches it: every pause must end because the queue was
// relieved, not because time passed.
func flowOptions(minBacklog int) Options {
	return Options{FlowMinBacklog: minBacklog, FlowCreditFactor: 1, FlowMaxWait: time.Minute}
}

// publishWindow publishes n persistent messages to queue q on ch in
// confirm mode, keeping at most window of them unconfirmed (as `sluice
// bench amqp` does), and returns once every one is confirmed. A nack or a
// closed channel is an error.
func publishWindow(ctx context.Context, ch *amqp091.Channel, q string, n, window int) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, n))
	outstanding := 0
	waitOne := func() error {
		select {
		case c, ok := <-confirms:
			if !ok {
				return errors.New("channel closed")
			}
			if !c.Ack {
				return fmt.Errorf("publish %d nacked", c.DeliveryTag)
			}
			outstanding--
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; i < n; i++ {
		for outstanding >= window {
			if err := waitOne(); err != nil {
				return err
			}
		}
		if err := ch.PublishWithContext(ctx, "", q, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			return err
		}
		outstanding++
	}
	for outstanding > 0 {
		if err := waitOne(); err != nil {
			return err
		}
	}
	return nil
}

// sampleBacklog records the largest ready count of engine queue q seen
// until stop is called.
func sampleBacklog(b *broker, q string) (peak func() int, stop func()) {
	var max atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n, ok := b.eng.VisibleHint(q); ok && int64(n) > max.Load() {
				max.Store(int64(n))
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() int { return int(max.Load()) }, func() { once.Do(func() { close(done) }); wg.Wait() }
}

// Several confirming publishers flood a queue whose one consumer holds
// its prefetch without acking: the queue goes over its high-water mark,
// every publisher's connection stops being read (its confirms stop), and
// the backlog stays within the mark plus what the publishers had in
// flight. Once the consumer acks again, the gate opens and everything is
// delivered. Without flow control the backlog would reach every message
// published (3 × 1500) while the consumer is stalled.
func TestFlowThrottlesPublishersOfAConsumedQueue(t *testing.T) {
	const (
		publishers = 3
		perPub     = 1500
		window     = 20
		prefetch   = 5
		minBacklog = 100
	)
	b := startBroker(t, withOptions(flowOptions(minBacklog)))
	_, cch := b.channel()
	q, err := cch.QueueDeclare("flow", true, false, false, false, nil)
	must(t, err)
	must(t, cch.Qos(prefetch, 0, false))
	deliveries, err := cch.Consume(q.Name, "", false, false, false, false, nil)
	must(t, err)
	peak, stopSampling := sampleBacklog(b, q.Name)
	defer stopSampling()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		_, pch := b.channel()
		go func() { errs <- publishWindow(ctx, pch, q.Name, perPub, window) }()
	}

	// Stalled consumer: it holds its prefetch and acks nothing. Every
	// publisher ends up paused, with the queue over its mark.
	poll.CheckFor(t, 5*time.Second, poll.True("every publisher paused by flow control", func() bool {
		st := b.srv.FlowStats()
		return st.PausedConnections == publishers && st.ThrottlingQueues == 1
	}))
	hw := minBacklog // max(minBacklog, 1 × prefetch)
	bound := hw + publishers*window
	if n, _ := b.eng.VisibleHint(q.Name); n <= hw || n > bound {
		t.Fatalf("ready while paused = %d, want over the high-water mark %d and at most %d", n, hw, bound)
	}
	select {
	case err := <-errs:
		t.Fatalf("a publisher finished while the consumer was stalled: %v", err)
	default:
	}

	// The consumer acks again: the gate opens and everything arrives.
	got := 0
	for got < publishers*perPub {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatal("deliveries closed")
			}
			must(t, d.Ack(false))
			got++
		case <-ctx.Done():
			t.Fatalf("received %d of %d", got, publishers*perPub)
		}
	}
	for p := 0; p < publishers; p++ {
		must(t, <-errs)
	}
	stopSampling()
	if p := peak(); p > bound {
		t.Errorf("peak backlog %d, want at most the high-water mark %d plus %d in flight", p, hw, publishers*window)
	}
	st := b.srv.FlowStats()
	if st.ThrottledPublishes < publishers || st.ThrottledSeconds <= 0 {
		t.Errorf("flow stats %+v: want at least %d throttled publishes and some throttled time", st, publishers)
	}
	if st.TimedOut != 0 {
		t.Errorf("flow stats %+v: a pause reached FlowMaxWait", st)
	}
	poll.CheckFor(t, 5*time.Second, poll.True("the gate open", func() bool {
		st := b.srv.FlowStats()
		return st.ThrottlingQueues == 0 && st.PausedConnections == 0
	}))
}

// A backlog for absent consumers is the normal case: a queue without
// consumers never throttles its publishers, however deep it gets.
func TestFlowNeverThrottlesAQueueWithoutConsumers(t *testing.T) {
	const n = 2000
	b := startBroker(t, withOptions(flowOptions(50)))
	_, ch := b.channel()
	q, err := ch.QueueDeclare("backlog", true, false, false, false, nil)
	must(t, err)
	// A consumer on another queue must not matter either.
	_, other := b.channel()
	oq, err := other.QueueDeclare("elsewhere", true, false, false, false, nil)
	must(t, err)
	_, err = other.Consume(oq.Name, "", false, false, false, false, nil)
	must(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(t, publishWindow(ctx, ch, q.Name, n, 100))
	if got, _ := b.eng.VisibleHint(q.Name); got != n {
		t.Fatalf("ready = %d, want %d", got, n)
	}
	if st := b.srv.FlowStats(); st != (FlowStats{}) {
		t.Fatalf("flow stats %+v, want none", st)
	}
}

// One connection publishes to and consumes from the same queue, on the
// same channel, with a consumer whose prefetch is far below the backlog:
// its acks must still be read, so the publisher is never paused while a
// delivery is waiting for its ack, and everything completes. (A reader
// paused regardless would wait for FlowMaxWait, here a minute, per
// publish: the test would not finish.)
func TestFlowPublishAndConsumeOnOneConnection(t *testing.T) {
	const n = 3000
	b := startBroker(t, withOptions(flowOptions(50)))
	_, ch := b.channel()
	q, err := ch.QueueDeclare("loop", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Qos(10, 0, false))
	deliveries, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	must(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acked := make(chan int, 1)
	go func() {
		got := 0
		for got < n {
			select {
			case d, ok := <-deliveries:
				if !ok {
					acked <- got
					return
				}
				if d.Ack(false) != nil {
					acked <- got
					return
				}
				got++
			case <-ctx.Done():
				acked <- got
				return
			}
		}
		acked <- got
	}()
	must(t, publishWindow(ctx, ch, q.Name, n, 200))
	if got := <-acked; got != n {
		t.Fatalf("consumed %d of %d", got, n)
	}
	if st := b.srv.FlowStats(); st.TimedOut != 0 {
		t.Fatalf("flow stats %+v: a pause reached FlowMaxWait", st)
	}
}

// stallQueue declares queue name with one consumer that holds prefetch
// deliveries and acks nothing, and starts publishers confirming
// publishers of n messages each (window 20). It returns the consumer's
// channel and tag and the publishers' results.
func stallQueue(t *testing.T, b *broker, name string, publishers, n int) (*amqp091.Channel, string, <-chan error) {
	t.Helper()
	_, cch := b.channel()
	q, err := cch.QueueDeclare(name, true, false, false, false, nil)
	must(t, err)
	must(t, cch.Qos(5, 0, false))
	const tag = "stalled"
	_, err = cch.Consume(q.Name, tag, false, false, false, false, nil)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	errs := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		_, pch := b.channel()
		go func() { errs <- publishWindow(ctx, pch, q.Name, n, 20) }()
	}
	return cch, tag, errs
}

// A queue whose consumer stops taking messages without leaving does not
// stop its publishers: each pause ends at FlowMaxWait (counted as a
// timeout), so every publish still completes, a batch per pause.
func TestFlowPauseIsBounded(t *testing.T) {
	const publishers, n = 2, 400
	o := flowOptions(100)
	o.FlowMaxWait = 20 * time.Millisecond
	b := startBroker(t, withOptions(o))
	_, _, errs := stallQueue(t, b, "stuck", publishers, n)
	for p := 0; p < publishers; p++ {
		must(t, <-errs)
	}
	if got, _ := b.eng.VisibleHint("stuck"); got != publishers*n-5 {
		t.Fatalf("ready = %d, want %d (all but the consumer's prefetch)", got, publishers*n-5)
	}
	if st := b.srv.FlowStats(); st.TimedOut == 0 || st.ThrottledPublishes < st.TimedOut {
		t.Fatalf("flow stats %+v: want pauses that ended at FlowMaxWait", st)
	}
}

// When a throttled queue loses its last consumer it holds nobody back any
// more: the paused publishers resume at once (not at FlowMaxWait, here a
// minute) and the gate is down.
func TestFlowEndsWhenTheLastConsumerLeaves(t *testing.T) {
	const publishers, n = 2, 1000
	b := startBroker(t, withOptions(flowOptions(100)))
	cch, tag, errs := stallQueue(t, b, "abandoned", publishers, n)
	poll.CheckFor(t, 5*time.Second, poll.True("every publisher paused by flow control", func() bool {
		return b.srv.FlowStats().PausedConnections == publishers
	}))
	must(t, cch.Cancel(tag, false))
	for p := 0; p < publishers; p++ {
		must(t, <-errs)
	}
	st := b.srv.FlowStats()
	if st.TimedOut != 0 || st.ThrottlingQueues != 0 {
		t.Fatalf("flow stats %+v: want no pause ended by time and no queue throttling", st)
	}
}

// TestHighWaterCountsEachKindOfConsumer: the high-water mark is
// max(FlowMinBacklog, FlowCreditFactor × Σ credit), where a consumer with a
// prefetch counts its prefetch, one without counts flowUnlimitedCredit and
// a no-ack one counts flowNoAckCredit (it holds no deliveries, so a long
// ready list only adds latency); a queue without consumers is never
// throttled (0).
func TestHighWaterCountsEachKindOfConsumer(t *testing.T) {
	s := &Server{opts: Options{FlowMinBacklog: 10, FlowCreditFactor: 4}, topo: &Topology{}}
	for _, tc := range []struct {
		name      string
		consumers []*consumer
		want      int
	}{
		{"none", nil, 0},
		{"one no-ack", []*consumer{{noAck: true}}, 4 * flowNoAckCredit},
		{"no-ack with a prefetch set", []*consumer{{noAck: true, prefetch: 7}}, 4 * flowNoAckCredit},
		{"prefetch 25", []*consumer{{prefetch: 25}}, 100},
		{"unlimited", []*consumer{{}}, 4 * flowUnlimitedCredit},
		{"small prefetch: the floor", []*consumer{{prefetch: 1}}, 10},
		{"mixed", []*consumer{{noAck: true}, {prefetch: 25}, {}}, 4 * (flowNoAckCredit + 25 + flowUnlimitedCredit)},
	} {
		q := &queue{consumers: map[*consumer]struct{}{}}
		for _, cs := range tc.consumers {
			q.consumers[cs] = struct{}{}
		}
		if got := s.highWater(q); got != tc.want {
			t.Errorf("%s: high water %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Consumers back from an outage find an old backlog: while they shrink it
// the publishers are not held back (the old, depth-only rule would pause
// every publish here until the backlog was down to half the mark, with
// FlowMaxWait a minute: the publisher would not finish). A stalled
// consumer on a queue with an old backlog still throttles its publishers,
// once they have added half a mark above the lowest backlog seen.
func TestFlowSparesPublishersWhileAnOldBacklogDrains(t *testing.T) {
	const (
		old        = 8000
		minBacklog = 2000 // the mark: max(2000, 1 × prefetch)
		prefetch   = 200
		fresh      = 1000
	)
	b := startBroker(t, withOptions(flowOptions(minBacklog)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, pch := b.channel()
	q, err := pch.QueueDeclare("outage", true, false, false, false, nil)
	must(t, err)
	must(t, publishWindow(ctx, pch, q.Name, old, 100)) // nobody consumes: never throttled

	_, cch := b.channel()
	must(t, cch.Qos(prefetch, 0, false))
	deliveries, err := cch.Consume(q.Name, "", false, false, false, false, nil)
	must(t, err)
	consumed := make(chan int, 1)
	go func() {
		got := 0
		for got < old+fresh {
			select {
			case d, ok := <-deliveries:
				if !ok || d.Ack(false) != nil {
					consumed <- got
					return
				}
				got++
			case <-ctx.Done():
				consumed <- got
				return
			}
		}
		consumed <- got
	}()
	// One publish at a time while the consumer drains the old backlog.
	_, pch2 := b.channel() // publishWindow's confirm listener is per call
	must(t, publishWindow(ctx, pch2, q.Name, fresh, 1))
	if got := <-consumed; got != old+fresh {
		t.Fatalf("consumed %d of %d", got, old+fresh)
	}
	if st := b.srv.FlowStats(); st.ThrottledPublishes != 0 {
		t.Fatalf("flow stats %+v: publishers were held back while consumers drained an old backlog", st)
	}

	// A second queue with an old backlog and a consumer that stalls.
	const publishers, window = 2, 20
	_, dch := b.channel()
	sq, err := dch.QueueDeclare("stalled-outage", true, false, false, false, nil)
	must(t, err)
	_, pch3 := b.channel()
	must(t, publishWindow(ctx, pch3, sq.Name, 3000, 100))
	must(t, dch.Qos(5, 0, false))
	_, err = dch.Consume(sq.Name, "stalled", false, false, false, false, nil)
	must(t, err)
	poll.CheckFor(t, 5*time.Second, poll.True("the stalled consumer's prefetch taken", func() bool {
		n, _ := b.eng.VisibleHint(sq.Name)
		return n == 3000-5
	}))
	errs := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		_, ch := b.channel()
		go func() { errs <- publishWindow(ctx, ch, sq.Name, 1500, window) }()
	}
	poll.CheckFor(t, 10*time.Second, poll.True("every publisher paused by flow control", func() bool {
		return b.srv.FlowStats().PausedConnections == publishers
	}))
	// The floor is the first backlog seen with the consumer there: 2,995
	// plus at most the first batch routed.
	over := 3000 - 5 + minBacklog/2
	if n, _ := b.eng.VisibleHint(sq.Name); n <= over || n > over+2*publishers*window {
		t.Fatalf("ready while paused = %d, want over %d (floor + half the mark) and at most %d", n, over, over+2*publishers*window)
	}
	must(t, dch.Cancel("stalled", false)) // no consumer: nobody is held back
	for p := 0; p < publishers; p++ {
		must(t, <-errs)
	}
}
