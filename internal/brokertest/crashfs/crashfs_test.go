package crashfs

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCrashCloneWhileReusing takes crash clones while another goroutine
// reuses files for writing, as pebble does with WAL files: with MemFS's own
// ReuseForWrite the two can deadlock (see the package comment); with FS's
// they must finish, and each clone must hold the file under one of its two
// names with what was synced.
func TestCrashCloneWhileReusing(t *testing.T) {
	fs := New()
	f, err := fs.Create("wal-0", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("synced")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	dir, err := fs.OpenDir("")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil { // the file's name is durable
		t.Fatal(err)
	}

	const rounds = 20000
	done := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // reuser
		defer wg.Done()
		for i := range rounds {
			g, err := fs.ReuseForWrite(fmt.Sprintf("wal-%d", i), fmt.Sprintf("wal-%d", i+1), vfs.WriteCategoryUnspecified)
			if err != nil {
				done <- err
				return
			}
			if err := g.Close(); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() { // cloner
		defer wg.Done()
		for range rounds / 10 {
			c := fs.CrashClone(vfs.CrashCloneCfg{})
			names, err := c.List("")
			if err != nil {
				done <- err
				return
			}
			if len(names) != 1 {
				done <- fmt.Errorf("a crash clone holds %v, want one reused file", names)
				return
			}
		}
	}()
	go func() { wg.Wait(); close(done) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ReuseForWrite and CrashClone deadlocked")
	}
}
