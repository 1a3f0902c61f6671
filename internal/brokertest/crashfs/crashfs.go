// Package crashfs is the crashable in-memory filesystem of the tests that
// cut power: pebble's vfs.NewCrashableMem, with a crash clone that cannot
// deadlock against a WAL file being reused.
//
// In pebble v2.1.7, MemFS.ReuseForWrite read-locks the filesystem's clone
// lock and then calls Rename, which read-locks it again. A CrashClone that
// asks for the write lock between the two blocks the second read lock, and
// both wait forever (a CI run on 2026-12-04 hung in pebblestore's
// TestPowerLoss for 21 minutes: ReuseForWrite → Rename in RLock, CrashClone
// in Lock). FS.ReuseForWrite renames and opens without holding the lock
// across the two, so a clone taken between them sees the file renamed and
// not yet reopened — a state a real power cut can also leave.
//
// It imports nothing of Sluice, so tests of any package may use it.
package crashfs

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is a crashable in-memory vfs.FS. The zero value is not usable; call
// New.
type FS struct {
	*vfs.MemFS
}

// New returns an empty crashable filesystem.
func New() FS { return FS{vfs.NewCrashableMem()} }

// CrashClone returns what a power cut at this moment could leave: every
// synced byte and, as cfg says, some of the unsynced ones. The receiver
// stays usable (the process that "lost power" may still be shutting down).
func (f FS) CrashClone(cfg vfs.CrashCloneCfg) FS { return FS{f.MemFS.CrashClone(cfg)} }

// ReuseForWrite implements vfs.FS: it renames oldname to newname and opens
// newname for writing, without MemFS's recursive read lock (see the
// package comment).
func (f FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := f.MemFS.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return f.MemFS.OpenReadWrite(newname, category)
}
