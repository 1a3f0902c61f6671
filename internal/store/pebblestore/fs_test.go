package pebblestore

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// hookFS wraps a vfs.FS so that every sync of a file it opens for writing
// first calls onSync with the file's name. If onSync returns an error, the
// sync fails with it and the data is not synced.
type hookFS struct {
	vfs.FS
	onSync func(name string) error
}

func (fs *hookFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, name: name, fs: fs}, nil
}

func (fs *hookFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *hookFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *hookFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

// Unwrap returns the wrapped FS.
func (fs *hookFS) Unwrap() vfs.FS { return fs.FS }

type hookFile struct {
	vfs.File
	name string
	fs   *hookFS
}

func (f *hookFile) Sync() error {
	if err := f.fs.onSync(f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *hookFile) SyncData() error {
	if err := f.fs.onSync(f.name); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *hookFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.onSync(f.name); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}
