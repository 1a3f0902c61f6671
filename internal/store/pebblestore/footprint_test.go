package pebblestore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/store"
)

// diskUsage is the bytes dir's files occupy on disk (allocated blocks,
// which is what preallocated WAL files cost), and the WAL's share.
func diskUsage(t *testing.T, dir string) (total, wal int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n = max(n, st.Blocks*512)
		}
		total += n
		if strings.HasSuffix(p, ".log") {
			wal += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total, wal
}

// A running store holding a thousand small messages takes a few
// megabytes, not the 213 MB of three WAL files preallocated for 64 MiB
// memtables; restarts (each starts a WAL) do not pile them up.
func TestSmallStoreFootprint(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		s := mustOpen(t, dir, Options{})
		for i := range 350 {
			var b store.Batch
			b.Set(fmt.Appendf(nil, "m/%d/%06d", round, i), []byte(strings.Repeat("x", 512)))
			p, err := s.Write(&b, true)
			if err != nil || p.Wait() != nil {
				t.Fatal(err)
			}
		}
		total, wal := diskUsage(t, dir)
		t.Logf("round %d, running: data dir %d bytes, WAL %d bytes", round, total, wal)
		if total > 32<<20 {
			t.Fatalf("round %d: %d messages take %d bytes on disk (WAL %d)", round, 350*(round+1), total, wal)
		}
		if round < 2 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			defer s.Close()
		}
	}
}

func TestMemTableSizeFor(t *testing.T) {
	// Sparse files on the real disk: their sizes are what counts, and
	// writing 2.8 GiB into a vfs.MemFS took over four minutes under the
	// race detector.
	fs := vfs.Default
	dir := t.TempDir()
	if got := memTableSizeFor(fs, filepath.Join(dir, "missing")); got != MinMemTableSize {
		t.Fatalf("missing dir: %d", got)
	}
	put := func(name string, n int64) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(dir, name), n); err != nil {
			t.Fatal(err)
		}
	}
	put("000001.sst", 100<<20) // 100 MiB of sstables → 8 MiB (100/16 = 6.25, min 8)
	put("000002.log", 500<<20) // WAL files do not count
	if got := memTableSizeFor(fs, dir); got != MinMemTableSize {
		t.Fatalf("100 MiB: %d", got)
	}
	put("000003.sst", 100<<20) // 200 MiB → 12.5 MiB → 16 MiB
	if got := memTableSizeFor(fs, dir); got != 16<<20 {
		t.Fatalf("200 MiB: %d", got)
	}
	put("000004.sst", 2<<30) // beyond 256 MiB → capped
	if got := memTableSizeFor(fs, dir); got != DefaultMemTableSize {
		t.Fatalf("2.2 GiB: %d", got)
	}
}
