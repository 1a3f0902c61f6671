//go:build !sluice_nofsync && !sluice_nofsync_wal

package pebblestore

// The mutation switches of the fault harness, both false in every real
// build. See nofsync_on.go.
const (
	noFsync    = false
	noFsyncWAL = false
)
