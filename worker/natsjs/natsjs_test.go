package natsjs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/natsjs"
	"github.com/sluicemq/sluice/worker/workertest"
)

// startNATS runs an embedded nats-server with JetStream (file storage in
// a temporary directory) on 127.0.0.1 and a random port.
func startNATS(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

type harness struct {
	url string
	js  jetstream.JetStream
	cfg workertest.Config
}

func newHarness(t *testing.T, cfg workertest.Config) *harness {
	url := startNATS(t)
	_, js := connect(t, url)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"},
		Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	return &harness{url: url, js: js, cfg: cfg}
}

func (h *harness) Publish(t testing.TB, bodies ...string) {
	for _, b := range bodies {
		m := nats.NewMsg("orders.new")
		m.Data = []byte(b)
		m.Header.Set("kind", "order")
		if _, err := h.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) Source(t testing.TB) (worker.Source, func()) {
	nc, js := connect(t, h.url)
	src, err := natsjs.NewSource(context.Background(), js, natsjs.Options{Stream: "ORDERS", Consumer: "billing",
		MaxAttempts: h.cfg.MaxAttempts, AckWait: 2 * time.Second, FetchWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, crash := workertest.Crashable(src)
	return s, func() { crash(); nc.Close() }
}

func (h *harness) DeadLetters(t testing.TB) []dlq.Entry {
	es, _, err := natsjs.NewDLQ(h.js, "ORDERS_DLQ", "").List(context.Background(), "", 10000)
	if err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
	return es
}

func isNotFound(err error) bool { return err == jetstream.ErrStreamNotFound }

func (h *harness) Redrive(t testing.TB, o dlq.Options) (dlq.Report, error) {
	return dlq.Redrive(context.Background(), natsjs.NewDLQ(h.js, "ORDERS_DLQ", ""), o)
}

func TestConformance(t *testing.T) {
	workertest.Run(t, func(t *testing.T, cfg workertest.Config) workertest.Harness { return newHarness(t, cfg) })
}

// A worker that dies on the last attempt leaves the delivery MaxDeliver
// keeps in reserve; the next Receive dead-letters it without handling it.
func TestDiedOnLastAttempt(t *testing.T) {
	h := newHarness(t, workertest.Config{MaxAttempts: 2})
	h.Publish(t, "stuck-0")
	ctx := context.Background()
	src, crash := h.Source(t)
	var ms []*worker.Message
	receive := func(src worker.Source) func() bool {
		return func() bool {
			var err error
			ms, err = src.Receive(ctx, 1)
			if err != nil {
				t.Log(err)
			}
			return err == nil && len(ms) == 1
		}
	}
	workertest.WaitFor(t, 10*time.Second, "attempt 1", receive(src))
	if _, err := src.Fail(ctx, ms[0], worker.Failure{Backoff: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	workertest.WaitFor(t, 10*time.Second, "attempt 2", receive(src))
	if ms[0].Attempt != 2 {
		t.Fatalf("attempt %d", ms[0].Attempt)
	}
	crash() // dies on its last attempt
	src2, _ := h.Source(t)
	workertest.WaitFor(t, 20*time.Second, "dead-lettered on receipt", func() bool {
		if _, err := src2.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return len(h.DeadLetters(t)) == 1
	})
	e := h.DeadLetters(t)[0]
	if e.Context.Reason != dlq.ReasonOverLimit || e.Context.Attempts != 3 || e.Key != "orders.new" || e.Attributes["kind"] != "order" {
		t.Fatalf("%+v", e)
	}
}

// When every worker dies on both the last attempt and the spare
// delivery, the server stops at MaxDeliver and says so in an advisory;
// MoveMaxDelivered dead-letters the message from it.
func TestMoveMaxDelivered(t *testing.T) {
	h := newHarness(t, workertest.Config{MaxAttempts: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, js := connect(t, h.url)
	o := natsjs.Options{Stream: "ORDERS", Consumer: "billing", MaxAttempts: 1, AckWait: 500 * time.Millisecond}
	if _, err := natsjs.NewSource(ctx, js, o); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- natsjs.MoveMaxDelivered(ctx, nc, js, o) }()
	h.Publish(t, "crashes-everything")
	// Two deliveries (MaxDeliver = 2) taken by consumers that die: no
	// ack, no nak, the lease runs out each time.
	cons, err := js.Consumer(ctx, "ORDERS", "billing")
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < 2; {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range b.Messages() {
			got++
		}
	}
	// The server notices the limit when it next looks for a message for
	// a pull (a live worker is always pulling).
	workertest.WaitFor(t, 20*time.Second, "the advisory mover's dead letter", func() bool {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			t.Fatalf("delivered past MaxDeliver: %s", m.Data())
		}
		return len(h.DeadLetters(t)) == 1
	})
	e := h.DeadLetters(t)[0]
	if string(e.Body) != "crashes-everything" || e.Context.Reason != dlq.ReasonOverLimit || e.Context.Attempts != 2 || e.Key != "orders.new" {
		t.Fatalf("%+v", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BackOff becomes the consumer's redelivery schedule, and each delivery's
// lease follows it.
func TestBackOffSchedule(t *testing.T) {
	h := newHarness(t, workertest.Config{MaxAttempts: 3})
	ctx := context.Background()
	o := natsjs.Options{Stream: "ORDERS", Consumer: "billing", MaxAttempts: 3, FetchWait: 200 * time.Millisecond,
		BackOff: []time.Duration{time.Second, 2 * time.Second}}
	src, err := natsjs.NewSource(ctx, h.js, o)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := h.js.Consumer(ctx, "ORDERS", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config; fmt.Sprint(got.BackOff) != "[1s 2s]" || got.MaxDeliver != 4 {
		t.Fatalf("consumer config %+v", got)
	}
	h.Publish(t, "x")
	var ms []*worker.Message
	workertest.WaitFor(t, 10*time.Second, "a delivery", func() bool { ms, _ = src.Receive(ctx, 1); return len(ms) == 1 })
	if ms[0].Lease != time.Second {
		t.Fatalf("lease %v", ms[0].Lease)
	}
	o.BackOff = []time.Duration{1, 2, 3, 4, 5}
	if _, err := natsjs.NewSource(ctx, h.js, o); err == nil {
		t.Fatal("a BackOff longer than MaxDeliver was accepted")
	}
}
