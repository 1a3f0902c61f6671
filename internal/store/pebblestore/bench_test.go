package pebblestore

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/store"
)

// BenchmarkDurableWrite measures durable 1 KiB writes on the real disk from
// 1, 16, 64 and 256 concurrent producers, each waiting for its own write to
// be durable before sending the next, as a broker's producers do. It
// reports throughput (ops/s) and WAL syncs per write, which shows how much
// group commit shares.
func BenchmarkDurableWrite(b *testing.B) {
	for _, writers := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchWrites(b, writers, true)
		})
	}
}

// BenchmarkNonDurableWrite is the same with durable=false, for scale: the
// cost of the commit pipeline without fsync.
func BenchmarkNonDurableWrite(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchWrites(b, writers, false)
		})
	}
}

func benchWrites(b *testing.B, writers int, durable bool) {
	var syncs atomic.Int64
	fs := &hookFS{FS: vfs.Default, onSync: func(name string) error {
		if strings.HasSuffix(name, ".log") {
			syncs.Add(1)
		}
		return nil
	}}
	s := mustOpen(b, b.TempDir(), Options{FS: fs})
	defer s.Close()
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte(i * 7)
	}

	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errc = make(chan error, writers)
	)
	syncs.Store(0)
	b.SetBytes(int64(len(value)))
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var batch store.Batch
			key := make([]byte, 0, 16)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				key = fmt.Appendf(key[:0], "m/%03d/%010d", w, i)
				batch.Reset()
				batch.Set(key, value)
				p, err := s.Write(&batch, durable)
				if err == nil {
					err = p.Wait()
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(syncs.Load())/float64(b.N), "syncs/op")
}
