package engine

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// BenchmarkOpenColdBacklog measures engine.Open over a pebble store holding
// one standard queue with a deep backlog of 1 KiB messages
// (SLUICE_BENCH_BACKLOG messages, default 200,000; the issue #13 figure is
// 2,000,000, about 2 GiB of disk), with the default ready window and with
// none (everything in memory, as before it). It reports, it asserts
// nothing:
//
//	SLUICE_BENCH_BACKLOG=2000000 go test -run '^$' -bench OpenColdBacklog -benchtime 1x ./internal/engine/
func BenchmarkOpenColdBacklog(b *testing.B) {
	dir, _ := fillBacklog(b, 0)
	for _, tc := range []struct {
		name   string
		window int
	}{{"window", 0}, {"nowindow", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				st, err := pebblestore.Open(dir, pebblestore.Options{})
				if err != nil {
					b.Fatal(err)
				}
				e, err := Open(Options{Store: st, ReadyWindow: tc.window})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				info, _ := e.GetQueue("q")
				b.ReportMetric(float64(info.Visible), "messages")
				b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(e.MemoryHeld())/(1<<20), "held-MiB")
				e.Close()
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// backlogSize is SLUICE_BENCH_BACKLOG, default 200,000.
func backlogSize(b *testing.B) int {
	if s := os.Getenv("SLUICE_BENCH_BACKLOG"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	return 200_000
}

// fillBacklog writes backlogSize 1 KiB messages into queue "q" of a new
// pebble store through an engine with the given ReadyWindow, closes both
// and returns the directory and the count.
func fillBacklog(b *testing.B, window int) (string, int) {
	n := backlogSize(b)
	dir := b.TempDir()
	st, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := Open(Options{Store: st, ReadyWindow: window})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := e.CreateQueue("q", DefaultQueueConfig(), nil); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	const writers = 16
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]Message, 10)
			for i := 0; i < n/writers/10; i++ {
				for j := range batch {
					batch[j] = Message{Body: body}
				}
				if _, err := e.Send("q", batch); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	e.Close()
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	return dir, n / writers / 10 * writers * 10
}

// BenchmarkDrainColdBacklog measures draining a backlog of 1 KiB messages
// (SLUICE_BENCH_BACKLOG, default 200,000) after a restart, by 4 consumers
// receiving and deleting 10 at a time on pebble, with the default ready
// window and without one. It reports messages per second; it asserts
// nothing:
//
//	go test -run '^$' -bench DrainColdBacklog -benchtime 1x ./internal/engine/
func BenchmarkDrainColdBacklog(b *testing.B) {
	for _, tc := range []struct {
		name   string
		window int
	}{{"window", 0}, {"nowindow", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir, n := fillBacklog(b, tc.window)
				st, err := pebblestore.Open(dir, pebblestore.Options{})
				if err != nil {
					b.Fatal(err)
				}
				e, err := Open(Options{Store: st, ReadyWindow: tc.window})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				var left atomic.Int64
				left.Store(int64(n))
				var wg sync.WaitGroup
				for c := 0; c < 4; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for left.Load() > 0 {
							d, err := e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, WaitSet: true})
							if err != nil {
								b.Error(err)
								return
							}
							hs := make([]string, len(d))
							for j := range d {
								hs[j] = d[j].ReceiptHandle
							}
							if len(hs) > 0 {
								if _, err := e.Delete("q", hs); err != nil {
									b.Error(err)
									return
								}
							}
							left.Add(-int64(len(d)))
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msg/s")
				b.StopTimer()
				e.Close()
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
