package pebblestore

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/store"
)

// TestFaultFS checks the fault filesystem itself: an armed fault fails the
// store with that error, a failed sync makes nothing durable, and healing
// the disk does not revive a failed store (it stays failed; after a full
// disk the server opens a new one, TestReopenAfterWriteENOSPC).
func TestFaultFS(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(*FaultFS)
		err  error
	}{
		{"sync EIO", func(fs *FaultFS) { fs.FailSyncs(syscall.EIO) }, syscall.EIO},
		{"write ENOSPC", func(fs *FaultFS) { fs.FailWrites(syscall.ENOSPC) }, syscall.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := crashfs.New()
			fs := NewFaultFS(mem)
			fs.OnlyWAL(true)
			s := mustOpen(t, "db", Options{FS: fs})
			write(t, s, true, "before", "1")
			if fs.Injected() != 0 || !fs.FirstInjected().IsZero() {
				t.Fatal("a fault was injected before any was armed")
			}

			tc.arm(fs)
			err := durableSet(s, "during", "2")
			if !errors.Is(err, store.ErrFailed) || !errors.Is(err, tc.err) {
				t.Fatalf("durable write under the fault: %v, want ErrFailed wrapping %v", err, tc.err)
			}
			if fs.Injected() == 0 || fs.FirstInjected().IsZero() {
				t.Fatal("the fault was not counted")
			}

			fs.Heal()
			if err := durableSet(s, "during", "2"); !errors.Is(err, store.ErrFailed) {
				t.Fatalf("write after healing: %v, want ErrFailed (the store stays failed)", err)
			}

			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			_ = s.Close()
			s2 := mustOpen(t, "db", Options{FS: crashed})
			defer s2.Close()
			got := map[string]string{}
			if err := s2.Scan(nil, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
				t.Fatal(err)
			}
			if got["before"] != "1" {
				t.Fatalf("acknowledged key lost after the fault: %v", got)
			}
			if _, ok := got["during"]; ok {
				t.Fatalf("the unacknowledged write survived a crash although its sync failed: %v", got)
			}
		})
	}
}
