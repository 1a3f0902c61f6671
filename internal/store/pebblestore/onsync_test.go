package pebblestore

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestOnSyncTimesWALSyncs checks that Options.OnSync sees every sync of a
// WAL file, and only those: a durable write is reported, a flush (which
// syncs sstables and the MANIFEST) adds nothing.
func TestOnSyncTimesWALSyncs(t *testing.T) {
	var walSyncs, otherSyncs, reported atomic.Int64
	fs := &hookFS{FS: vfs.Default, onSync: func(name string) error {
		if strings.HasSuffix(name, ".log") {
			walSyncs.Add(1)
		} else {
			otherSyncs.Add(1)
		}
		return nil
	}}
	s := mustOpen(t, t.TempDir(), Options{FS: fs, OnSync: func(d time.Duration) {
		if d < 0 {
			t.Errorf("negative sync duration %v", d)
		}
		reported.Add(1)
	}})
	before := reported.Load()
	for i := 0; i < 5; i++ {
		write(t, s, true, fmt.Sprintf("k%d", i), "v")
	}
	if got := reported.Load() - before; got < 1 {
		t.Fatalf("durable writes reported %d WAL syncs, want at least 1", got)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if otherSyncs.Load() == 0 {
		t.Fatal("the flush synced no sstable or MANIFEST; the test proves nothing")
	}
	if reported.Load() != walSyncs.Load() {
		t.Fatalf("OnSync reported %d syncs, the filesystem saw %d WAL syncs", reported.Load(), walSyncs.Load())
	}
}
