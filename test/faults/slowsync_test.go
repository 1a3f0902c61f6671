package faults

import (
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// slowSyncFS delays every sync by a fixed time before passing it on, as a
// real disk's fsync takes time. On an in-memory filesystem a sync is
// instantaneous, so an OK given before the sync it depends on (a
// deduplicated send or a repeated delete answered while the original waits
// for its fsync) would almost never be caught by a power cut; with a disk's
// latency the window is wide enough to hit.
type slowSyncFS struct {
	vfs.FS
	delay time.Duration
}

func (fs slowSyncFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return slowSyncFile{File: f, delay: fs.delay}, nil
}

func (fs slowSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs slowSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs slowSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs slowSyncFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.FS.OpenDir(name)) }

// Unwrap returns the inner filesystem.
func (fs slowSyncFS) Unwrap() vfs.FS { return fs.FS }

type slowSyncFile struct {
	vfs.File
	delay time.Duration
}

func (f slowSyncFile) Sync() error {
	time.Sleep(f.delay)
	return f.File.Sync()
}

func (f slowSyncFile) SyncData() error {
	time.Sleep(f.delay)
	return f.File.SyncData()
}

func (f slowSyncFile) SyncTo(length int64) (bool, error) {
	time.Sleep(f.delay)
	return f.File.SyncTo(length)
}
