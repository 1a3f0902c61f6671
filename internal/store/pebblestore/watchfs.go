package pebblestore

import (
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// watchFS wraps the store's filesystem so that the store learns of a failed
// write or sync the moment it happens, before pebble passes the error on to
// any waiting writer. Without it, the store would learn of a WAL failure
// only from a durable writer's Wait, and non-durable writes could keep
// flowing into a WAL that pebble can no longer write (pebble panics when it
// then tries to rotate that WAL).
//
// Any write or sync error on any file fails the store, not only on the WAL:
// after an fsync error the disk is suspect, and a broker should stop rather
// than guess which files are still trustworthy.
//
// It also times the syncs of WAL files for Options.OnSync.
type watchFS struct {
	vfs.FS
	onErr     func(error)
	onWALSync func(time.Duration) // nil: syncs are not timed
}

func (fs *watchFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	wf := &watchFile{File: f, name: name, onErr: fs.onErr}
	if isWAL(name) {
		wf.onSync = fs.onWALSync
	}
	return wf, nil
}

// isWAL reports whether name is one of pebble's write-ahead logs, which
// pebble names NNNNNN.log (NNNNNN-NNN.log after a WAL failover).
func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// Create wraps the created file.
func (fs *watchFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

// ReuseForWrite wraps the reused file (pebble recycles WAL files).
func (fs *watchFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

// OpenReadWrite wraps the opened file.
func (fs *watchFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

// OpenDir wraps the directory, whose Sync makes file creations durable.
func (fs *watchFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(name, f, err)
}

// Unwrap returns the wrapped filesystem.
func (fs *watchFS) Unwrap() vfs.FS { return fs.FS }

// IOError is a failed write or sync of one of the store's files, as the
// store records it (Op is "write" or "sync").
type IOError struct {
	Op, File string
	Err      error
}

func (e *IOError) Error() string { return e.Op + " " + e.File + ": " + e.Err.Error() }

// Unwrap returns the operating system's error.
func (e *IOError) Unwrap() error { return e.Err }

type watchFile struct {
	vfs.File
	name   string
	onErr  func(error)
	onSync func(time.Duration) // set on WAL files when the store times syncs
}

func (f *watchFile) check(op string, err error) error {
	if err != nil {
		f.onErr(&IOError{Op: op, File: f.name, Err: err})
	}
	return err
}

func (f *watchFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.check("write", err)
}

func (f *watchFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.check("write", err)
}

// timed returns the time a sync starts, for done; zero when syncs of this
// file are not timed.
func (f *watchFile) timed() time.Time {
	if f.onSync == nil {
		return time.Time{}
	}
	return time.Now()
}

func (f *watchFile) done(start time.Time) {
	if f.onSync != nil {
		f.onSync(time.Since(start))
	}
}

func (f *watchFile) Sync() error {
	if f.skipSync() {
		return nil // mutation build: see nofsync_on.go
	}
	start := f.timed()
	err := f.File.Sync()
	f.done(start)
	return f.check("sync", err)
}

func (f *watchFile) SyncData() error {
	if f.skipSync() {
		return nil // mutation build: see nofsync_on.go
	}
	start := f.timed()
	err := f.File.SyncData()
	f.done(start)
	return f.check("sync", err)
}

func (f *watchFile) SyncTo(length int64) (bool, error) {
	if f.skipSync() {
		return false, nil // mutation build: see nofsync_on.go
	}
	start := f.timed()
	full, err := f.File.SyncTo(length)
	f.done(start)
	return full, f.check("sync", err)
}

// skipSync reports whether a mutation build (nofsync_on.go) turns this
// file's syncs into no-ops; always false in a real build.
func (f *watchFile) skipSync() bool { return noFsync || noFsyncWAL && isWAL(f.name) }
