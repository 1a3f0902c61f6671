//go:build sluice_nofsync_wal && !sluice_nofsync

package pebblestore

// sluice_nofsync_wal turns only the write-ahead log's syncs into no-ops:
// the fsync every acknowledged write waits for. The store still opens after
// a power cut (its MANIFEST is synced), so what the harness must catch is
// acknowledged data missing. See nofsync_on.go.
const (
	noFsync    = false
	noFsyncWAL = true
)
