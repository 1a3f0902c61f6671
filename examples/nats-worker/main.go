// Command nats-worker is the poison-message walkthrough on NATS
// JetStream: it publishes orders (some poison) to the stream ORDERS,
// consumes them with the durable consumer "billing" through the worker
// SDK, shows the dead letters in ORDERS_DLQ with their context headers,
// then "deploys the fix" and redrives them with the console's safety
// stop. Without -url it runs an embedded nats-server.
//
//	go -C examples run ./nats-worker [-url nats://127.0.0.1:4222]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/natsjs"
)

func main() {
	url := flag.String("url", "", "NATS server URL (\"\": run an embedded nats-server)")
	n := flag.Int("n", 10, "orders to publish")
	poison := flag.Int("poison", 2, "how many of them are malformed")
	flag.Parse()
	ctx := context.Background()
	if *url == "" {
		dir, err := os.MkdirTemp("", "nats-example")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
		if err != nil {
			log.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			log.Fatal("nats-server did not start")
		}
		defer s.Shutdown()
		*url = s.ClientURL()
	}
	nc, err := nats.Connect(*url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage}); err != nil {
		log.Fatal(err)
	}
	for i := range *n {
		body := fmt.Sprintf(`{"id":"o-%d","qty":1}`, i)
		if i < *poison {
			body = fmt.Sprintf(`{"id":"o-%d","qty":"one"}`, i)
		}
		if _, err := js.Publish(ctx, "orders.new", []byte(body)); err != nil {
			log.Fatal(err)
		}
	}
	src, err := natsjs.NewSource(ctx, js, natsjs.Options{Stream: "ORDERS", Consumer: "billing", MaxAttempts: 5})
	if err != nil {
		log.Fatal(err)
	}
	var fixed atomic.Bool
	var processed atomic.Int32
	h := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		var o struct {
			ID  string `json:"id"`
			Qty int    `json:"qty"`
		}
		if err := json.Unmarshal(m.Body, &o); err != nil && !fixed.Load() {
			return worker.Terminal(err) // retrying cannot fix a malformed body
		}
		processed.Add(1)
		return nil
	})
	opts := worker.DefaultOptions()
	opts.Version = "billing-1.0"
	w, err := worker.New(src, h, opts)
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for int(w.Stats().Processed+w.Stats().DeadLettered) < *n {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("processed %d, dead-lettered %d\n", processed.Load(), w.Stats().DeadLettered)

	store := natsjs.NewDLQ(js, "ORDERS_DLQ", "")
	es, _, err := store.List(ctx, "", 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range es {
		fmt.Println("  ", e)
	}

	fixed.Store(true) // the fix is deployed
	rep, err := dlq.Redrive(ctx, store, dlq.Options{Rate: 20, SafetyWindow: 2 * time.Second})
	if errors.Is(err, dlq.ErrSafetyStop) {
		log.Fatalf("redrive stopped: %v", err)
	} else if err != nil {
		log.Fatal(err)
	}
	for int(processed.Load()) < *n {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("redrove %d; processed %d of %d\n", rep.Redriven, processed.Load(), *n)
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
}
