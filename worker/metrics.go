package worker

import (
	"sync/atomic"
	"time"
)

// Metrics receives the worker's events, for counters and histograms
// (Prometheus, OpenTelemetry, expvar). Methods are called synchronously
// from the worker's goroutines, concurrently: they must be safe for
// concurrent use, fast, and must not block. Embed NopMetrics to implement
// only some of them.
type Metrics interface {
	// Received counts deliveries handed to the worker by one receive.
	Received(n int)
	// Processed counts deliveries the handler completed (acked).
	Processed()
	// Failed counts deliveries whose handler failed, by class.
	Failed(c Class)
	// Retried counts transient failures scheduled for an early retry
	// (within the retry budget), with their delay.
	Retried(delay time.Duration)
	// Deferred counts transient failures over the retry budget: the
	// message waits out a whole lease.
	Deferred()
	// DeadLettered counts deliveries the broker dead-lettered on the
	// worker's report (terminal, or the last allowed attempt).
	DeadLettered()
	// Duplicate counts deliveries skipped because the Deduper had seen
	// their key.
	Duplicate()
	// Released counts deliveries handed back unprocessed at shutdown.
	Released()
	// HandlerLatency observes how long each handler call took.
	HandlerLatency(d time.Duration)
	// BreakerChanged reports a circuit-breaker state change.
	BreakerChanged(from, to BreakerState)
}

// NopMetrics ignores every event.
type NopMetrics struct{}

func (NopMetrics) Received(int)                         {}
func (NopMetrics) Processed()                           {}
func (NopMetrics) Failed(Class)                         {}
func (NopMetrics) Retried(time.Duration)                {}
func (NopMetrics) Deferred()                            {}
func (NopMetrics) DeadLettered()                        {}
func (NopMetrics) Duplicate()                           {}
func (NopMetrics) Released()                            {}
func (NopMetrics) HandlerLatency(time.Duration)         {}
func (NopMetrics) BreakerChanged(from, to BreakerState) {}

// Stats are the worker's counters since it was created.
type Stats struct {
	Receives     uint64 // Receive calls that returned
	Received     uint64 // deliveries received
	Processed    uint64
	Failed       uint64 // handler failures of any class
	Terminal     uint64 // of which terminal
	Retried      uint64
	Deferred     uint64
	DeadLettered uint64
	Duplicates   uint64
	Released     uint64
	BreakerOpens uint64
	InFlight     int64 // deliveries being handled now
}

// counters are Stats kept with atomics.
type counters struct {
	receives, received, processed, failed, terminal, retried, deferred,
	deadLettered, duplicates, released, breakerOpens atomic.Uint64
	inFlight atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Receives: c.receives.Load(), Received: c.received.Load(), Processed: c.processed.Load(),
		Failed: c.failed.Load(), Terminal: c.terminal.Load(), Retried: c.retried.Load(),
		Deferred: c.deferred.Load(), DeadLettered: c.deadLettered.Load(), Duplicates: c.duplicates.Load(),
		Released: c.released.Load(), BreakerOpens: c.breakerOpens.Load(), InFlight: c.inFlight.Load(),
	}
}
