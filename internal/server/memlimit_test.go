package server

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestSoftMemoryLimitFollowsTheLiveHeap: the soft limit sits at the floor
// (the budgets plus softLimitSlack) while the live heap, half again,
// fits under it; once the live heap grows past that, the limit is lifted
// to 90 % of memory, so the collector is never held under a live heap;
// once the heap is small again, the floor is back.
func TestSoftMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // the test's own environment must not turn it off
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	o := DefaultOptions()
	o.BodyMemoryBudget, o.ReadyMemoryBudget = 8<<20, 8<<20
	floor := int64(softLimitSlack + 16<<20)
	ceiling := int64(memoryLimit() / 10 * 9)
	if ceiling <= 2*floor {
		t.Skipf("%d bytes of memory: too little to tell the floor from the ceiling", memoryLimit())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); RunSoftMemoryLimit(ctx, o, nil) }()
	defer func() { cancel(); <-done }()
	limit := func() int64 { return debug.SetMemoryLimit(-1) }

	runtime.GC()
	poll.CheckFor(t, 10*time.Second, poll.True("the limit at the floor", func() bool { return limit() == floor }))

	// A live heap the floor cannot hold with room to spare.
	held := make([][]byte, 0, 128)
	for range 128 {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		held = append(held, b)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("the limit lifted above a large live heap", func() bool {
		runtime.GC()
		return limit() == ceiling
	}))
	runtime.KeepAlive(held)
	held = nil

	poll.CheckFor(t, 10*time.Second, poll.True("the floor back once the heap is small", func() bool {
		runtime.GC()
		return limit() == floor
	}))
}

// TestSoftMemoryLimitLeavesGOMEMLIMIT: with GOMEMLIMIT set (or a budget
// off) the operator's limit stands: RunSoftMemoryLimit returns at once and
// sets nothing.
func TestSoftMemoryLimitLeavesGOMEMLIMIT(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	t.Setenv("GOMEMLIMIT", "1GiB")
	RunSoftMemoryLimit(context.Background(), DefaultOptions(), nil) // returns: nothing to run
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Fatalf("limit %d after RunSoftMemoryLimit with GOMEMLIMIT set, want %d unchanged", got, prev)
	}
	t.Setenv("GOMEMLIMIT", "")
	o := DefaultOptions()
	o.BodyMemoryBudget = -1
	RunSoftMemoryLimit(context.Background(), o, nil)
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Fatalf("limit %d after RunSoftMemoryLimit with no body budget, want %d unchanged", got, prev)
	}
}
