package amqp

import (
	"context"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// broker is a real Sluice AMQP listener on 127.0.0.1:0 over an engine on
// a memstore, which restart closes and reopens with the same store.
type broker struct {
	t    testing.TB
	st   *memstore.Store
	clk  clock.Clock
	fake *clock.Fake
	opts Options
	// window is the engine's Options.ReadyWindow (0: its default).
	window int
	// wrap, if set, wraps the store the engine opens (to watch writes).
	wrap func(store.Store) store.Store
	eng  *engine.Engine
	srv  *Server
	ln   net.Listener
	url  string
	errc chan error
}

type brokerOpt func(*broker)

func withFakeClock() brokerOpt {
	return func(b *broker) {
		b.fake = clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		b.clk = b.fake
	}
}

func withOptions(o Options) brokerOpt { return func(b *broker) { b.opts = o } }

// withReadyWindow opens the engine with a ready window of n messages, so a
// queue's backlog beyond it stays only in the store.
func withReadyWindow(n int) brokerOpt { return func(b *broker) { b.window = n } }

// withStoreWrapper opens the engine on wrap(the memstore).
func withStoreWrapper(wrap func(store.Store) store.Store) brokerOpt {
	return func(b *broker) { b.wrap = wrap }
}

func startBroker(t testing.TB, opts ...brokerOpt) *broker {
	t.Helper()
	b := &broker{t: t, st: memstore.New(), clk: clock.Real{}}
	for _, o := range opts {
		o(b)
	}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *broker) start() {
	b.t.Helper()
	topo := NewTopology()
	var st store.Store = b.st
	if b.wrap != nil {
		st = b.wrap(st)
	}
	eng, err := engine.Open(engine.Options{Store: st, Clock: b.clk, DeadLetterRouter: topo, ReadyWindow: b.window})
	if err != nil {
		b.t.Fatal(err)
	}
	o := b.opts
	o.Clock = b.clk
	srv, err := New(eng, topo, o)
	if err != nil {
		b.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.t.Fatal(err)
	}
	b.eng, b.srv, b.ln = eng, srv, ln
	b.url = "amqp://guest:guest@" + ln.Addr().String() + "/"
	b.errc = make(chan error, 1)
	go func() { b.errc <- srv.Serve(ln) }()
}

func (b *broker) stop() {
	if b.srv == nil {
		return
	}
	b.srv.Close()
	if err := <-b.errc; err != nil {
		b.t.Errorf("Serve: %v", err)
	}
	b.eng.Close()
	b.srv = nil
}

// restart closes server and engine and opens both again over the same
// store.
func (b *broker) restart() {
	b.stop()
	b.start()
}

// records counts the topology records of namespace ns in the store.
func (b *broker) records(ns string) int {
	b.t.Helper()
	n := 0
	if err := b.eng.ScanMeta(ns, func(string, []byte) error { n++; return nil }); err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *broker) dial() *amqp091.Connection {
	b.t.Helper()
	c, err := amqp091.Dial(b.url)
	if err != nil {
		b.t.Fatalf("dial: %v", err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

// failureChannel is channel on a connection that opts in to the
// failure-report headers for all its deliveries (the client property
// x-sluice-failure-headers).
func (b *broker) failureChannel() (*amqp091.Connection, *amqp091.Channel) {
	b.t.Helper()
	c, err := amqp091.DialConfig(b.url, amqp091.Config{Properties: amqp091.Table{optFailureHeaders: true}})
	if err != nil {
		b.t.Fatalf("dial: %v", err)
	}
	b.t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		b.t.Fatalf("channel: %v", err)
	}
	return c, ch
}

func (b *broker) channel() (*amqp091.Connection, *amqp091.Channel) {
	b.t.Helper()
	c := b.dial()
	ch, err := c.Channel()
	if err != nil {
		b.t.Fatalf("channel: %v", err)
	}
	return c, ch
}

// advance moves the fake clock forward by d in ten steps. Before each step
// and after the last it waits until at least parked timers wait on the
// clock: parked is how many the broker holds when it is idle (the engine's
// scheduler while a queue holds a message, a consumer's wait for
// deliveries, the x-expires sweeper while such a queue exists). So every
// step finds the scheduler and the consumers done with the previous one,
// and when advance returns the broker has acted on the new time.
func (b *broker) advance(d time.Duration, parked int) {
	b.t.Helper()
	step := d / 10
	if step == 0 {
		step = d
	}
	for moved := time.Duration(0); moved < d; moved += step {
		poll.Parked(b.t, b.fake, parked)
		b.fake.Advance(min(step, d-moved))
	}
	poll.Parked(b.t, b.fake, parked)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, c <-chan amqp091.Delivery) amqp091.Delivery {
	t.Helper()
	select {
	case d, ok := <-c:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5s")
	}
	return amqp091.Delivery{}
}

func noDelivery(t *testing.T, c <-chan amqp091.Delivery, wait time.Duration) {
	t.Helper()
	select {
	case d := <-c:
		t.Fatalf("unexpected delivery %q", d.Body)
	case <-time.After(wait):
	}
}

func publish(t *testing.T, ch *amqp091.Channel, exchange, key string, body string) {
	t.Helper()
	must(t, ch.PublishWithContext(context.Background(), exchange, key, false, false, amqp091.Publishing{Body: []byte(body)}))
}

// getBody polls basic.get until a message arrives.
func getOne(t *testing.T, ch *amqp091.Channel, q string) amqp091.Delivery {
	t.Helper()
	var d amqp091.Delivery
	poll.CheckFor(t, 5*time.Second, poll.True("a message on "+q, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(q, false)
		must(t, err)
		return ok
	}))
	return d
}

func amqpErr(t *testing.T, err error) *amqp091.Error {
	t.Helper()
	e, ok := err.(*amqp091.Error)
	if !ok {
		t.Fatalf("error %v (%T) is not an *amqp091.Error", err, err)
	}
	return e
}

// inspect is a passive queue.declare (amqp091-go deprecates QueueInspect).
func inspect(ch *amqp091.Channel, q string) (amqp091.Queue, error) {
	return ch.QueueDeclarePassive(q, false, false, false, false, nil)
}
