package pebblestore

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestIdleCompactionCost measures what the idle compaction costs on a
// store that still holds a large live backlog: SLUICE_PERF_MESSAGES
// (default 1,000,000) bodies of 1 KiB are sent, the consumers drain 60 %
// of them (pausing at 45 %) and stop, and once the flush's own
// compactions are done the check runs (as the first light period after the flush would). It
// reports whether the store compacted, how long that took and what it
// wrote (and, when the check found too little garbage, what the same
// compaction costs when forced); it asserts only that the live bodies
// are still there. Slow and
// writes a gigabyte, so it runs only with SLUICE_PERF=1.
func TestIdleCompactionCost(t *testing.T) {
	if os.Getenv("SLUICE_PERF") != "1" {
		t.Skip("set SLUICE_PERF=1 to measure the idle compaction on a large live backlog (writes ~1 GB)")
	}
	n := 1_000_000
	if v := os.Getenv("SLUICE_PERF_MESSAGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("SLUICE_PERF_MESSAGES=%q: want a positive count", v)
		}
	}
	dir := t.TempDir()
	if d := os.Getenv("SLUICE_PERF_DIR"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "sluice-idlecost-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	b := &backlog{t: t, s: mustOpen(t, dir, Options{IdleFlushAfter: -1}), rng: rand.NewChaCha8([32]byte{5}), per: 1000}
	defer func() { _ = b.s.Close() }()

	t0 := time.Now()
	b.send(0, n)
	_ = b.period() // busy
	sent := time.Since(t0)
	// The drain pauses at 45 % long enough for an idle flush, then goes
	// on to 60 % (the pattern whose last flush pebble's picker may leave
	// alone: TestIdleCompactionFreesPausedDrain).
	settle := func() {
		if err := b.s.flush(); err != nil {
			t.Fatal(err)
		}
		poll.CheckFor(t, 10*time.Minute, poll.True("no compaction running and every table's statistics", func() bool {
			m := b.s.db.Metrics()
			return m.Compact.NumInProgress == 0 && m.Table.PendingStatsCollectionCount == 0
		}))
	}
	paused, drained := n*45/100, n*6/10
	t0 = time.Now()
	b.drain(0, paused)
	_ = b.period() // busy
	settle()
	b.drain(paused, drained)
	_ = b.period() // busy
	t.Logf("sent %d × 1 KiB in %v, drained %d (paused at %d) in %v", n, sent.Round(time.Millisecond), drained, paused, time.Since(t0).Round(time.Millisecond))
	settle()

	before := b.s.db.Metrics()
	var compacted, ready bool
	var err error
	var took time.Duration
	for {
		t0 = time.Now()
		compacted, ready, err = b.s.compactIfGarbage(t.Context())
		took = time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		if ready {
			break
		}
		time.Sleep(100 * time.Millisecond) // statistics still being collected
	}
	after := b.s.db.Metrics()
	size := func(m *pebble.Metrics) (tables int64, blobs uint64) {
		for _, l := range m.Levels {
			tables += l.TablesSize
		}
		return tables, m.BlobFiles.LiveSize
	}
	written := func(m *pebble.Metrics) (tables, blobs uint64) {
		for _, l := range m.Levels {
			tables += l.TableBytesCompacted
			blobs += l.BlobBytesCompacted
		}
		return tables, blobs
	}
	tb, bb := size(before)
	ta, ba := size(after)
	wt0, wb0 := written(before)
	wt1, wb1 := written(after)
	t.Logf("before: sstables %d MiB, live blob files %d MiB", tb>>20, bb>>20)
	t.Logf("compacted %v in %v; wrote %d MiB of sstables and %d MiB of blob files", compacted, took.Round(time.Millisecond), (wt1-wt0)>>20, (wb1-wb0)>>20)
	t.Logf("after: sstables %d MiB, live blob files %d MiB", ta>>20, ba>>20)
	if !compacted {
		// What it would have cost: the same whole-range compaction, forced.
		levels, err := b.s.db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		start, end := tablesSpan(levels)
		if err := b.s.db.Compact(t.Context(), start, end, false); err != nil {
			t.Fatal(err)
		}
		took = time.Since(t0)
		forced := b.s.db.Metrics()
		wt2, wb2 := written(forced)
		tf, bf := size(forced)
		t.Logf("forced, for its cost: %v; wrote %d MiB of sstables and %d MiB of blob files; after: sstables %d MiB, live blob files %d MiB",
			took.Round(time.Millisecond), (wt2-wt1)>>20, (wb2-wb1)>>20, tf>>20, bf>>20)
	}
	for i := drained; i < n; i += (n - drained) / 10 {
		if _, err := b.s.Get(b.key(i)); err != nil {
			t.Fatalf("live body %d: %v", i, err)
		}
	}
}
