package worker_test

import (
	"context"
	"errors"
	"log"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/worker"
)

// A worker on an AMQP queue, reconnecting when the connection is lost:
// AMQPSource stops Run with ErrConnectionClosed and leaves redialling to
// its caller.
func ExampleNewAMQPSource() {
	ctx := context.Background()
	h := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		log.Printf("order %s: %s (attempt %d)", m.ID, m.Body, m.Attempt)
		return nil
	})
	consume := func() error {
		conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
		if err != nil {
			return err
		}
		defer conn.Close()
		src, err := worker.NewAMQPSource(conn, "orders", worker.AMQPSourceOptions{
			Prefetch:              20,
			HTTPEndpoint:          "http://127.0.0.1:9324", // Sluice: failure reports with context
			HasDeadLetterExchange: true,                    // "orders" was declared with x-dead-letter-exchange
		})
		if err != nil {
			return err
		}
		defer src.Close()
		return worker.Run(ctx, src, h, worker.DefaultOptions())
	}
	for ctx.Err() == nil {
		err := consume()
		if errors.Is(err, worker.ErrTerminal) && !errors.Is(err, worker.ErrConnectionClosed) {
			log.Fatal(err) // e.g. the queue does not exist
		}
		time.Sleep(time.Second) // a lost connection or a failed dial: redial
	}
}
