package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/kafka"
	"github.com/sluicemq/sluice/worker/workertest"
)

// The Kafka tests run on kfake, franz-go's in-process Kafka cluster: it
// speaks the real wire protocol (consumer groups, offset commits,
// headers) on 127.0.0.1 random ports, needs no JVM, and is kept in step
// with the client. What it lacks (quotas, replication delay) the
// transport does not rely on.
func startKafka(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders", "orders.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

type harness struct {
	seeds []string
	cl    *kgo.Client
	cfg   workertest.Config
}

func newHarness(t *testing.T, cfg workertest.Config) *harness {
	seeds := startKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &harness{seeds: seeds, cl: cl, cfg: cfg}
}

func (h *harness) Publish(t testing.TB, bodies ...string) {
	for _, b := range bodies {
		r := &kgo.Record{Topic: "orders", Key: []byte(b), Value: []byte(b), Headers: []kgo.RecordHeader{{Key: "kind", Value: []byte("order")}}}
		if err := h.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) Source(t testing.TB) (worker.Source, func()) {
	src, err := kafka.NewSource(kafka.Options{Seeds: h.seeds, Topic: "orders", Group: "billing",
		MaxAttempts: h.cfg.MaxAttempts, PollWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	s, crash := workertest.Crashable(src)
	return s, func() { crash(); src.Close() }
}

func (h *harness) store(t testing.TB) *kafka.DLQ {
	d, err := kafka.NewDLQ(h.seeds, "orders.dlq", "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func (h *harness) DeadLetters(t testing.TB) []dlq.Entry {
	es, _, err := h.store(t).List(context.Background(), "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func (h *harness) Redrive(t testing.TB, o dlq.Options) (dlq.Report, error) {
	return dlq.Redrive(context.Background(), h.store(t), o)
}

func TestConformance(t *testing.T) {
	workertest.Run(t, func(t *testing.T, cfg workertest.Config) workertest.Harness { return newHarness(t, cfg) })
}

// A record failing on one partition holds back only the records after it
// on that partition, and only until it is dead-lettered; the dead letter
// keeps the key and carries the original coordinates.
func TestPartitionOrder(t *testing.T) {
	h := newHarness(t, workertest.Config{MaxAttempts: 3})
	ctx := context.Background()
	for _, b := range []string{"stuck", "after-1", "after-2"} {
		r := &kgo.Record{Topic: "orders", Key: []byte("k"), Value: []byte(b)} // one key: one partition
		if err := h.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	src, _ := h.Source(t)
	var order []string
	stuckID := ""
	for len(order) < 5 {
		var ms []*worker.Message
		workertest.WaitFor(t, 20*time.Second, "a record", func() bool {
			var err error
			ms, err = src.Receive(ctx, 10)
			return err == nil && len(ms) > 0
		})
		if len(ms) != 1 {
			t.Fatalf("%d records of one partition handed out at once", len(ms))
		}
		m := ms[0]
		order = append(order, fmt.Sprintf("%s#%d", m.Body, m.Attempt))
		if string(m.Body) == "stuck" {
			stuckID = m.ID
			if _, err := src.Fail(ctx, m, worker.Failure{Backoff: time.Millisecond, ErrorClass: "E", ErrorMessage: "no"}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := src.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(order) != "[stuck#1 stuck#2 stuck#3 after-1#1 after-2#1]" {
		t.Fatalf("order %v", order)
	}
	es := h.DeadLetters(t)
	if len(es) != 1 || es[0].Key != "k" || es[0].Context.Source != stuckID || es[0].Attributes["sluice-offset"] != "" || es[0].Context.Origin != "orders" || es[0].Context.Attempts != 3 || es[0].Context.Reason != dlq.ReasonMaxAttempts {
		t.Fatalf("%+v", es)
	}
}

// Two workers in one group share the partitions through rebalances
// (the second joins while the first is busy): every record is processed,
// none is dead-lettered.
func TestTwoWorkersRebalance(t *testing.T) {
	h := newHarness(t, workertest.Config{MaxAttempts: 3})
	var bodies []string
	for i := range 30 {
		bodies = append(bodies, fmt.Sprintf("ok-%d", i))
	}
	h.Publish(t, bodies...)
	var mu sync.Mutex
	seen := map[string]bool{}
	handler := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		seen[string(m.Body)] = true
		mu.Unlock()
		return nil
	})
	start := func() func() {
		src, _ := h.Source(t)
		w, err := worker.New(src, handler, workertest.Options())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	stop1 := start()
	defer stop1()
	workertest.WaitFor(t, 20*time.Second, "the first records", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 0 })
	stop2 := start()
	defer stop2()
	workertest.WaitFor(t, 60*time.Second, "every record processed", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(bodies) })
	if es := h.DeadLetters(t); len(es) != 0 {
		t.Fatalf("%d dead-lettered", len(es))
	}
}
