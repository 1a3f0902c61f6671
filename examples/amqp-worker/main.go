// Command amqp-worker is examples/worker over AMQP 0-9-1: it declares a
// queue with a dead-letter exchange and a delivery limit, optionally
// publishes orders (a few of them poison), and consumes them with
// worker.NewAMQPSource. Against Sluice it reports failures through the
// failure-report extension, so the dead-letter queue says why; against
// RabbitMQ (or with -plain) it falls back to plain AMQP. See
// docs/worker.md.
//
//	go -C examples run ./amqp-worker -publish 12 -poison 2   # the buggy version
//	go -C examples run ./amqp-worker -fixed                  # after the fix
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dedup"
)

type config struct {
	url, httpEndpoint, queue string
	plain                    bool
	deliveryLimit            int
	publish, poison          int
	concurrency              int
	flaky                    float64
	work                     time.Duration
	fixed                    bool
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URL (a `sluice server`, or RabbitMQ)")
	flag.StringVar(&c.httpEndpoint, "http", "http://127.0.0.1:9324", "Sluice HTTP endpoint for failure reports; \"\" for none")
	flag.StringVar(&c.queue, "queue", "orders-amqp", "queue to consume (with <queue>.dlx and <queue>-dlq)")
	flag.BoolVar(&c.plain, "plain", false, "plain AMQP: no failure-report extension")
	flag.IntVar(&c.deliveryLimit, "delivery-limit", 2, "x-delivery-limit of the queue: dead-letter after this many redeliveries")
	flag.IntVar(&c.publish, "publish", 0, "publish this many orders first")
	flag.IntVar(&c.poison, "poison", 2, "of which poison")
	flag.IntVar(&c.concurrency, "concurrency", 4, "handlers running at once")
	flag.Float64Var(&c.flaky, "flaky", 0.1, "share of calls to the payments API that time out (transient failures)")
	flag.DurationVar(&c.work, "work", 200*time.Millisecond, "time each order takes")
	flag.BoolVar(&c.fixed, "fixed", false, "run the fixed handler (guest checkout, customers created on demand)")
	verbose := flag.Bool("v", false, "debug logs")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, c); err != nil {
		log.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

// run consumes until ctx ends, reconnecting when the connection is lost:
// AMQPSource stops the worker with worker.ErrConnectionClosed and leaves
// reconnecting to its caller.
func run(ctx context.Context, log *slog.Logger, c config) error {
	opts := worker.DefaultOptions()
	opts.Concurrency = c.concurrency
	opts.Logger = log
	opts.Deduper = dedup.NewMemory(24 * time.Hour) // keyed by the message-id property
	opts.Version = "orders-worker-1.0"
	if c.fixed {
		opts.Version = "orders-worker-1.1"
	}
	h := &handler{flaky: c.flaky, work: c.work, fixed: c.fixed}
	first := true
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		err := session(ctx, log, c, opts, h, first)
		first = false
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, worker.ErrConnectionClosed) && !errors.Is(err, errDial) {
			return err
		}
		log.Warn("connection lost; reconnecting", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

var errDial = errors.New("dial")

// session is one connection: declare, publish (the first time), consume.
func session(ctx context.Context, log *slog.Logger, c config, opts worker.Options, h *handler, first bool) error {
	conn, err := amqp.Dial(c.url)
	if err != nil {
		return fmt.Errorf("%w: %w", errDial, err)
	}
	defer conn.Close()
	if err := declare(conn, c); err != nil {
		return err
	}
	if first && c.publish > 0 {
		if err := publish(ctx, conn, c); err != nil {
			return err
		}
	}
	so := worker.AMQPSourceOptions{
		Prefetch:              2 * c.concurrency, // room for deliveries held for a backoff without the extension
		HTTPEndpoint:          c.httpEndpoint,
		HasDeadLetterExchange: true, // declare gave the queue one
		Logger:                log,
	}
	if c.plain {
		so.Extension = worker.ExtensionOff
	}
	src, err := worker.NewAMQPSource(conn, c.queue, so)
	if err != nil {
		return err
	}
	defer src.Close()
	w, err := worker.New(src, h, opts)
	if err != nil {
		return err
	}
	fmt.Printf("consuming %s with %d handlers (version %s); Ctrl-C to stop\n", c.queue, c.concurrency, opts.Version)
	err = w.Run(ctx)
	st := w.Stats()
	fmt.Printf("\nprocessed %d, failed %d (terminal %d), retried %d, dead-lettered %d, duplicates %d, released %d\n",
		st.Processed, st.Failed, st.Terminal, st.Retried, st.DeadLettered, st.Duplicates, st.Released)
	return err
}

// declare makes the queue (quorum, with x-delivery-limit and a dead-letter
// exchange) and its dead-letter queue. Redeclaring is harmless.
func declare(conn *amqp.Connection, c config) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	dlx, dlq := c.queue+".dlx", c.queue+"-dlq"
	if err := ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		return err
	}
	_, err = ch.QueueDeclare(c.queue, true, false, false, false, amqp.Table{
		"x-queue-type":           "quorum",
		"x-dead-letter-exchange": dlx,
		"x-delivery-limit":       int64(c.deliveryLimit),
	})
	if err != nil {
		return fmt.Errorf("declare %s: %w (declared before with other arguments? delete it first)", c.queue, err)
	}
	fmt.Printf("queue %s → dead-letter exchange %s → %s after %d redeliveries\n", c.queue, dlx, dlq, c.deliveryLimit)
	return nil
}

// publish sends c.publish orders with publisher confirms, c.poison of
// them poison (alternately without a customer and for an unknown one).
func publish(ctx context.Context, conn *amqp.Connection, c config) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	every := max(c.publish/max(c.poison, 1), 1)
	for i := 1; i <= c.publish; i++ {
		o := order{ID: fmt.Sprintf("o-%d", i), Customer: fmt.Sprintf("c-%d", i%7+1), Amount: 10 * i}
		kind := "ok"
		if c.poison > 0 && i%every == 0 && i/every <= c.poison {
			if (i/every)%2 == 1 {
				o.Customer, kind = "", "poison: no customer"
			} else {
				o.Customer, kind = "c-404", "poison: unknown customer"
			}
		}
		body, _ := json.Marshal(o)
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", c.queue, true, false, amqp.Publishing{
			ContentType: "application/json", MessageId: o.ID, Timestamp: time.Now(), DeliveryMode: amqp.Persistent, Body: body,
		})
		if err != nil {
			return err
		}
		if ok, err := conf.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish %s not confirmed: %v", o.ID, err)
		}
		fmt.Printf("sent %-5s %s\n", o.ID, kind)
	}
	return nil
}

type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer,omitempty"`
	Amount   int    `json:"amount"`
}

// ValidationError is a bad order: retrying cannot fix it.
type ValidationError struct{ Field, Reason string }

func (e *ValidationError) Error() string      { return e.Field + ": " + e.Reason }
func (e *ValidationError) ErrorClass() string { return "ValidationError" }

var errTimeout = errors.New("payments API: timeout")

type handler struct {
	flaky float64
	work  time.Duration
	fixed bool
}

// Handle processes one order, as in examples/worker.
func (h *handler) Handle(ctx context.Context, m *worker.Message) error {
	var o order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		return worker.Terminal(fmt.Errorf("decode order: %w", err))
	}
	if o.Customer == "" {
		if !h.fixed {
			return worker.Terminal(&ValidationError{Field: "customer", Reason: "required"})
		}
		o.Customer = "guest"
	}
	if o.Customer == "c-404" && !h.fixed {
		// A bug, unclassified: retried until x-delivery-limit dead-letters it.
		return fmt.Errorf("lookup customer %s: no such customer", o.Customer)
	}
	select {
	case <-time.After(h.work):
	case <-ctx.Done():
		return ctx.Err()
	}
	if rand.Float64() < h.flaky {
		return worker.Transient(errTimeout)
	}
	fmt.Printf("✓ order %-5s customer %-5s amount %4d (attempt %d)\n", o.ID, o.Customer, o.Amount, m.Attempt)
	return nil
}
