package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/redisstream"
	"github.com/sluicemq/sluice/worker/workertest"
)

// startRedis runs Debian's redis-server on a Unix socket in a fresh
// directory (no TCP port, so no port race) and returns the socket path.
// Without redis-server the test is skipped, or fails when
// SLUICE_REQUIRE_INTEROP=1 (CI installs it).
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_INTEROP") == "1" {
			t.Fatal("redis-server is not installed (apt-get install redis-server)")
		}
		t.Skip("redis-server is not installed")
	}
	// The socket path must stay under 108 bytes, which t.TempDir() may not.
	dir, err := os.MkdirTemp("", "r")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "r.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	})
	workertest.WaitFor(t, 10*time.Second, "redis-server's socket", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	return sock
}

func client(t testing.TB, sock string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

type harness struct {
	sock string
	rdb  *redis.Client
	cfg  workertest.Config
	n    int
}

func (h *harness) Publish(t testing.TB, bodies ...string) {
	for _, b := range bodies {
		if err := h.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders", Values: map[string]any{"body": b, "kind": "order"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) Source(t testing.TB) (worker.Source, func()) {
	h.n++
	rdb := client(t, h.sock)
	src, err := redisstream.NewSource(context.Background(), rdb, redisstream.Options{Stream: "orders", Group: "billing",
		Consumer: fmt.Sprintf("c%d", h.n), MaxAttempts: h.cfg.MaxAttempts, Lease: 2 * time.Second, Block: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, crash := workertest.Crashable(src)
	return s, func() { crash(); rdb.Close() }
}

func (h *harness) DeadLetters(t testing.TB) []dlq.Entry {
	es, _, err := redisstream.NewDLQ(h.rdb, "orders.dlq", "", "").List(context.Background(), "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func (h *harness) Redrive(t testing.TB, o dlq.Options) (dlq.Report, error) {
	return dlq.Redrive(context.Background(), redisstream.NewDLQ(h.rdb, "orders.dlq", "", ""), o)
}

func TestConformance(t *testing.T) {
	workertest.Run(t, func(t *testing.T, cfg workertest.Config) workertest.Harness {
		sock := startRedis(t)
		return &harness{sock: sock, rdb: client(t, sock), cfg: cfg}
	})
}

// A dead letter keeps the entry's other fields next to its context, and a
// redrive strips the context and counts the redrive.
func TestDeadLetterFields(t *testing.T) {
	sock := startRedis(t)
	h := &harness{sock: sock, rdb: client(t, sock), cfg: workertest.Config{MaxAttempts: 3}}
	h.Publish(t, "poison-x")
	src, _ := h.Source(t)
	ctx := context.Background()
	var ms []*worker.Message
	workertest.WaitFor(t, 10*time.Second, "a delivery", func() bool {
		var err error
		ms, err = src.Receive(ctx, 1)
		return err == nil && len(ms) == 1
	})
	out, err := src.Fail(ctx, ms[0], worker.Failure{Terminal: true, ErrorClass: "E", ErrorMessage: "bad", Trace: "stack", ConsumerVersion: "v9"})
	if err != nil || !out.DeadLettered || out.Target != "orders.dlq" {
		t.Fatalf("%+v %v", out, err)
	}
	es := h.DeadLetters(t)
	if len(es) != 1 || es[0].Attributes["kind"] != "order" || es[0].Context.Trace != "stack" || es[0].Context.Source != "orders/"+ms[0].ID+"/billing" {
		t.Fatalf("%+v", es)
	}
	if n, _ := h.rdb.XPending(ctx, "orders", "billing").Result(); n.Count != 0 {
		t.Fatalf("still pending: %+v", n)
	}
	if err := redisstream.NewDLQ(h.rdb, "orders.dlq", "", "").Redrive(ctx, es[0]); err != nil {
		t.Fatal(err)
	}
	xs, _ := h.rdb.XRange(ctx, "orders", "-", "+").Result()
	last := xs[len(xs)-1].Values
	if last["sluice-redrive-count"] != "1" || last["sluice-origin-id"] != ms[0].ID || last["kind"] != "order" || last["sluice-error-class"] != nil {
		t.Fatalf("redriven entry %v", last)
	}
	if n, _ := h.rdb.XLen(ctx, "orders.dlq").Result(); n != 0 {
		t.Fatalf("DLQ still has %d", n)
	}
}

// A consumer whose entry was taken over (it stalled past Lease) gets
// ErrLeaseLost from Extend and does not take the entry back.
func TestExtendAfterTakeover(t *testing.T) {
	sock := startRedis(t)
	h := &harness{sock: sock, rdb: client(t, sock), cfg: workertest.Config{MaxAttempts: 5}}
	h.Publish(t, "slow")
	ctx := context.Background()
	mk := func(name string) *redisstream.Source {
		s, err := redisstream.NewSource(ctx, h.rdb, redisstream.Options{Stream: "orders", Group: "billing", Consumer: name,
			Lease: 300 * time.Millisecond, Block: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk("a"), mk("b")
	var ms []*worker.Message
	workertest.WaitFor(t, 10*time.Second, "a's delivery", func() bool {
		ms, _ = a.Receive(ctx, 1)
		return len(ms) == 1
	})
	workertest.WaitFor(t, 10*time.Second, "b's takeover", func() bool {
		got, _ := b.Receive(ctx, 1)
		return len(got) == 1 && got[0].Attempt == 2
	})
	if err := a.Extend(ctx, ms[0]); !errors.Is(err, worker.ErrLeaseLost) {
		t.Fatalf("Extend after takeover: %v", err)
	}
	p, err := h.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders", Group: "billing", Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].Consumer != "b" {
		t.Fatalf("pending %+v %v", p, err)
	}
}
