package raftstore

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// TestCompactionSyncDoesNotStallCommits: before a log cut the state store
// must be synced; that sync runs off the Raft loop, so writes go on
// committing while it lasts, and the cut happens once it is done. With the
// sync on the loop (the code before 2026-11-29) the writes below wait for
// the held sync and the test fails after 30 s.
func TestCompactionSyncDoesNotStallCommits(t *testing.T) {
	fs := pebblestore.NewFaultFS(vfs.Default)
	var stateDir string
	c := startClusterTuned(t, 1, false, func(_ int, cfg *Config) {
		lowThresholds(0, cfg)
		stateDir = filepath.Join(cfg.Dir, stateDirName)
		cfg.FS = fs
	})
	t.Cleanup(fs.ReleaseSyncs) // runs before the cluster's Close: no node stuck in a sync
	nd := c.nodes[c.leader(-1)]
	s := nd.Store()
	// write writes n keys, failing the test if they do not all commit
	// within 30 s (generous: each takes milliseconds).
	write := func(prefix string, n int) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			for i := range n {
				if err := writeKV(s, fmt.Sprint(prefix, i), value(i)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("writes of %q stalled behind the compaction's state store sync", prefix)
		}
	}
	first := func() uint64 { return nd.Status().FirstIndex }
	// The status is refreshed at the end of each pass of the loop: one
	// write makes sure it shows the log as bootstrapped.
	write("warm", 1)
	poll.CheckFor(t, 10*time.Second, poll.True("the status to show the log", func() bool { return first() > 0 }))
	start := first()
	fs.HoldSyncs(stateDir)
	// Past the compaction threshold: the loop starts the state store's
	// sync, which the filesystem holds.
	write("a", testCompactEntries+testKeepEntries+5)
	poll.CheckFor(t, 10*time.Second, poll.True("the state store's sync to be held", func() bool { return fs.HeldSyncs() > 0 }))
	// Writes commit meanwhile.
	write("b", 3*testCompactEntries)
	if fi := first(); fi != start {
		t.Fatalf("the log was cut (first index %d, %d before) before the state store was synced", fi, start)
	}
	fs.ReleaseSyncs()
	poll.CheckFor(t, 10*time.Second, func() error {
		if err := writeKV(s, "tick", "1"); err != nil { // wakes the loop
			return err
		}
		if fi := first(); fi == start {
			return fmt.Errorf("not cut yet (first index %d)", fi)
		}
		return nil
	})
}
