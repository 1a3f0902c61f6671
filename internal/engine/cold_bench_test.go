package engine

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

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
	n := 200_000
	if s := os.Getenv("SLUICE_BENCH_BACKLOG"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	dir := b.TempDir()
	st, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := Open(Options{Store: st})
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
