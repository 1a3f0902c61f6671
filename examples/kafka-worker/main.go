// Command kafka-worker is the poison-message walkthrough on Kafka: it
// produces orders (some poison) to the topic "orders", consumes them as
// group "billing" through the worker SDK, shows the dead letters in
// orders.dlq with their context headers, then "deploys the fix" and
// redrives them with the console's safety stop. Without -brokers it runs
// franz-go's in-process kfake cluster.
//
//	go -C examples run ./kafka-worker [-brokers 127.0.0.1:9092]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/kafka"
)

func main() {
	brokers := flag.String("brokers", "", "comma-separated Kafka brokers (\"\": run an in-process kfake cluster); the topics orders and orders.dlq must exist")
	n := flag.Int("n", 10, "orders to produce")
	poison := flag.Int("poison", 2, "how many of them are malformed")
	flag.Parse()
	ctx := context.Background()
	seeds := strings.Split(*brokers, ",")
	if *brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders", "orders.dlq"))
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		seeds = c.ListenAddrs()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	for i := range *n {
		body := fmt.Sprintf(`{"id":"o-%d","qty":1}`, i)
		if i < *poison {
			body = fmt.Sprintf(`{"id":"o-%d","qty":"one"}`, i)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte(fmt.Sprint("o-", i)), Value: []byte(body)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}
	src, err := kafka.NewSource(kafka.Options{Seeds: seeds, Topic: "orders", Group: "billing", MaxAttempts: 5})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
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

	store, err := kafka.NewDLQ(seeds, "orders.dlq", "", "")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
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
