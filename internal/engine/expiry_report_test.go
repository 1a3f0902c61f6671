package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// expiryObserver counts what Observer.Expired reports.
type expiryObserver struct {
	NopObserver
	n atomic.Int64
}

func (o *expiryObserver) Expired(_ string, n int) { o.n.Add(int64(n)) }

// TestExpiryReportedWhicheverPathFirst: messages past their retention are
// reported to the observer (sluice_expired_total) once each, also when a
// path other than the scheduler's tick (a receive, a stats read, a
// settlement: anything that advances the queue) reaches them first. Only
// the tick reported them before, so such expiries were counted in the
// queue's stats but never in the metric: internal/metrics's
// TestExpiredCounter timed out about once in a hundred runs under load,
// when its scrape advanced the queue before the scheduler did.
func TestExpiryReportedWhicheverPathFirst(t *testing.T) {
	f := newFixture(t)
	obs := &expiryObserver{}
	f.reopenWith(obs)
	e := f.e
	f.create("short", func(c *QueueConfig) { c.Retention = MinRetention })
	f.send("short", body("a"), body("b"))

	// Hold the queue's lock so that the scheduler, woken by the clock,
	// cannot tick it; advance it as any other path would, then let go.
	q, err := e.lockQueue("short")
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(MinRetention + time.Second)
	var b store.Batch
	q.advanceLocked(e.now(), &b)
	e.writeUnlock(q, &b)
	if got := obs.n.Load(); got != 2 {
		t.Fatalf("the observer was told of %d expired messages, want 2", got)
	}
	// The tick that follows finds nothing more to report.
	info, err := e.GetQueue("short")
	if err != nil {
		t.Fatal(err)
	}
	if got := obs.n.Load(); got != 2 || info.Visible != 0 {
		t.Fatalf("after the tick: %d reported, %d visible; want 2 and 0", got, info.Visible)
	}
}
