package server

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// memPollInterval is how often the memory watch reads the engine's count
// (two atomic loads: cheap).
const memPollInterval = 100 * time.Millisecond

// defaultMemoryFraction of the memory limit is the default
// memory_high_watermark, as RabbitMQ's vm_memory_high_watermark 0.4: the
// engine's count is an estimate, and the Go runtime needs headroom above
// the live heap for garbage collection.
const defaultMemoryFraction = 0.4

// Resource alarms, as RabbitMQ names them in connection.blocked.
const (
	alarmDisk   = "low on disk"
	alarmMemory = "low on memory"
)

// alarms combines the disk and memory watermarks into one admission state:
// the engine refuses new messages (ErrDiskFull, else ErrMemoryHigh) and
// AMQP publishers are blocked while either is raised.
type alarms struct {
	mu     sync.Mutex
	raised map[string]bool
}

// setAlarm raises or clears one alarm and applies the combined state; an
// alarm already in that state changes nothing.
func (s *Server) setAlarm(name string, on bool) {
	a := &s.alarms
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.raised[name] == on {
		return
	}
	if a.raised == nil {
		a.raised = map[string]bool{}
	}
	a.raised[name] = on
	var admission error
	reason := ""
	switch {
	case a.raised[alarmDisk]:
		admission, reason = engine.ErrDiskFull, alarmDisk
	case a.raised[alarmMemory]:
		admission, reason = engine.ErrMemoryHigh, alarmMemory
	}
	s.eng.SetAdmission(admission)
	s.amqp.SetAlarm(reason)
}

// memoryLimit returns the memory available to the process: the cgroup
// limit (v2 memory.max, else v1 memory.limit_in_bytes) when there is one,
// else the machine's physical memory; 0 if neither can be read.
func memoryLimit() uint64 {
	var limit uint64
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < 1<<62 {
			limit = n // "max" or v1's huge "unlimited" do not parse or are skipped
			break
		}
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		phys := uint64(si.Totalram) * uint64(si.Unit)
		if limit == 0 || phys < limit {
			limit = phys
		}
	}
	return limit
}

// memoryWatermark resolves Options.MemoryHighWatermark: positive is bytes,
// 0 is defaultMemoryFraction of memoryLimit, negative is off (0 returned).
func memoryWatermark(o int64) int64 {
	switch {
	case o > 0:
		return o
	case o < 0:
		return 0
	}
	return int64(float64(memoryLimit()) * defaultMemoryFraction)
}

// watchMemory applies back-pressure on memory: when the engine's count
// (Engine.MemoryHeld: message index entries with attributes and envelopes,
// bodies held in memory, dedup entries) reaches the watermark, new messages
// are refused (SQS: 503 ServiceUnavailable, retryable; AMQP: publishers
// blocked, connection.blocked "low on memory"), until it falls below 90% of
// the watermark. Receives, deletes and acks go on: they are what frees it.
func (s *Server) watchMemory(ctx context.Context, interval time.Duration) {
	high := s.memHigh
	if high <= 0 {
		return
	}
	low := high - high/10
	raised := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		held := s.eng.MemoryHeld()
		switch {
		case !raised && held >= high:
			raised = true
			s.setAlarm(alarmMemory, true)
			s.log.Error("memory high watermark reached: refusing new messages until the backlog drains", "held_bytes", held, "memory_high_watermark", high)
		case raised && held < low:
			raised = false
			s.setAlarm(alarmMemory, false)
			s.log.Info("memory below the watermark again: accepting new messages", "held_bytes", held)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// limitRuntimeMemory sets the Go runtime's soft memory limit to 90% of the
// memory limit unless GOMEMLIMIT is set. Recovery loads every accepted
// message's index at once with a relaxed GC target (server.New); the soft
// limit makes the collector work harder instead of letting the heap grow
// past what the machine has, so a backlog admitted under the memory
// watermark (40% of the limit by default) can always be loaded again.
func limitRuntimeMemory() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if l := memoryLimit(); l > 0 {
		debug.SetMemoryLimit(int64(l / 10 * 9))
	}
}
