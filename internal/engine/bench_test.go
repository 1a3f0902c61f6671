package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// BenchmarkSendReceiveDelete measures the engine's own cost of one message's
// life (send, receive, delete) in batches of 10, without a protocol or disk.
func BenchmarkSendReceiveDelete(b *testing.B) {
	e, err := Open(Options{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	e.CreateQueue("q", DefaultQueueConfig(), nil)
	payload := make([]byte, 1024)
	batch := make([]Message, 10)
	for i := range batch {
		batch[i] = Message{Body: payload}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 10 {
		sendReceiveDelete(b, e, "q", batch)
	}
}

// sendReceiveDelete is one step of the life-cycle benchmarks: batch sent
// to q, then a receive of up to ten, each deleted.
func sendReceiveDelete(b *testing.B, e *Engine, q string, batch []Message) {
	if _, err := e.Send(q, batch); err != nil {
		b.Fatal(err)
	}
	d, err := e.Receive(context.Background(), q, ReceiveRequest{Max: 10, WaitSet: true})
	if err != nil {
		b.Fatal(err)
	}
	handles := make([]string, len(d))
	for j := range d {
		handles[j] = d[j].ReceiptHandle
	}
	if _, err := e.Delete(q, handles); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkParallelProducersConsumers runs 4 producers and 4 consumers on one
// queue, as the foundation issue's throughput target does, minus HTTP.
func BenchmarkParallelProducersConsumers(b *testing.B) {
	e, err := Open(Options{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	e.CreateQueue("q", DefaultQueueConfig(), nil)
	payload := make([]byte, 1024)
	per := b.N/40 + 1
	var wg sync.WaitGroup
	b.ResetTimer()
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]Message, 10)
			for i := range batch {
				batch[i] = Message{Body: payload}
			}
			for i := 0; i < per; i++ {
				e.Send("q", batch)
			}
		}()
	}
	total := per * 40
	var got sync.WaitGroup
	var mu sync.Mutex
	received := 0
	for c := 0; c < 4; c++ {
		got.Add(1)
		go func() {
			defer got.Done()
			for {
				mu.Lock()
				done := received >= total
				mu.Unlock()
				if done {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				d, _ := e.Receive(ctx, "q", ReceiveRequest{Max: 10, Wait: time.Second, WaitSet: true})
				cancel()
				if len(d) == 0 {
					continue
				}
				handles := make([]string, len(d))
				for j := range d {
					handles[j] = d[j].ReceiptHandle
				}
				e.Delete("q", handles)
				mu.Lock()
				received += len(d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got.Wait()
}

// TestMemoryPerMessage reports the engine's memory per queued message beyond
// its body (target: under 300 bytes). It measures, it does not assert a
// timing; it fails only if the figure is absurd (over 1 KiB), which would
// mean a leak.
func TestMemoryPerMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 200k messages")
	}
	e, err := Open(Options{Store: discardStore{}, BodyMemoryBudget: -1, ReadyWindow: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.CreateQueue("q", DefaultQueueConfig(), nil)
	const n = 200_000
	// Bodies are allocated up front so the delta is the engine's own cost.
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = []byte(fmt.Sprintf("%08d", i))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	batch := make([]Message, 10)
	for i := 0; i < n; i += 10 {
		for j := range batch {
			batch[j] = Message{Body: bodies[i+j]}
		}
		if _, err := e.Send("q", batch); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("engine memory per queued message beyond its body: %.0f bytes", per)
	if per > 1024 {
		t.Errorf("%.0f bytes per message: a leak?", per)
	}
	runtime.KeepAlive(bodies)
}

// discardStore keeps nothing, so memory measurements see only the engine.
type discardStore struct{}

func (discardStore) Write(*store.Batch, bool) (store.Pending, error)  { return store.Done{}, nil }
func (discardStore) Scan([]byte, func(key, value []byte) error) error { return nil }
func (discardStore) ScanRange(_, _ []byte, _ func(key, value []byte) error) error {
	return nil
}
func (discardStore) ScanLengths(_, _ []byte, _ func(key []byte, n int) error) error { return nil }
func (discardStore) Sync() error                                                    { return nil }
func (discardStore) Get([]byte) ([]byte, error)                                     { return nil, store.ErrNotFound }
func (discardStore) Close() error                                                   { return nil }

// TestDrainedQueueReleasesMemory: a queue that held many messages and
// drained gives its index memory back (Go maps never shrink by themselves).
func TestDrainedQueueReleasesMemory(t *testing.T) {
	e, err := Open(Options{Store: discardStore{}, BodyMemoryBudget: -1, ReadyWindow: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.CreateQueue("q", DefaultQueueConfig(), nil)
	batch := make([]Message, 10)
	for i := range batch {
		batch[i] = Message{Body: []byte("x")}
	}
	runtime.GC()
	var before, full, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 20_000; i++ {
		e.Send("q", batch)
	}
	runtime.GC()
	runtime.ReadMemStats(&full)
	for {
		d, _ := e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, WaitSet: true})
		if len(d) == 0 {
			break
		}
		h := make([]string, len(d))
		for i := range d {
			h[i] = d[i].ReceiptHandle
		}
		e.Delete("q", h)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("heap: %d MiB empty, %d MiB with 200,000 messages, %d MiB after draining", before.HeapAlloc>>20, full.HeapAlloc>>20, after.HeapAlloc>>20)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > int64(full.HeapAlloc-before.HeapAlloc)/4 {
		t.Errorf("a drained queue still holds %d bytes", grown)
	}
}
