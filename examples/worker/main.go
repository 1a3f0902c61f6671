// Command worker consumes the orders examples/producer sends, with the
// worker package's defaults: poison goes to the dead-letter queue with its
// error context, transient failures are retried with backoff, Ctrl-C shuts
// down without losing a message. See docs/worker.md for the walkthrough.
//
//	go -C examples run ./worker              # the buggy version
//	go -C examples run ./worker -fixed       # after the fix
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dedup"
)

func main() {
	endpoint := flag.String("endpoint", "http://127.0.0.1:9324", "SQS endpoint (a `sluice server`)")
	queue := flag.String("queue", "orders", "queue to consume")
	concurrency := flag.Int("concurrency", 4, "handlers running at once")
	flaky := flag.Float64("flaky", 0.1, "share of calls to the payments API that time out (transient failures)")
	work := flag.Duration("work", 200*time.Millisecond, "time each order takes")
	fixed := flag.Bool("fixed", false, "run the fixed handler (guest checkout, customers created on demand)")
	verbose := flag.Bool("v", false, "debug logs (lease extensions, every success)")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *endpoint, *queue, *concurrency, *flaky, *work, *fixed); err != nil {
		log.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, endpoint, queue string, concurrency int, flaky float64, work time.Duration, fixed bool) error {
	client := sqs.New(sqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("example", "example", ""),
	})
	url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return fmt.Errorf("queue %s: %w (run examples/producer first)", queue, err)
	}
	src, err := worker.NewSQSSource(client, *url.QueueUrl, worker.SQSSourceOptions{Logger: log})
	if err != nil {
		return err
	}
	opts := worker.DefaultOptions()
	opts.Concurrency = concurrency
	opts.Logger = log
	opts.Deduper = dedup.NewMemory(24 * time.Hour)
	opts.Version = "orders-worker-1.0"
	if fixed {
		opts.Version = "orders-worker-1.1"
	}
	h := &handler{log: log, flaky: flaky, work: work, fixed: fixed}
	w, err := worker.New(src, h, opts)
	if err != nil {
		return err
	}
	fmt.Printf("consuming %s with %d handlers (version %s); Ctrl-C to stop\n", *url.QueueUrl, concurrency, opts.Version)
	err = w.Run(ctx)
	st := w.Stats()
	fmt.Printf("\nprocessed %d, failed %d (terminal %d), retried %d, deferred %d, dead-lettered %d, duplicates %d, released %d\n",
		st.Processed, st.Failed, st.Terminal, st.Retried, st.Deferred, st.DeadLettered, st.Duplicates, st.Released)
	return err
}

type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int    `json:"amount"`
}

// ValidationError is a bad order: retrying cannot fix it.
type ValidationError struct{ Field, Reason string }

func (e *ValidationError) Error() string      { return e.Field + ": " + e.Reason }
func (e *ValidationError) ErrorClass() string { return "ValidationError" }

var errTimeout = errors.New("payments API: timeout")

type handler struct {
	log   *slog.Logger
	flaky float64
	work  time.Duration
	fixed bool
}

// Handle processes one order. Its errors say what kind of failure they
// are where the handler knows; the worker does the rest.
func (h *handler) Handle(ctx context.Context, m *worker.Message) error {
	var o order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		return worker.Terminal(fmt.Errorf("decode order: %w", err))
	}
	if o.Customer == "" {
		if !h.fixed {
			return worker.Terminal(&ValidationError{Field: "customer", Reason: "required"})
		}
		o.Customer = "guest" // the fix: guest checkout
	}
	if o.Customer == "c-404" && !h.fixed {
		// A bug: the lookup does not know new customers. The error is not
		// classified, so it is retried (UnknownIsTransient) until the
		// queue's maxReceiveCount dead-letters it.
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
