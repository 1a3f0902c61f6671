package alerts

import (
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// arrivals counts dead-letter arrivals per target queue in per-minute
// buckets, for the dlq_growth rule. Each queue has a fixed ring of
// buckets covering the window plus the current minute, so memory is
// bounded by (queues that received dead letters) × (window in minutes + 1)
// whatever the arrival rate. A queue's ring also marks it as a dead-letter
// queue for the depth rule even when no queue's DeadLetterPolicy names it
// (a front-end may dead-letter by other means); rings of deleted queues
// are dropped at evaluation.
type arrivals struct {
	slots int // buckets per queue: window in minutes, rounded up, + 1

	mu      sync.Mutex
	byQueue map[string][]bucket
}

type bucket struct {
	minute int64 // Unix minute the count belongs to
	n      int
}

func newArrivals(window time.Duration) *arrivals {
	slots := int((window+time.Minute-1)/time.Minute) + 1
	return &arrivals{slots: slots, byQueue: make(map[string][]bucket)}
}

func unixMinute(t time.Time) int64 {
	s := t.Unix()
	m := s / 60
	if s < 0 && s%60 != 0 {
		m-- // floor for times before 1970
	}
	return m
}

// add counts one arrival in queue at now.
func (a *arrivals) add(queue string, now time.Time) {
	m := unixMinute(now)
	a.mu.Lock()
	defer a.mu.Unlock()
	ring := a.byQueue[queue]
	if ring == nil {
		ring = make([]bucket, a.slots)
		a.byQueue[queue] = ring
	}
	i := int(((m % int64(a.slots)) + int64(a.slots)) % int64(a.slots))
	if ring[i].minute != m {
		ring[i] = bucket{minute: m}
	}
	ring[i].n++
}

// count returns the arrivals in queue during the current minute and the
// slots-1 whole minutes before it, and whether queue has a ring at all.
func (a *arrivals) count(queue string, now time.Time) (n int, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ring, ok := a.byQueue[queue]
	return a.sum(ring, now), ok
}

// counts returns count(queue, now) for every queue with a ring, read at
// one moment.
func (a *arrivals) counts(now time.Time) map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.byQueue))
	for q, ring := range a.byQueue {
		out[q] = a.sum(ring, now)
	}
	return out
}

// sum adds up the buckets of ring within the window ending at now.
func (a *arrivals) sum(ring []bucket, now time.Time) int {
	cur := unixMinute(now)
	first := cur - int64(a.slots) + 1
	n := 0
	for _, b := range ring {
		if b.minute >= first && b.minute <= cur {
			n += b.n
		}
	}
	return n
}

// clear forgets queue's arrivals (keeping its ring, so it still counts as
// a dead-letter queue).
func (a *arrivals) clear(queue string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.byQueue[queue])
}

// snapshot copies every ring, for saving.
func (a *arrivals) snapshot() map[string][]bucket {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]bucket, len(a.byQueue))
	for q, ring := range a.byQueue {
		out[q] = append([]bucket(nil), ring...)
	}
	return out
}

// restore installs a saved ring for queue (a ring of another size, from a
// different window, is ignored: its buckets would land in the wrong
// slots). Arrivals counted since start are kept.
func (a *arrivals) restore(queue string, ring []bucket) {
	if len(ring) != a.slots {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.byQueue[queue]
	if cur == nil {
		a.byQueue[queue] = append([]bucket(nil), ring...)
		return
	}
	for i, b := range ring {
		if cur[i].minute == b.minute {
			cur[i].n += b.n
		} else if cur[i].minute < b.minute {
			cur[i] = b
		}
	}
}

// retain drops the rings of queues for which keep is false.
func (a *arrivals) retain(keep func(queue string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for q := range a.byQueue {
		if !keep(q) {
			delete(a.byQueue, q)
		}
	}
}

// Arrivals is the engine.Observer that counts dead-letter arrivals for the
// dlq_growth rule. It needs no engine, so it is made first and handed to
// engine.Options.Observer (with metrics.Multi when there are other
// observers); then New takes it with the opened engine. It counts from the
// engine's first event, before Run starts. DeadLettered takes one short
// mutex and reads the clock; nothing else is done on the engine's path.
type Arrivals struct {
	engine.NopObserver
	clk    clock.Clock
	window time.Duration
	a      *arrivals
}

// NewArrivals returns the arrivals counter for a Manager with opts (only
// DLQGrowthWindow is read; New refuses a counter made for another window).
// clk nil means the wall clock; give it the Manager's clock.
func NewArrivals(opts Options, clk clock.Clock) *Arrivals {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Arrivals{clk: clk, window: opts.DLQGrowthWindow, a: newArrivals(opts.DLQGrowthWindow)}
}

// DeadLettered implements engine.Observer.
func (o *Arrivals) DeadLettered(_, target, _ string, _ time.Duration) {
	o.a.add(target, o.clk.Now())
}
