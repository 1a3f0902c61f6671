// Command pubsub-worker is the poison-message walkthrough on Google
// Cloud Pub/Sub: it configures the subscription "billing" (dead-letter
// and retry policies), publishes orders (some poison) to "orders",
// consumes them through the worker SDK, shows the dead letters on
// billing-dlq with their context attributes, then "deploys the fix" and
// redrives them with the console's safety stop. Without -project it runs
// the client's in-process pstest server; with it, it uses your
// credentials (or PUBSUB_EMULATOR_HOST) and needs the topic "orders".
//
//	go -C examples run ./pubsub-worker [-project my-project]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/gcppubsub"
)

func main() {
	project := flag.String("project", "", "Google Cloud project (\"\": an in-process pstest server)")
	n := flag.Int("n", 10, "orders to publish")
	poison := flag.Int("poison", 2, "how many of them are malformed")
	flag.Parse()
	ctx := context.Background()
	var copts []option.ClientOption
	if *project == "" {
		srv := pstest.NewServer()
		defer srv.Close()
		conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		copts = append(copts, option.WithGRPCConn(conn))
		*project = "demo"
	}
	c, err := pubsub.NewClient(ctx, *project, copts...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + *project + "/topics/orders"}); err != nil {
		if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/" + *project + "/topics/orders"}); err != nil {
			log.Fatal(err)
		}
	}
	if err := gcppubsub.Configure(ctx, c, gcppubsub.SubscriptionConfig{Topic: "orders", Subscription: "billing",
		DLQTopic: "billing-dlq", MaxAttempts: 5}); err != nil {
		log.Fatal(err)
	}
	pub := c.Publisher("orders")
	for i := range *n {
		body := fmt.Sprintf(`{"id":"o-%d","qty":1}`, i)
		if i < *poison {
			body = fmt.Sprintf(`{"id":"o-%d","qty":"one"}`, i)
		}
		if _, err := pub.Publish(ctx, &pubsub.Message{Data: []byte(body)}).Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
	pub.Stop()
	src, err := gcppubsub.NewSource(c, gcppubsub.Options{Subscription: "billing", DLQTopic: "billing-dlq", MaxAttempts: 5})
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

	store, err := gcppubsub.NewDLQ(c, "billing-dlq-sub", "orders", 0)
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
