package pebblestore

import (
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FaultFS is a vfs.FS for tests that passes every call to an inner
// filesystem until told to fail writes or syncs, as a failing or full disk
// would. Pass it as Options.FS. It is exported so that fault-injection
// tests outside this package (test/faults) can run a whole broker on it.
//
// A failed write writes nothing (as a write on a full disk that fails
// before its first byte); a failed sync syncs nothing, so on a
// vfs.NewCrashableMem inner filesystem a crash clone drops what the failed
// sync should have made durable.
//
// Faults apply to files opened for writing (created, reused or opened
// read-write) and to directories opened for syncing, whether opened before
// or after the fault was armed. By default they hit every such file; OnlyWAL
// restricts them to the write-ahead log and the space probe (ProbeSpace,
// which stands for the WAL's next write).
type FaultFS struct {
	vfs.FS

	mu       sync.Mutex
	writeErr error
	syncErr  error
	onlyWAL  bool
	// holdDir, when set, holds syncs of files under it until
	// ReleaseSyncs closes release; held counts the syncs waiting.
	holdDir string
	release chan struct{}
	held    atomic.Int64

	injected atomic.Int64
	first    atomic.Int64 // UnixNano of the first injected error; 0: none
}

// NewFaultFS wraps inner.
func NewFaultFS(inner vfs.FS) *FaultFS { return &FaultFS{FS: inner} }

// FailWrites makes every later write fail with err (nil stops it).
func (fs *FaultFS) FailWrites(err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.writeErr = err
}

// FailSyncs makes every later sync fail with err (nil stops it).
func (fs *FaultFS) FailSyncs(err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.syncErr = err
}

// OnlyWAL restricts faults to pebble's write-ahead log files (*.log) and
// the space probe (ProbeFile).
// Pebble stops the process (Logger.Fatalf) when a MANIFEST sync fails, so
// tests that must keep their process alive confine faults to the WAL.
func (fs *FaultFS) OnlyWAL(only bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.onlyWAL = only
}

// HoldSyncs makes every later sync of a file under dir wait until
// ReleaseSyncs, as a disk whose flush takes as long as the test wants.
func (fs *FaultFS) HoldSyncs(dir string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.holdDir, fs.release = dir, make(chan struct{})
}

// ReleaseSyncs lets the held syncs, and every later one, go on.
func (fs *FaultFS) ReleaseSyncs() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.release != nil {
		close(fs.release)
		fs.holdDir, fs.release = "", nil
	}
}

// HeldSyncs returns how many syncs HoldSyncs holds now.
func (fs *FaultFS) HeldSyncs() int64 { return fs.held.Load() }

// hold waits while syncs of name are held.
func (fs *FaultFS) hold(name string) {
	fs.mu.Lock()
	ch := fs.release
	if ch == nil || !strings.HasPrefix(name, fs.holdDir+string(filepath.Separator)) {
		fs.mu.Unlock()
		return
	}
	fs.mu.Unlock()
	fs.held.Add(1)
	<-ch
	fs.held.Add(-1)
}

// Heal stops every fault: the disk works again.
func (fs *FaultFS) Heal() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.writeErr, fs.syncErr = nil, nil
}

// Injected returns how many calls have failed because of a fault.
func (fs *FaultFS) Injected() int64 { return fs.injected.Load() }

// FirstInjected returns when the first fault was injected (zero if none).
// It is recorded before the failing call returns, so anything that starts
// after it can observe the failure.
func (fs *FaultFS) FirstInjected() time.Time {
	if n := fs.first.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// fault returns the error to inject for an operation on name, or nil,
// after holding a sync that HoldSyncs holds.
func (fs *FaultFS) fault(name string, sync bool) error {
	if sync {
		fs.hold(name)
	}
	fs.mu.Lock()
	err := fs.writeErr
	if sync {
		err = fs.syncErr
	}
	if err != nil && fs.onlyWAL && !strings.HasSuffix(name, ".log") && filepath.Base(name) != ProbeFile {
		err = nil
	}
	fs.mu.Unlock()
	if err != nil {
		fs.injected.Add(1)
		fs.first.CompareAndSwap(0, time.Now().UnixNano())
	}
	return err
}

func (fs *FaultFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, name: name, fs: fs}, nil
}

// Create wraps the created file.
func (fs *FaultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

// ReuseForWrite wraps the reused file.
func (fs *FaultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

// OpenReadWrite wraps the opened file.
func (fs *FaultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

// OpenDir wraps the directory, whose Sync can fail too.
func (fs *FaultFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(name, f, err)
}

// Unwrap returns the inner filesystem.
func (fs *FaultFS) Unwrap() vfs.FS { return fs.FS }

type faultFile struct {
	vfs.File
	name string
	fs   *FaultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.fault(f.name, false); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.fault(f.name, false); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fault(f.name, true); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) SyncData() error {
	if err := f.fs.fault(f.name, true); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *faultFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.fault(f.name, true); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}
