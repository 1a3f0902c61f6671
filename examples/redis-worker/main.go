// Command redis-worker is the poison-message walkthrough on Redis
// Streams: it adds orders (some poison) to the stream "orders", consumes
// them as group "billing" with the worker SDK, shows the dead letters in
// orders.dlq with their context, then "deploys the fix" and redrives
// them with the console's safety stop. Needs a redis-server:
//
//	redis-server --port 6399 --save "" &
//	go -C examples run ./redis-worker -addr 127.0.0.1:6399
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

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/redisstream"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "redis-server address (host:port, or a Unix socket path)")
	n := flag.Int("n", 10, "orders to add")
	poison := flag.Int("poison", 2, "how many of them are malformed")
	flag.Parse()
	ctx := context.Background()
	o := &redis.Options{Addr: *addr}
	if strings.HasPrefix(*addr, "/") {
		o.Network = "unix"
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	for i := range *n {
		body := fmt.Sprintf(`{"id":"o-%d","qty":1}`, i)
		if i < *poison {
			body = fmt.Sprintf(`{"id":"o-%d","qty":"one"}`, i)
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: map[string]any{"body": body}}).Err(); err != nil {
			log.Fatal(err)
		}
	}
	src, err := redisstream.NewSource(ctx, rdb, redisstream.Options{Stream: "orders", Group: "billing", Consumer: "worker-1", MaxAttempts: 5})
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

	store := redisstream.NewDLQ(rdb, "orders.dlq", "", "")
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
