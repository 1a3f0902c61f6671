package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// TestSuperviseRestartsAfterFullDisk (docs/reliability.md, gap 1b): a
// write that finds the disk full fails the store; the server refuses
// sends and answers /health 503 while the disk stays full; once space is
// back, Supervise restarts it in place on the same address, every send
// acknowledged before the fault is there, and sends are acknowledged
// again.
func TestSuperviseRestartsAfterFullDisk(t *testing.T) {
	fs := pebblestore.NewFaultFS(vfs.Default)
	fs.OnlyWAL(true)
	o := DefaultOptions()
	o.DataDir, o.StoreFS = t.TempDir(), fs
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"

	var cur atomic.Pointer[Server]
	starts := atomic.Int32{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Supervise(ctx, o, nil, func(s *Server) { cur.Store(s); starts.Add(1) })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Supervise: %v", err)
		}
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("the server started", func() bool { return cur.Load() != nil }))
	first := cur.Load()
	addr := first.SQSAddr()
	health := func() int {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	poll.CheckFor(t, 10*time.Second, poll.True("/health 200", func() bool { return health() == http.StatusOK }))

	eng := first.Engine()
	if _, _, err := eng.CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	const before = 50
	for i := range before {
		if _, err := eng.Send("q", []engine.Message{{Body: []byte(fmt.Sprint("m", i))}}); err != nil {
			t.Fatal(err)
		}
	}

	fs.FailWrites(syscall.ENOSPC)
	if _, err := eng.Send("q", []engine.Message{{Body: []byte("on a full disk")}}); err == nil {
		t.Fatal("a send on a full disk was acknowledged")
	}
	if h := health(); h != http.StatusServiceUnavailable {
		t.Fatalf("/health on a full disk: %d, want 503", h)
	}

	fs.Heal()
	poll.CheckFor(t, 30*time.Second, poll.True("a second server", func() bool { return starts.Load() == 2 }))
	s := cur.Load()
	if s.SQSAddr() != addr {
		t.Fatalf("restarted on %s, want the same address %s", s.SQSAddr(), addr)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("/health 200 after the restart", func() bool { return health() == http.StatusOK }))
	eng = s.Engine()
	if _, err := eng.Send("q", []engine.Message{{Body: []byte("after")}}); err != nil {
		t.Fatalf("send after space returned: %v", err)
	}
	got := map[string]bool{}
	for len(got) < before+1 {
		ds, err := eng.Receive(context.Background(), "q", engine.ReceiveRequest{Max: 10, WaitSet: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			got[string(d.Body)] = true
		}
	}
	for i := range before {
		if !got[fmt.Sprint("m", i)] {
			t.Fatalf("acknowledged message m%d lost across the in-place restart (got %d)", i, len(got))
		}
	}
	if got["on a full disk"] {
		t.Log("the refused send's message was stored after all (allowed: it was never acknowledged)")
	}
	if !got["after"] {
		t.Fatal("the send after the restart is missing")
	}
}

// TestSuperviseStaysDownAfterOtherFailures: a failed sync is not a full
// disk; Supervise does not restart the server however long it waits.
func TestSuperviseStaysDownAfterOtherFailures(t *testing.T) {
	fs := pebblestore.NewFaultFS(vfs.Default)
	fs.OnlyWAL(true)
	o := DefaultOptions()
	o.DataDir, o.StoreFS = t.TempDir(), fs
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Engine().CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	fs.FailSyncs(syscall.ENOSPC)
	if _, err := s.Engine().Send("q", []engine.Message{{Body: []byte("x")}}); err == nil {
		t.Fatal("a send whose sync failed was acknowledged")
	}
	fs.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), 3*diskPollInterval)
	defer cancel()
	if s.awaitSpaceAfterFullDisk(ctx) {
		t.Fatal("a failed sync was taken for a full disk to restart after")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal(ctx.Err())
	}
}

// TestHealthSeesAStoreFailureNoRequestMet: the store can fail in work of
// its own (pebble flushing a memtable onto a full disk) while no request
// writes; /health, /ready and sluice_store_failed say so at once, not at
// the next write.
func TestHealthSeesAStoreFailureNoRequestMet(t *testing.T) {
	fs := pebblestore.NewFaultFS(vfs.Default)
	fs.OnlyWAL(true)
	o := DefaultOptions()
	o.DataDir, o.StoreFS = t.TempDir(), fs
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.SQSAddr() + path)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("/health 200", func() bool { c, _ := get("/health"); return c == http.StatusOK }))

	// A write of the store's own, as a background flush is: the engine's
	// writes have not met the failure.
	fs.FailWrites(syscall.ENOSPC)
	var b store.Batch
	b.Set([]byte("background"), []byte("x"))
	if p, err := s.st.Write(&b, true); err == nil {
		_ = p.Wait()
	}
	for _, path := range []string{"/health", "/ready"} {
		if c, body := get(path); c != http.StatusServiceUnavailable {
			t.Errorf("%s after the store failed: %d %s, want 503", path, c, body)
		}
	}
	if _, body := get("/metrics"); !strings.Contains(body, "sluice_store_failed 1") {
		t.Errorf("/metrics after the store failed does not say sluice_store_failed 1")
	}
}
