package raftstore

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// gatedFS is the disk filesystem with the syncs of files under one
// directory held while its gate is shut: a disk whose fdatasync of the
// state store takes as long as the test wants.
type gatedFS struct {
	vfs.FS
	dir string

	mu      sync.Mutex
	shut    bool
	open    chan struct{} // closed when the gate opens
	waiting int           // syncs held now
}

func newGatedFS() *gatedFS {
	return &gatedFS{FS: vfs.Default, open: make(chan struct{})}
}

// shutGate holds every later sync under the directory until openGate.
func (g *gatedFS) shutGate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut, g.open = true, make(chan struct{})
}

func (g *gatedFS) openGate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		g.shut = false
		close(g.open)
	}
}

func (g *gatedFS) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// pass waits while the gate is shut.
func (g *gatedFS) pass() {
	g.mu.Lock()
	if !g.shut {
		g.mu.Unlock()
		return
	}
	ch := g.open
	g.waiting++
	g.mu.Unlock()
	<-ch
	g.mu.Lock()
	g.waiting--
	g.mu.Unlock()
}

func (g *gatedFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasPrefix(name, g.dir+string(filepath.Separator)) {
		return f, err
	}
	return &gatedFile{File: f, g: g}, nil
}

func (g *gatedFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, cat)
	return g.wrap(name, f, err)
}

func (g *gatedFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.ReuseForWrite(oldname, newname, cat)
	return g.wrap(newname, f, err)
}

func (g *gatedFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name, cat, opts...)
	return g.wrap(name, f, err)
}

type gatedFile struct {
	vfs.File
	g *gatedFS
}

func (f *gatedFile) Sync() error {
	f.g.pass()
	return f.File.Sync()
}

func (f *gatedFile) SyncData() error {
	f.g.pass()
	return f.File.SyncData()
}

func (f *gatedFile) SyncTo(length int64) (bool, error) {
	f.g.pass()
	return f.File.SyncTo(length)
}

// TestCompactionSyncDoesNotStallCommits: before a log cut the state store
// must be synced; that sync runs off the Raft loop, so writes go on
// committing while it lasts, and the cut happens once it is done. With the
// sync on the loop (the code before 2026-11-29) the writes below wait for
// the gate and the test times out.
func TestCompactionSyncDoesNotStallCommits(t *testing.T) {
	g := newGatedFS()
	c := startClusterTuned(t, 1, false, func(_ int, cfg *Config) {
		lowThresholds(0, cfg)
		g.dir = filepath.Join(cfg.Dir, stateDirName) // before the node opens
		cfg.FS = g
	})
	t.Cleanup(g.openGate) // runs before the cluster's Close: no node stuck in a sync
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
	g.shutGate()
	// Past the compaction threshold: the loop starts the state store's
	// sync, which the gate holds.
	write("a", testCompactEntries+testKeepEntries+5)
	poll.CheckFor(t, 10*time.Second, poll.True("the state store's sync to be held", func() bool { return g.held() > 0 }))
	// Writes commit meanwhile.
	write("b", 3*testCompactEntries)
	if fi := first(); fi != start {
		t.Fatalf("the log was cut (first index %d, %d before) before the state store was synced", fi, start)
	}
	g.openGate()
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
