package pebblestore

import (
	"errors"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ProbeFile is the name of the file ProbeSpace writes in a store's
// directory (and removes). Pebble ignores a name it did not make.
const ProbeFile = "SLUICE-SPACE-PROBE"

// ProbeSpace writes size bytes to ProbeFile in dir on fs, syncs them and
// removes the file: nil when the directory can take a write of that size
// again (after the store failed on a full disk, FailedOnFullDisk), else
// the write's, the sync's or the removal's error.
func ProbeSpace(fs vfs.FS, dir string, size int) error {
	name := filepath.Join(dir, ProbeFile)
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	buf := make([]byte, 32<<10)
	var werr error
	for n := 0; n < size && werr == nil; n += len(buf) {
		_, werr = f.Write(buf[:min(len(buf), size-n)])
	}
	if werr == nil {
		werr = f.Sync()
	}
	return errors.Join(werr, f.Close(), fs.Remove(name))
}
