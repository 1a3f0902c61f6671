package bench

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"
)

// TestMachineCost is a measuring hook, not a test. With
// SLUICE_MACHINE_COST=1 it measures two costs of this machine that a
// replicated broker pays on every round at low rates and that differ
// widely between VMs, and prints one line for each:
//
//	wake cost: N round trips between two threads over pipes: W µs wall, C µs CPU each
//	fault cost: P fresh pages touched: C µs CPU each
//
// A round trip is two wake-ups of a thread blocked in read(2), each
// with its write and read: the hand-off a Raft round makes several times
// on each node (client reader to engine, engine to the Raft loop, the
// loop to the transport, the peer's reader to its loop, the log's writer
// to its syncer, and back). On a bare-metal host a round trip is a few
// microseconds; under a hypervisor that traps scheduling or page-table
// work it can be ten times that. A fault is a minor page fault on fresh
// anonymous memory, which a store pays when it touches a memtable it has
// just allocated. Compare the figures of two machines before comparing
// their latencies at a steady rate (docs/benchmarks.md, "What this VM
// costs per hand-off").
func TestMachineCost(t *testing.T) {
	if os.Getenv("SLUICE_MACHINE_COST") == "" {
		t.Skip("set SLUICE_MACHINE_COST=1 to measure this machine's wake-up and page-fault costs")
	}
	n := envInt(t, "SLUICE_MACHINE_COST_N", 20000)
	wall, cpu := wakeRoundTrips(t, n)
	fmt.Printf("wake cost: %d round trips between two threads over pipes: %.1f µs wall, %.1f µs CPU each\n",
		n, float64(wall.Nanoseconds())/1e3/float64(n), float64(cpu.Nanoseconds())/1e3/float64(n))
	pages := envInt(t, "SLUICE_MACHINE_COST_PAGES", 65536)
	per := faultCost(t, pages)
	fmt.Printf("fault cost: %d fresh pages touched: %.2f µs CPU each\n", pages, float64(per.Nanoseconds())/1e3)
}

// wakeRoundTrips ping-pongs one byte n times between this goroutine and
// another, each locked to its own thread, and returns the wall time and
// this process's CPU time they took.
func wakeRoundTrips(t *testing.T, n int) (wall, cpu time.Duration) {
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range []*os.File{r1, w1, r2, w2} {
			_ = f.Close()
		}
	}()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		b := make([]byte, 1)
		for i := 0; i < n; i++ {
			if _, err := r1.Read(b); err != nil {
				done <- err
				return
			}
			if _, err := w2.Write(b); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := make([]byte, 1)
	c0, w0 := selfCPU(t), time.Now()
	for i := 0; i < n; i++ {
		if _, err := w1.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := r2.Read(b); err != nil {
			t.Fatal(err)
		}
	}
	wall, cpu = time.Since(w0), selfCPU(t)-c0
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return wall, cpu
}

// faultCost maps pages fresh anonymous pages, touches each once, and
// returns the CPU time per page, less the same touches of the pages once
// they are resident. The best of three maps, as other work on the machine
// only adds.
func faultCost(t *testing.T, pages int) time.Duration {
	size := pages * os.Getpagesize()
	touch := func(m []byte) time.Duration {
		c0 := selfCPU(t)
		for i := 0; i < len(m); i += os.Getpagesize() {
			m[i] = 1
		}
		return selfCPU(t) - c0
	}
	var costs []time.Duration
	for round := 0; round < 3; round++ {
		m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		first := touch(m)
		again := touch(m)
		if err := syscall.Munmap(m); err != nil {
			t.Fatal(err)
		}
		costs = append(costs, (first-again)/time.Duration(pages))
	}
	sort.Slice(costs, func(i, j int) bool { return costs[i] < costs[j] })
	return costs[0]
}
