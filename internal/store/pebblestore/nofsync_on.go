//go:build sluice_nofsync

package pebblestore

// Mutation builds exist only to prove that the fault harness can fail:
// scripts/mutation-check.sh runs the power-loss tests under each tag and
// fails CI if they pass. Never ship one.
//
// sluice_nofsync turns every sync the store asks of its filesystem (WAL,
// sstables, MANIFEST, directories) into a no-op that reports success.
const (
	noFsync    = true
	noFsyncWAL = true
)
