package gcppubsub_test

import (
	"context"
	"fmt"
	"testing"
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
	"github.com/sluicemq/sluice/worker/workertest"
)

// The tests run on pstest, the official client's in-process fake
// server. It ignores retry_policy (redelivery is immediate) and its own
// dead-letter forwarding is unreliable (see docs/worker.md), so the
// scenarios exercise the SDK's dead-lettering, which is what carries the
// context.

type harness struct {
	srv *pstest.Server
	c   *pubsub.Client
	cfg workertest.Config
}

func client(t testing.TB, srv *pstest.Server) *pubsub.Client {
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pubsub.NewClient(context.Background(), "p", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newHarness(t *testing.T, cfg workertest.Config) *harness {
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	c := client(t, srv)
	ctx := context.Background()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/orders"}); err != nil {
		t.Fatal(err)
	}
	if err := gcppubsub.Configure(ctx, c, gcppubsub.SubscriptionConfig{Topic: "orders", Subscription: "billing",
		DLQTopic: "billing-dlq", MaxAttempts: cfg.MaxAttempts, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}); err != nil {
		t.Fatal(err)
	}
	return &harness{srv: srv, c: c, cfg: cfg}
}

func (h *harness) Publish(t testing.TB, bodies ...string) {
	p := h.c.Publisher("orders")
	defer p.Stop()
	for _, b := range bodies {
		if _, err := p.Publish(context.Background(), &pubsub.Message{Data: []byte(b), Attributes: map[string]string{"kind": "order"}}).Get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) Source(t testing.TB) (worker.Source, func()) {
	c := client(t, h.srv)
	src, err := gcppubsub.NewSource(c, gcppubsub.Options{Subscription: "billing", DLQTopic: "billing-dlq",
		MaxAttempts: h.cfg.MaxAttempts, MaxOutstanding: 4})
	if err != nil {
		t.Fatal(err)
	}
	var closed bool
	t.Cleanup(func() {
		if !closed {
			src.Close()
		}
	})
	s, crash := workertest.Crashable(src)
	return s, func() { crash(); closed = true; c.Close() }
}

func (h *harness) store(t testing.TB) *gcppubsub.DLQ {
	d, err := gcppubsub.NewDLQ(h.c, "billing-dlq-sub", "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (h *harness) DeadLetters(t testing.TB) []dlq.Entry {
	d := h.store(t)
	defer d.Close()
	var all []dlq.Entry
	cursor := ""
	for {
		es, next, err := d.List(context.Background(), cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return all
		}
		all, cursor = append(all, es...), next
	}
}

func (h *harness) Redrive(t testing.TB, o dlq.Options) (dlq.Report, error) {
	d := h.store(t)
	defer d.Close()
	return dlq.Redrive(context.Background(), d, o)
}

func TestConformance(t *testing.T) {
	workertest.Run(t, func(t *testing.T, cfg workertest.Config) workertest.Harness { return newHarness(t, cfg) })
}

// Configure sets the native policies: max delivery attempts one above the
// SDK's (at least 5) and the retry policy.
func TestConfigure(t *testing.T) {
	h := newHarness(t, workertest.Config{MaxAttempts: 7})
	s, err := h.c.SubscriptionAdminClient.GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/billing"})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%d %s %v", s.DeadLetterPolicy.GetMaxDeliveryAttempts(), s.DeadLetterPolicy.GetDeadLetterTopic(), s.RetryPolicy.GetMinimumBackoff().AsDuration())
	if got != "8 projects/p/topics/billing-dlq 100ms" {
		t.Fatalf("subscription %s", got)
	}
}
