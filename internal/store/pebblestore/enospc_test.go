package pebblestore

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/store"
)

// TestReopenAfterWriteENOSPC: a store failed by a write that found no
// space (ENOSPC on the WAL) closes, in this process, without hanging;
// once space is back a new store opened on the same directory holds
// every durable write made before the fault and takes new ones. This is
// what lets the server reopen its store in place after a full disk
// (server.Supervise) instead of waiting for a restart.
func TestReopenAfterWriteENOSPC(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaultFS(vfs.Default)
	fs.OnlyWAL(true)
	s := mustOpen(t, dir, Options{FS: fs})
	for i := range 200 {
		write(t, s, true, fmt.Sprint("before-", i), "1")
	}
	fs.FailWrites(syscall.ENOSPC)
	if err := durableSet(s, "during", "2"); !errors.Is(err, store.ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("durable write on a full disk: %v, want ErrFailed wrapping ENOSPC", err)
	}
	if !s.FailedOnFullDisk() {
		t.Fatalf("FailedOnFullDisk = false for a store failed by %v", s.failure())
	}
	if err := ProbeSpace(fs, dir, 64<<10); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("space probe on the full disk: %v, want ENOSPC", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("close of the failed store: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("closing the failed store did not return in 30 s")
	}
	fs.Heal()
	if err := ProbeSpace(fs, dir, 64<<10); err != nil {
		t.Fatalf("space probe once space is back: %v", err)
	}
	if _, err := fs.Stat(filepath.Join(dir, ProbeFile)); err == nil {
		t.Fatal("the space probe left its file behind")
	}
	s2 := mustOpen(t, dir, Options{FS: fs})
	defer s2.Close()
	got := map[string]string{}
	if err := s2.Scan(nil, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if got[fmt.Sprint("before-", i)] != "1" {
			t.Fatalf("durable key before-%d lost across the in-place reopen", i)
		}
	}
	write(t, s2, true, "after", "3")
}

// TestFailedOnFullDiskOnlyForWrites: a failed sync, even one that reports
// ENOSPC (thin-provisioned and network filesystems report writeback
// failures so), and a write that failed with EIO are not a full disk the
// store may be reopened after.
func TestFailedOnFullDiskOnlyForWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(*FaultFS)
	}{
		{"sync ENOSPC", func(fs *FaultFS) { fs.FailSyncs(syscall.ENOSPC) }},
		{"write EIO", func(fs *FaultFS) { fs.FailWrites(syscall.EIO) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewFaultFS(vfs.NewMem())
			fs.OnlyWAL(true)
			s := mustOpen(t, "db", Options{FS: fs})
			defer s.Close()
			write(t, s, true, "before", "1")
			tc.arm(fs)
			if err := durableSet(s, "during", "2"); !errors.Is(err, store.ErrFailed) {
				t.Fatalf("durable write under the fault: %v, want ErrFailed", err)
			}
			if s.FailedOnFullDisk() {
				t.Fatalf("FailedOnFullDisk = true after %v", s.failure())
			}
		})
	}
}

// TestEveryLimiter: the first event goes through, the next ones within
// the period are held and counted, and the first after it goes through
// with that count.
func TestEveryLimiter(t *testing.T) {
	l := &everyLimiter{every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	if n, ok := l.allow(t0); !ok || n != 0 {
		t.Fatalf("first: %d %v", n, ok)
	}
	for i := range 5 {
		if _, ok := l.allow(t0.Add(time.Duration(i+1) * time.Second)); ok {
			t.Fatalf("event %d within the period went through", i)
		}
	}
	if n, ok := l.allow(t0.Add(10 * time.Second)); !ok || n != 5 {
		t.Fatalf("after the period: %d held, %v; want 5, true", n, ok)
	}
}

// durableSet writes key = value durably and returns the Write's or the
// Wait's error, for tests that expect one.
func durableSet(s store.Store, key, value string) error {
	var b store.Batch
	b.Set([]byte(key), []byte(value))
	p, err := s.Write(&b, true)
	if err != nil {
		return err
	}
	return p.Wait()
}
