package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/gcppubsub"
	"github.com/sluicemq/sluice/worker/kafka"
	"github.com/sluicemq/sluice/worker/natsjs"
	"github.com/sluicemq/sluice/worker/redisstream"
	"github.com/sluicemq/sluice/worker/workertest"
)

// backend is one real server with a source topic/stream and its DLQ.
type backend struct {
	url     string // the --source URL of its DLQ
	publish func(t *testing.T, bodies ...string)
	source  func(t *testing.T) worker.Source
}

func redisBackend(t *testing.T) backend {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_INTEROP") == "1" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	dir, err := os.MkdirTemp("", "r")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "r.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); os.RemoveAll(dir) })
	workertest.WaitFor(t, 10*time.Second, "redis socket", func() bool { _, err := os.Stat(sock); return err == nil })
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { rdb.Close() })
	return backend{url: "redis+unix://" + sock + "?stream=orders.dlq",
		publish: func(t *testing.T, bodies ...string) {
			for _, b := range bodies {
				if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders", Values: map[string]any{"body": b}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
		source: func(t *testing.T) worker.Source {
			s, err := redisstream.NewSource(context.Background(), rdb, redisstream.Options{Stream: "orders", Group: "g", Consumer: "c",
				Lease: 2 * time.Second, Block: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}}
}

func natsBackend(t *testing.T) backend {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	return backend{url: "nats://" + strings.TrimPrefix(s.ClientURL(), "nats://") + "/ORDERS_DLQ",
		publish: func(t *testing.T, bodies ...string) {
			for _, b := range bodies {
				if _, err := js.Publish(context.Background(), "orders.new", []byte(b)); err != nil {
					t.Fatal(err)
				}
			}
		},
		source: func(t *testing.T) worker.Source {
			src, err := natsjs.NewSource(context.Background(), js, natsjs.Options{Stream: "ORDERS", Consumer: "billing",
				AckWait: 2 * time.Second, FetchWait: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return src
		}}
}

func kafkaBackend(t *testing.T) backend {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "orders.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return backend{url: "kafka://" + strings.Join(seeds, ",") + "/orders.dlq",
		publish: func(t *testing.T, bodies ...string) {
			for _, b := range bodies {
				if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Value: []byte(b)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		},
		source: func(t *testing.T) worker.Source {
			src, err := kafka.NewSource(kafka.Options{Seeds: seeds, Topic: "orders", Group: "billing", PollWait: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(src.Close)
			return src
		}}
}

func pubsubBackend(t *testing.T) backend {
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pubsub.NewClient(context.Background(), "p", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/orders"}); err != nil {
		t.Fatal(err)
	}
	if err := gcppubsub.Configure(ctx, c, gcppubsub.SubscriptionConfig{Topic: "orders", Subscription: "billing", DLQTopic: "billing-dlq"}); err != nil {
		t.Fatal(err)
	}
	return backend{url: "pubsub://p/billing-dlq-sub?target=orders&emulator=" + srv.Addr,
		publish: func(t *testing.T, bodies ...string) {
			p := c.Publisher("orders")
			defer p.Stop()
			for _, b := range bodies {
				if _, err := p.Publish(ctx, &pubsub.Message{Data: []byte(b)}).Get(ctx); err != nil {
					t.Fatal(err)
				}
			}
		},
		source: func(t *testing.T) worker.Source {
			src, err := gcppubsub.NewSource(c, gcppubsub.Options{Subscription: "billing", DLQTopic: "billing-dlq", MaxOutstanding: 4})
			if err != nil {
				t.Fatal(err)
			}
			return src
		}}
}

func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String() + errb.String(), code
}

// TestConsole drives peek, a filtered and a dry-run redrive, the safety
// stop and a redrive after the fix against each real server.
func TestConsole(t *testing.T) {
	for name, mk := range map[string]func(*testing.T) backend{"redis": redisBackend, "nats": natsBackend, "kafka": kafkaBackend, "pubsub": pubsubBackend} {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			var fixed, processed atomic.Int32
			o := workertest.Options()
			w, err := worker.New(b.source(t), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if fixed.Load() == 0 {
					return worker.Terminal(classed{"bad order " + string(m.Body)})
				}
				processed.Add(1)
				return nil
			}), o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			b.publish(t, "o-1", "o-2", "o-3", "o-4")
			workertest.WaitFor(t, 30*time.Second, "4 dead letters", func() bool { return w.Stats().DeadLettered == 4 })

			// eventually retries a command until its output has want:
			// dead letters reach the DLQ asynchronously after the
			// worker's stats count them (a Pub/Sub subscription delivers
			// them a little later).
			eventually := func(want string, code int, args ...string) string {
				var out string
				var got int
				workertest.WaitFor(t, 45*time.Second, fmt.Sprintf("%v to say %q", args, want), func() bool {
					out, got = cli(t, args...)
					return got == code && strings.Contains(out, want)
				})
				return out
			}
			out := eventually("4 matching entries (2 shown)", 0, "peek", "--source", b.url, "--limit", "2")
			if !strings.Contains(out, "class=orders.Invalid") || !strings.Contains(out, `msg="bad order o-`) || !strings.Contains(out, "reason=terminal") {
				t.Fatalf("peek:\n%s", out)
			}
			eventually("4 matching entries", 0, "peek", "--source", b.url)
			if out, code := cli(t, "peek", "--source", b.url, "--class", "Other"); code != 0 || !strings.Contains(out, "0 matching entries") {
				t.Fatalf("filtered peek (%d):\n%s", code, out)
			}
			eventually("matched=4 redriven=0", 0, "redrive", "--source", b.url, "--dry-run")
			// Not fixed: the first redriven message fails again and the
			// redrive stops itself, leaving the rest in the DLQ.
			out = eventually("stopped=true", 3, "redrive", "--source", b.url, "--rate", "1", "--safety-window", "20s")
			if strings.Contains(out, "redriven=4") {
				t.Fatalf("unsafe redrive moved everything:\n%s", out)
			}
			eventually("4 matching entries", 0, "peek", "--source", b.url)
			// Fixed: everything goes back and is processed once.
			fixed.Store(1)
			workertest.WaitFor(t, 60*time.Second, "redriven messages processed", func() bool {
				if out, code := cli(t, "redrive", "--source", b.url, "--rate", "100", "--safety-window", "1s"); code != 0 {
					t.Fatalf("redrive after the fix (%d):\n%s", code, out)
				}
				return processed.Load() == 4
			})
			if out, _ := cli(t, "peek", "--source", b.url); !strings.Contains(out, "0 matching entries") {
				t.Fatalf("DLQ after the redrive:\n%s", out)
			}
			if n := processed.Load(); n != 4 {
				t.Fatalf("processed %d times, want 4", n)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"drop"}, {"peek"}, {"peek", "--source", "ftp://x/y"}, {"redrive", "--source", "kafka:///t"}} {
		if out, code := cli(t, args...); code != 2 {
			t.Errorf("%v: exit %d:\n%s", args, code, out)
		}
	}
}

type classed struct{ msg string }

func (e classed) Error() string      { return e.msg }
func (e classed) ErrorClass() string { return "orders.Invalid" }
