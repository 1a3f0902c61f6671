package server

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// The Go collector lets the heap grow to twice what is live before it
// runs (GOGC 100). In a build without cgo (the release binaries) pebble's
// memtables and block cache are on the Go heap too, so a broker holding
// its two budgets' worth (96 MiB of bodies and window index by default)
// peaked near 360 MiB of RSS (docs/reliability.md, "The release build,
// and GOMEMLIMIT"). A fixed soft
// limit under that would cost nothing while the live heap stays well
// under it, and make the collector run nearly all the time once the live
// heap reaches it (many connections, a large in-flight set). So the
// limit follows the live heap: held at a floor sized from the memory
// budgets while the live heap leaves a third of it free, lifted (the
// collector's default, and the 90 % of memory set by limitRuntimeMemory)
// once it does not.

// softLimitSlack is what the floor allows above the two memory budgets:
// pebble's memtables and block cache (up to about 48 MiB, on the Go heap
// without cgo), the Go runtime, connections and everything else.
const softLimitSlack = 104 << 20

// softLimitPoll is how often RunSoftMemoryLimit reads the live heap.
const softLimitPoll = 250 * time.Millisecond

// RunSoftMemoryLimit keeps the Go runtime's soft memory limit at a floor
// (the body and ready memory budgets plus softLimitSlack: 200 MiB with
// the defaults) while the live heap, half again, and the runtime's other
// memory fit under it, and at 90 % of the memory limit (as
// limitRuntimeMemory sets it) otherwise, until ctx ends. It does nothing
// when GOMEMLIMIT is set (the operator's limit stands), when either
// budget is off, or when the floor is not below 90 % of memory. Process
// wide: `sluice server` runs it once, not each server (tests running
// several servers in one process run none).
func RunSoftMemoryLimit(ctx context.Context, opts Options, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" || opts.BodyMemoryBudget < 0 || opts.ReadyMemoryBudget < 0 {
		return
	}
	floor := softLimitSlack + budget(opts.BodyMemoryBudget, engine.DefaultBodyMemoryBudget) + budget(opts.ReadyMemoryBudget, engine.DefaultReadyMemoryBudget)
	ceiling := int64(memoryLimit() / 10 * 9)
	if ceiling <= 0 || floor >= ceiling {
		return
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	for _, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			log.Warn("the Go runtime does not report a memory metric: no soft memory limit of the broker's own", "metric", s.Name)
			return
		}
	}
	atFloor := false
	t := time.NewTicker(softLimitPoll)
	defer t.Stop()
	for {
		metrics.Read(samples)
		live := int64(samples[0].Value.Uint64())
		// What the limit counts besides the heap: stacks, the runtime's
		// metadata and the rest.
		other := int64(samples[1].Value.Uint64())
		for _, s := range samples[2:] {
			other -= int64(s.Value.Uint64())
		}
		want := live + live/2 + other
		// Lifted at the floor, back at 90 % of it: no flapping at the
		// edge.
		fits := want <= floor
		if !atFloor {
			fits = want <= floor/10*9
		}
		if fits != atFloor {
			atFloor = fits
			limit := ceiling
			if fits {
				limit = floor
			}
			debug.SetMemoryLimit(limit)
			log.Debug("Go soft memory limit set", "limit_bytes", limit, "live_heap_bytes", live, "other_runtime_bytes", other)
		} else if atFloor {
			// A server opened meanwhile (a restart in place) set the
			// ceiling again.
			debug.SetMemoryLimit(floor)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// budget resolves a memory budget option: 0 is def.
func budget(o, def int64) int64 {
	if o == 0 {
		return def
	}
	return o
}
