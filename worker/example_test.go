package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/worker"
)

// A consumer next to `sluice server`: Ctrl-C stops receiving, lets the
// handlers finish for up to 30 s, then hands back what is left.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client := sqs.New(sqs.Options{
		BaseEndpoint: aws.String("http://localhost:9324"),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
	})
	src, err := worker.NewSQSSource(client, "http://localhost:9324/000000000000/orders", worker.SQSSourceOptions{})
	if err != nil {
		log.Fatal(err)
	}
	opts := worker.DefaultOptions()
	opts.Logger = slog.Default()
	err = worker.Run(ctx, src, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		fmt.Printf("order %s (attempt %d): %s\n", m.ID, m.Attempt, m.Body)
		return nil
	}), opts)
	if err != nil {
		log.Fatal(err)
	}
}

// Classify failures where they are understood: a bad request from a
// downstream is terminal (retrying repeats it), a 429 says when to retry,
// anything else is left to Options.UnknownIsTransient.
func ExampleTerminal() {
	classify := func(status int, err error) error {
		switch {
		case status == http.StatusBadRequest || status == http.StatusNotFound:
			return worker.Terminal(err)
		case status == http.StatusTooManyRequests:
			return worker.RetryAfter(err, 2*time.Second)
		case status >= 500:
			return worker.Transient(err)
		}
		return err
	}
	errRejected := errors.New("payments: card rejected")
	err := classify(http.StatusNotFound, fmt.Errorf("charge order 42: %w", errRejected))
	fmt.Println(errors.Is(err, worker.ErrTerminal), errors.Is(err, errRejected))
	err = classify(http.StatusServiceUnavailable, errors.New("payments: unavailable"))
	fmt.Println(errors.Is(err, worker.ErrTransient))
	// Output:
	// true true
	// true
}

// A Classifier decides errors that handlers return unmarked, here by
// their type, so that handler code stays free of worker imports.
func ExampleClassifier() {
	opts := worker.DefaultOptions()
	opts.Classifier = func(err error) worker.Class {
		var v *ValidationError
		if errors.As(err, &v) {
			return worker.ClassTerminal
		}
		return worker.ClassUnknown // the default rules decide
	}
	// Unclassified errors could be made terminal too:
	// opts.UnknownIsTransient = false
	fmt.Println(opts.Classifier(fmt.Errorf("order 7: %w", &ValidationError{Field: "qty"})))
	// Output: terminal
}

// ValidationError is an application's own error type.
type ValidationError struct{ Field string }

func (e *ValidationError) Error() string { return "invalid " + e.Field }

// ErrorClass names the class recorded on a dead-lettered message
// (SluiceErrorClass); without it the Go type name is used.
func (e *ValidationError) ErrorClass() string { return "ValidationError" }
