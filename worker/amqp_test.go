package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/worker"
)

// amqpBroker is a real Sluice with an AMQP connection to it.
type amqpBroker struct {
	*broker
	conn *amqp.Connection
	ch   *amqp.Channel // for declares, publishes and gets
}

func startAMQPBroker(t *testing.T) *amqpBroker {
	t.Helper()
	b := startBroker(t)
	conn := b.dial()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return &amqpBroker{broker: b, conn: conn, ch: ch}
}

func (b *broker) dial() *amqp.Connection {
	b.t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@" + b.amqpAddr + "/")
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { conn.Close() })
	return conn
}

// declare makes name, a quorum queue with x-delivery-limit deliveryLimit
// (when ≥ 0) whose dead-letter exchange name+".dlx" routes to name+"-dlq".
func (b *amqpBroker) declare(name string, deliveryLimit int) {
	b.t.Helper()
	dlx, dlq := name+".dlx", name+"-dlq"
	if err := b.ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		b.t.Fatal(err)
	}
	if err := b.ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		b.t.Fatal(err)
	}
	args := amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": dlx}
	if deliveryLimit >= 0 {
		args["x-delivery-limit"] = int64(deliveryLimit)
	}
	if _, err := b.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		b.t.Fatal(err)
	}
}

// publish sends bodies to queue through the default exchange, confirmed.
func (b *amqpBroker) publish(queue string, bodies ...string) {
	b.t.Helper()
	for i, body := range bodies {
		c, err := b.ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, amqp.Publishing{
			MessageId: fmt.Sprintf("%s-%d-%s", queue, i, body), Body: []byte(body), DeliveryMode: amqp.Persistent, Timestamp: time.Now(),
		})
		if err != nil {
			b.t.Fatal(err)
		}
		if ok, err := c.WaitContext(context.Background()); err != nil || !ok {
			b.t.Fatalf("publish %q not confirmed: %v", body, err)
		}
	}
}

// count is the number of ready messages in queue (a passive declare).
func (b *amqpBroker) count(queue string) int {
	b.t.Helper()
	q, err := b.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return q.Messages
}

// getAll takes every ready message of queue with basic.get (acked).
func (b *amqpBroker) getAll(queue string) []amqp.Delivery {
	b.t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := b.ch.Get(queue, true)
		if err != nil {
			b.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// amqpSource returns an AMQPSource on its own connection, closed at the
// end of the test.
func (b *amqpBroker) source(queue string, o worker.AMQPSourceOptions) *worker.AMQPSource {
	b.t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(b.t)
	}
	s, err := worker.NewAMQPSource(b.dial(), queue, o)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { s.Close() })
	return s
}

// firstDeath is the newest x-death entry of a dead-lettered delivery.
func firstDeath(t *testing.T, d amqp.Delivery) amqp.Table {
	t.Helper()
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		t.Fatalf("no x-death on %q: %v", d.Body, d.Headers)
	}
	e, _ := deaths[0].(amqp.Table)
	return e
}

// attempts records the attempts a handler saw per body.
type attempts struct {
	mu sync.Mutex
	m  map[string][]int
}

func (a *attempts) add(m *worker.Message) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string][]int{}
	}
	a.m[string(m.Body)] = append(a.m[string(m.Body)], m.Attempt)
	return len(a.m[string(m.Body)])
}

func (a *attempts) of(body string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.m[body]...)
}

// Plain AMQP (extension off): a terminal failure is basic.reject(requeue=
// false), which the queue's dead-letter exchange routes to the DLQ with
// x-death reason "rejected", on the first attempt.
func TestAMQPPlainTerminalRejectsToDLX(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	b.publish("orders", "ok", "poison", "ok2")
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff, HasDeadLetterExchange: true})
	var seen attempts
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		seen.add(m)
		if string(m.Body) == "poison" {
			return worker.Terminal(errors.New("cannot parse order"))
		}
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 10*time.Second, "poison dead-lettered", func() bool { return b.count("orders-dlq") == 1 })
	waitFor(t, 10*time.Second, "two processed", func() bool { return w.Stats().Processed == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := b.getAll("orders-dlq")
	if len(got) != 1 || string(got[0].Body) != "poison" {
		t.Fatalf("dlq: %v", got)
	}
	d := firstDeath(t, got[0])
	if d["reason"] != "rejected" || d["queue"] != "orders" || d["count"] != int64(1) {
		t.Errorf("x-death %v", d)
	}
	if a := seen.of("poison"); len(a) != 1 || a[0] != 1 {
		t.Errorf("poison attempts %v, want [1]", a)
	}
	if st := w.Stats(); st.Terminal != 1 || st.DeadLettered != 1 {
		t.Errorf("stats %+v", st)
	}
	if n := b.count("orders"); n != 0 {
		t.Errorf("%d messages left in orders", n)
	}
}

// Without HasDeadLetterExchange a terminal failure is never a reject (a
// queue without a DLX would drop it): the worker holds it for its longest
// backoff and it comes back.
func TestAMQPPlainTerminalWithoutDLXKeepsMessage(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", -1)
	b.publish("orders", "poison-once")
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff})
	var seen attempts
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		if seen.add(m) == 1 {
			return worker.Terminal(errors.New("looks poisonous"))
		}
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 10*time.Second, "redelivered and processed", func() bool { return w.Stats().Processed == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a := seen.of("poison-once"); len(a) != 2 || a[0] != 1 || a[1] != 2 {
		t.Errorf("attempts %v, want [1 2]", a)
	}
	if n := b.count("orders-dlq"); n != 0 {
		t.Errorf("%d messages in the DLQ", n)
	}
}

// Plain AMQP: transient failures are held for the backoff and nacked back;
// the attempt count comes from x-delivery-count.
func TestAMQPPlainTransientRecovers(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	b.publish("orders", "flaky")
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff, HasDeadLetterExchange: true})
	var seen attempts
	var maxHeld atomic.Int64
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		if seen.add(m) < 3 {
			return worker.Transient(errors.New("payments API: timeout"))
		}
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 10*time.Second, "processed", func() bool {
		if h := int64(src.Held()); h > maxHeld.Load() {
			maxHeld.Store(h)
		}
		return w.Stats().Processed == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a := seen.of("flaky"); len(a) != 3 || a[0] != 1 || a[1] != 2 || a[2] != 3 {
		t.Errorf("attempts %v, want [1 2 3]", a)
	}
	if st := w.Stats(); st.Retried != 2 || st.DeadLettered != 0 {
		t.Errorf("stats %+v", st)
	}
	if n := b.count("orders-dlq") + b.count("orders"); n != 0 {
		t.Errorf("%d messages left", n)
	}
	t.Logf("most deliveries held at once for a backoff: %d", maxHeld.Load())
}

// Plain AMQP: a message that always fails transiently is dead-lettered by
// the broker when its nacks exceed x-delivery-limit.
func TestAMQPPlainPoisonReachesDLQAtDeliveryLimit(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 2) // 3 deliveries
	b.publish("orders", "poison")
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff, HasDeadLetterExchange: true})
	var seen attempts
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		seen.add(m)
		return errors.New("lookup customer c-404: no such customer")
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 15*time.Second, "poison dead-lettered", func() bool { return b.count("orders-dlq") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a := seen.of("poison"); len(a) != 3 || a[2] != 3 {
		t.Errorf("attempts %v, want [1 2 3]", a)
	}
	got := b.getAll("orders-dlq")
	if len(got) != 1 {
		t.Fatalf("dlq: %v", got)
	}
	if d := firstDeath(t, got[0]); d["reason"] != "delivery_limit" || d["queue"] != "orders" {
		t.Errorf("x-death %v", d)
	}
}

// A handler slower than any lease is not redelivered to a second consumer:
// AMQP has no lease, the delivery is held until the ack.
func TestAMQPSlowHandlerNotRedelivered(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	var calls atomic.Int32
	h := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		calls.Add(1)
		if m.Lease != 0 {
			t.Errorf("lease %v, want 0", m.Lease)
		}
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return nil
	})
	var ws []*worker.Worker
	for range 2 {
		w, err := worker.New(b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff}), h, fastOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		run(t, w)
		ws = append(ws, w)
	}
	b.publish("orders", "slow")
	waitFor(t, 10*time.Second, "processed", func() bool { return ws[0].Stats().Processed+ws[1].Stats().Processed == 1 })
	// Give a wrong redelivery the time to show up.
	waitFor(t, 5*time.Second, "queue empty", func() bool { return b.count("orders") == 0 })
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// Shutdown in the middle of a backlog, with deliveries in handlers, held
// for a backoff and buffered by the prefetch: every message is either
// processed or back in the queue.
func TestAMQPShutdownLosesNothing(t *testing.T) {
	for _, mode := range []worker.ExtensionMode{worker.ExtensionOff, worker.ExtensionAuto} {
		t.Run(mode.String(), func(t *testing.T) {
			b := startAMQPBroker(t)
			b.declare("orders", -1)
			const sent = 60
			bodies := make([]string, sent)
			for i := range bodies {
				bodies[i] = strconv.Itoa(i)
			}
			b.publish("orders", bodies...)
			src := b.source("orders", worker.AMQPSourceOptions{Extension: mode, HTTPEndpoint: "http://" + b.addr, Prefetch: 12})
			var mu sync.Mutex
			done := map[string]int{}
			var seen attempts
			o := fastOptions(t)
			o.Concurrency = 4
			o.Backoff = worker.Backoff{Base: 2 * time.Second, Cap: 2 * time.Second}
			w, err := worker.New(src, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if seen.add(m) == 1 && len(m.Body)%2 == 0 {
					return worker.Transient(errors.New("try again"))
				}
				select {
				case <-time.After(30 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
				mu.Lock()
				done[string(m.Body)]++
				mu.Unlock()
				return nil
			}), o)
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, w)
			waitFor(t, 10*time.Second, "some processed", func() bool { return w.Stats().Processed >= 10 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			held := src.Held()
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			// Messages whose failure was reported come back after their
			// retry delay (at most 2 s); the rest are back at once.
			var rest []amqp.Delivery
			deadline := time.Now().Add(10 * time.Second)
			for len(done)+len(rest) < sent && time.Now().Before(deadline) {
				rest = append(rest, b.getAll("orders")...)
				time.Sleep(20 * time.Millisecond)
			}
			for _, d := range rest {
				if done[string(d.Body)] > 0 {
					t.Errorf("message %s processed and still queued", d.Body)
				}
			}
			for body, n := range done {
				if n != 1 {
					t.Errorf("message %s processed %d times", body, n)
				}
			}
			if len(done)+len(rest) != sent {
				t.Errorf("processed %d + remaining %d != sent %d", len(done), len(rest), sent)
			}
			t.Logf("processed %d, remaining %d, held at shutdown %d", len(done), len(rest), held)
		})
	}
}

// Close stops Receive with a Terminal error; so does a closed connection,
// which names ErrConnectionClosed.
func TestAMQPConnectionClosedStopsWorker(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", -1)
	conn := b.dial()
	src, err := worker.NewAMQPSource(conn, "orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(src, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	b.publish("orders", "one")
	waitFor(t, 10*time.Second, "processed", func() bool { return w.Stats().Processed == 1 })
	conn.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, worker.ErrConnectionClosed) || !errors.Is(err, worker.ErrTerminal) {
			t.Errorf("Run returned %v, want a terminal ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop after the connection closed")
	}
	if err := src.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A channel error (here an ack of an unknown delivery tag, made through
// the delivery's own channel) closes the channel and requeues its
// deliveries; the source opens a new channel and the message comes back.
func TestAMQPChannelLossReopens(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", -1)
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff})
	var seen attempts
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		if seen.add(m) == 1 {
			d := m.Raw.(amqp.Delivery)
			d.Acknowledger.Ack(d.DeliveryTag+1000, false) // 406 PRECONDITION_FAILED closes the channel
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	b.publish("orders", "one")
	waitFor(t, 10*time.Second, "processed on a new channel", func() bool { return w.Stats().Processed == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a := seen.of("one"); len(a) != 2 || a[1] != 2 {
		t.Errorf("attempts %v, want [1 2]", a)
	}
	if n := b.count("orders"); n != 0 {
		t.Errorf("%d messages left", n)
	}
}

// A queue deleted under the consumer stops the worker with a Terminal
// error (the broker cancels the consumer; consuming again gets 404).
func TestAMQPQueueDeletedStopsWorker(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", -1)
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff})
	w, err := worker.New(src, worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	b.publish("orders", "one")
	waitFor(t, 10*time.Second, "processed", func() bool { return w.Stats().Processed == 1 })
	if _, err := b.ch.QueueDelete("orders", false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, worker.ErrTerminal) {
			t.Errorf("Run returned %v, want a terminal error", err)
		}
		t.Logf("Run returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop after the queue was deleted")
	}
}

// orderError is a handler's own error type with an error class.
type orderError struct{ reason string }

func (e *orderError) Error() string      { return "order: " + e.reason }
func (e *orderError) ErrorClass() string { return "OrderError" }

// extSource is an AMQPSource using the Sluice failure-report extension.
func (b *amqpBroker) extSource(queue string) *worker.AMQPSource {
	return b.source(queue, worker.AMQPSourceOptions{HTTPEndpoint: "http://" + b.addr})
}

// lastFailure is the failure context the admin API shows for the only
// message of queue.
func (b *amqpBroker) lastFailure(queue string) map[string]any {
	b.t.Helper()
	msgs := b.browse(queue)
	if len(msgs) != 1 {
		b.t.Fatalf("browse %s: %v", queue, msgs)
	}
	lf, _ := msgs[0]["lastFailure"].(map[string]any)
	return lf
}

// With the extension a terminal failure is dead-lettered on attempt 1
// with its error class, message, trace and consumer, through the queue's
// dead-letter exchange.
func TestAMQPExtensionTerminalDeadLettersWithContext(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	b.publish("orders", "ok", "poison")
	var seen attempts
	w, err := worker.New(b.extSource("orders"), worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		seen.add(m)
		if _, leaked := m.Attributes["x-sluice-receipt"]; leaked {
			t.Errorf("broker header in Attributes: %v", m.Attributes)
		}
		if string(m.Body) == "poison" {
			return worker.Terminal(&orderError{"customer: required"})
		}
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 10*time.Second, "poison dead-lettered", func() bool { return w.Stats().DeadLettered == 1 && w.Stats().Processed == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	lf := b.lastFailure("orders-dlq")
	if lf["errorClass"] != "OrderError" || lf["message"] != "order: customer: required" ||
		lf["consumerVersion"] != "test-1.0" || lf["consumerId"] == "" || lf["trace"] == "" {
		t.Errorf("last failure %v", lf)
	}
	got := b.getAll("orders-dlq")
	if len(got) != 1 || string(got[0].Body) != "poison" {
		t.Fatalf("dlq: %v", got)
	}
	if d := firstDeath(t, got[0]); d["reason"] != "rejected" || d["queue"] != "orders" {
		t.Errorf("x-death %v", d)
	}
	if a := seen.of("poison"); len(a) != 1 || a[0] != 1 {
		t.Errorf("poison attempts %v, want [1]", a)
	}
	if n := b.count("orders"); n != 0 {
		t.Errorf("%d messages left in orders", n)
	}
}

// With the extension a transient failure ends the delivery at once (no
// prefetch slot held) and the broker delivers it again after the backoff.
func TestAMQPExtensionTransientRecovers(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	b.publish("orders", "flaky")
	src := b.extSource("orders")
	var seen attempts
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		if seen.add(m) < 3 {
			return worker.Transient(errors.New("payments API: timeout"))
		}
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 10*time.Second, "processed", func() bool {
		if src.Held() != 0 {
			t.Errorf("%d deliveries held with the extension", src.Held())
		}
		return w.Stats().Processed == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a := seen.of("flaky"); len(a) != 3 || a[0] != 1 || a[1] != 2 || a[2] != 3 {
		t.Errorf("attempts %v, want [1 2 3]", a)
	}
	if st := w.Stats(); st.Retried != 2 || st.DeadLettered != 0 {
		t.Errorf("stats %+v", st)
	}
	if n := len(b.browse("orders")) + len(b.browse("orders-dlq")); n != 0 {
		t.Errorf("%d messages left", n)
	}
}

// With the extension an unclassified failure on the last delivery the
// queue's x-delivery-limit allows is dead-lettered by the report, with
// the context of that last failure.
func TestAMQPExtensionPoisonReachesDLQAtDeliveryLimit(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 2) // 3 deliveries
	b.publish("orders", "poison")
	var seen attempts
	w, err := worker.New(b.extSource("orders"), worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		seen.add(m)
		return errors.New("lookup customer c-404: no such customer")
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	waitFor(t, 15*time.Second, "poison dead-lettered", func() bool { return w.Stats().DeadLettered == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a := seen.of("poison"); len(a) != 3 || a[2] != 3 {
		t.Errorf("attempts %v, want [1 2 3]", a)
	}
	lf := b.lastFailure("orders-dlq")
	if lf["errorClass"] != "lookup customer c-N: no such customer" || lf["message"] != "lookup customer c-404: no such customer" {
		t.Errorf("last failure %v", lf)
	}
	got := b.getAll("orders-dlq")
	if len(got) != 1 {
		t.Fatalf("dlq: %v", got)
	}
	if d := firstDeath(t, got[0]); d["reason"] != "delivery_limit" || d["queue"] != "orders" {
		t.Errorf("x-death %v", d)
	}
}

// ExtensionAuto against an endpoint without the extension (a 404) falls
// back to plain AMQP for that message and stops asking.
func TestAMQPExtensionAbsentFallsBack(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	var posts atomic.Int32
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.NotFound(w, r)
	}))
	defer fake.Close()
	src := b.source("orders", worker.AMQPSourceOptions{HTTPEndpoint: fake.URL, HasDeadLetterExchange: true})
	w, err := worker.New(src, worker.HandlerFunc(func(context.Context, *worker.Message) error {
		return worker.Terminal(errors.New("bad order"))
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	b.publish("orders", "poison-1")
	waitFor(t, 10*time.Second, "first dead-lettered", func() bool { return b.count("orders-dlq") == 1 })
	b.publish("orders", "poison-2")
	waitFor(t, 10*time.Second, "second dead-lettered", func() bool { return b.count("orders-dlq") == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("%d reports to the endpoint without the extension, want 1", n)
	}
	for _, d := range b.getAll("orders-dlq") {
		if e := firstDeath(t, d); e["reason"] != "rejected" {
			t.Errorf("x-death %v", e)
		}
	}
}

// A redriven message keeps its idempotency key over AMQP (DLQ-100): the
// worker sets OriginalID from the x-sluice-original-message-id header, to
// the publisher's message-id when there is one (it survives the redrive),
// else to Sluice's id of the original message.
func TestAMQPRedriveSetsOriginalID(t *testing.T) {
	b := startAMQPBroker(t)
	b.declare("orders", 5)
	b.publish("orders", "with-id")
	if err := b.ch.Publish("", "orders", false, false, amqp.Publishing{Body: []byte("without-id")}); err != nil {
		t.Fatal(err)
	}
	var redriven atomic.Bool
	var got sync.Map // body → OriginalID
	src := b.source("orders", worker.AMQPSourceOptions{Extension: worker.ExtensionOff, HasDeadLetterExchange: true})
	w, err := worker.New(src, worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
		if !redriven.Load() {
			if m.OriginalID != "" {
				t.Errorf("OriginalID %q before any redrive", m.OriginalID)
			}
			return worker.Terminal(errors.New("bug"))
		}
		got.Store(string(m.Body), m.OriginalID)
		return nil
	}), fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	waitFor(t, 10*time.Second, "both dead-lettered", func() bool { return b.count("orders-dlq") == 2 })

	// The fix ships; the operator redrives through the admin API (the
	// broker is another process): a dead-letter exchange's target is a
	// DLQ, and each message goes back to the queue its x-death names.
	redriven.Store(true)
	b.admin("/sluice/v1/queues/orders-dlq/redrive", `{"destination":"orders","rate":500}`)
	waitFor(t, 10*time.Second, "both processed after the redrive", func() bool {
		_, a := got.Load("with-id")
		_, c := got.Load("without-id")
		return a && c
	})
	if v, _ := got.Load("with-id"); v != "orders-0-with-id" {
		t.Errorf("OriginalID with a message-id: %q", v)
	}
	if v, _ := got.Load("without-id"); v == "" || len(v.(string)) != 36 {
		t.Errorf("OriginalID without a message-id: %q, want Sluice's original id", v)
	}
}
