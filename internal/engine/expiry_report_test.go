package engine

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/testlog"
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

// TestExpiryLogNamesTheRule: the log line that reports expired messages
// names the rule that dropped them: retention, or a TTL with no
// dead-letter target (it said "by retention" for both before).
func TestExpiryLogNamesTheRule(t *testing.T) {
	f := newFixture(t)
	logger, logs := testlog.New(slog.LevelInfo)
	f.e.Close()
	e, err := Open(Options{Store: f.st, Clock: f.clk, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	f.e = e
	f.create("ttl", func(c *QueueConfig) { c.HasMessageTTL, c.MessageTTL = true, time.Second })
	f.create("kept", func(c *QueueConfig) { c.Retention = MinRetention })
	f.send("ttl", body("a"))
	f.send("kept", body("b"))
	f.clk.Advance(MinRetention + time.Second)
	for _, q := range []string{"ttl", "kept"} {
		if _, err := e.GetQueue(q); err != nil { // advances the queue
			t.Fatal(err)
		}
	}
	out := logs.String()
	for _, want := range []string{`"messages expired by their TTL, with no dead-letter target" queue=ttl count=1`, `"messages expired by retention" queue=kept count=1`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"messages expired by retention" queue=ttl`) {
		t.Errorf("a TTL expiry logged as retention:\n%s", out)
	}
}
