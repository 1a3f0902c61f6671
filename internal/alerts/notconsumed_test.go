package alerts

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// TestNotConsumedFiresOnABacklogNobodyTakesFrom: not_consumed fires for a
// queue with visible messages that no receive has asked for messages for
// NotConsumedAfter, stays quiet for a queue a slow consumer receives
// from, for a paused queue, a dead-letter queue and an empty one, and
// resolves at the next receive.
func TestNotConsumedFiresOnABacklogNobodyTakesFrom(t *testing.T) {
	const after = 10 * time.Minute
	f := newFixture(t, func(o *Options) {
		o.DLQGrowthWindow = 0
		o.NotConsumedAfter = after
	})
	f.withDLQ()
	f.create("orphan", nil)
	f.create("held", nil)
	f.create("polled", nil)
	f.create("empty", nil)
	f.send("orphan", 3)
	f.send("held", 3)
	f.send("polled", 200)
	if err := f.e.SetPaused("held", true); err != nil {
		t.Fatal(err)
	}
	f.poison(2) // the DLQ holds dead letters nobody receives, by design
	f.run()
	status := func(q string) string { return f.state(q, RuleNotConsumed, SeverityWarning).Status }

	// polled has a slow consumer: one message every 15 s of the clock,
	// its backlog never empty meanwhile.
	took := f.stepUntil("not_consumed on orphan", 15*time.Second, func() bool {
		if _, err := f.e.Receive(context.Background(), "polled", engine.ReceiveRequest{Max: 1, WaitSet: true}); err != nil {
			t.Fatal(err)
		}
		return status("orphan") == StatusFiring
	})
	if took < after-time.Minute {
		t.Fatalf("fired after %v, want about %v", took, after)
	}
	if s := f.state("orphan", RuleNotConsumed, SeverityWarning); s.Value < after.Seconds() || s.Threshold != after.Seconds() {
		t.Fatalf("not_consumed on orphan: %+v", s)
	}
	for _, q := range []string{"held", "dlq", "empty", "polled"} {
		if s := status(q); s == StatusFiring {
			t.Errorf("not_consumed fires on %s", q)
		}
	}
	if s := f.state("held", RuleNotConsumed, SeverityWarning); s.Status != "" {
		t.Errorf("not_consumed evaluated on the paused queue: %+v", s)
	}
	if s := f.state("dlq", RuleNotConsumed, SeverityWarning); s.Status != "" {
		t.Errorf("not_consumed evaluated on the DLQ: %+v", s)
	}

	// A consumer comes back: the next evaluation resolves it.
	if _, err := f.e.Receive(context.Background(), "orphan", engine.ReceiveRequest{Max: 1, WaitSet: true}); err != nil {
		t.Fatal(err)
	}
	f.stepUntil("not_consumed on orphan resolved", 15*time.Second, func() bool { return status("orphan") == StatusResolved })
}

// TestNotConsumedSurvivesRestart: a not_consumed alert firing when the
// broker restarts keeps firing through the restart (no resolved
// notification) as long as no receive comes, and resolves at the first.
func TestNotConsumedSurvivesRestart(t *testing.T) {
	const after = 10 * time.Minute
	wh := newHook(t, 0)
	mod := func(o *Options) {
		o.DLQGrowthWindow = 0
		o.NotConsumedAfter = after
		o.Webhooks = []string{wh.srv.URL}
	}
	f := newFixture(t, mod)
	f.create("orphan", nil)
	f.send("orphan", 3)
	f.run()
	f.stepUntil("the firing POST", 15*time.Second, func() bool {
		return len(wh.received()) == 1 && f.m.hooks[0].delivered.Load() == 1
	})
	first := f.state("orphan", RuleNotConsumed, SeverityWarning)
	f.stop()

	// A new manager over the same engine, as after a broker restart.
	opts := DefaultOptions()
	mod(&opts)
	f.m = New(f.e, nil, opts, f.clk, slog.New(slog.NewTextHandler(f.logs, nil)))
	f.run()
	f.stepUntil("two evaluations after the restart", 15*time.Second, func() bool { return f.m.parks.Load() >= 3 })
	if s := f.state("orphan", RuleNotConsumed, SeverityWarning); s.Status != StatusFiring || !s.Since.Equal(first.Since) || s.Value < after.Seconds() {
		t.Fatalf("after the restart %+v, want firing since %v", s, first.Since)
	}
	if n := len(wh.received()); n != 1 {
		t.Fatalf("%d notifications after the restart, want only the first firing: %+v", n, wh.received())
	}
	if _, err := f.e.Receive(context.Background(), "orphan", engine.ReceiveRequest{Max: 1, WaitSet: true}); err != nil {
		t.Fatal(err)
	}
	f.stepUntil("the resolved POST", 15*time.Second, func() bool { return len(wh.received()) == 2 })
	if r := wh.received()[1]; r.Status != StatusResolved {
		t.Fatalf("second notification %+v", r)
	}
}
