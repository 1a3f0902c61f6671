package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSyncCost is a measuring hook, not a test. With SLUICE_SYNC_COST=DIR
// it measures what one fdatasync costs on DIR's disk in CPU time, the
// kernel's and, on a VM, the virtual disk's work charged to the caller,
// and prints one line:
//
//	sync cost: N fdatasync of B bytes: C µs CPU, W µs wall each (writes alone: c µs CPU)
//
// Each of N rounds (SLUICE_SYNC_COST_N, default 3000) overwrites B bytes
// (SLUICE_SYNC_COST_BYTES, default 14336: a group commit of about ten
// 1 KiB messages with their keys) in a preallocated 64 MiB file and
// syncs, as a recycled write-ahead log does; CPU is the process's user
// plus system time (ProcCPU, as `sluice bench` reads a server's, in
// 10 ms ticks: about 3 µs a sync at the default N), less the same writes
// without syncs.
// Multiplied by a server's syncs per message (sluice_store_wal_sync_seconds_count
// on /metrics), it is the part of that server's CPU per message that its
// durability costs on this machine, which no server that acknowledges
// after an fsync avoids (docs/benchmarks.md, "The transport's floor";
// scripts/bench-sqs-floor.sh prints both).
func TestSyncCost(t *testing.T) {
	dir := os.Getenv("SLUICE_SYNC_COST")
	if dir == "" {
		t.Skip("set SLUICE_SYNC_COST=DIR to measure an fdatasync's CPU cost on DIR's disk")
	}
	n := envInt(t, "SLUICE_SYNC_COST_N", 3000)
	size := envInt(t, "SLUICE_SYNC_COST_BYTES", 14336)
	const span = 64 << 20
	if size <= 0 || size > span {
		t.Fatalf("SLUICE_SYNC_COST_BYTES=%d: want 1 to %d", size, span)
	}
	f, err := os.OpenFile(filepath.Join(dir, "sync-cost.dat"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	defer func() { _ = f.Close() }()
	chunk := make([]byte, 1<<20)
	for off := 0; off < span; off += len(chunk) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	round := func(sync bool) (cpu, wall time.Duration) {
		c0, w0 := selfCPU(t), time.Now()
		for i := 0; i < n; i++ {
			buf[0] = byte(i) // not the bytes already there
			if _, err := f.WriteAt(buf, int64(i*size)%(span-int64(size))); err != nil {
				t.Fatal(err)
			}
			if sync {
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					t.Fatal(err)
				}
			}
		}
		return selfCPU(t) - c0, time.Since(w0)
	}
	writeCPU, _ := round(false)
	syncCPU, syncWall := round(true)
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }
	fmt.Printf("sync cost: %d fdatasync of %d bytes: %.1f µs CPU, %.1f µs wall each (writes alone: %.1f µs CPU)\n",
		n, size, per(syncCPU-writeCPU), per(syncWall), per(writeCPU))
}

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

// selfCPU is this process's CPU time so far (ProcCPU).
func selfCPU(t *testing.T) time.Duration {
	d, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
