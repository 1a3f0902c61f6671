package advisor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

func open(t *testing.T, clk clock.Clock) *engine.Engine {
	t.Helper()
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

func create(t *testing.T, eng *engine.Engine, name string, edit func(*engine.QueueConfig), tags map[string]string) {
	t.Helper()
	cfg := engine.DefaultQueueConfig()
	if strings.HasSuffix(name, ".fifo") {
		cfg.FIFO = true
		cfg.ContentBasedDedup = true
	}
	if edit != nil {
		edit(&cfg)
	}
	if _, _, err := eng.CreateQueue(name, cfg, tags); err != nil {
		t.Fatal(err)
	}
}

// find returns the verdict of one check on one queue, or "" when absent.
func find(fs []Finding, queue, check string) (Verdict, string) {
	for _, f := range fs {
		if f.Queue == queue && f.Check == check {
			return f.Verdict, f.Reason
		}
	}
	return "", ""
}

func TestChecks(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	eng := open(t, clk)
	// good-dlq: owned, longer retention; good dead-letters into it.
	create(t, eng, "good-dlq", func(c *engine.QueueConfig) { c.Retention = 14 * 24 * time.Hour }, map[string]string{"owner": "payments"})
	create(t, eng, "good", func(c *engine.QueueConfig) {
		c.Visibility = 30 * time.Second
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "good-dlq", MaxReceiveCount: 5}
	}, nil)
	// bad-dlq: unowned, same retention as its source, consumed.
	create(t, eng, "bad-dlq", nil, nil)
	create(t, eng, "bad", func(c *engine.QueueConfig) {
		c.Visibility = time.Second
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "bad-dlq", MaxReceiveCount: 50}
	}, nil)
	create(t, eng, "short-dlq", func(c *engine.QueueConfig) { c.Retention = time.Hour }, map[string]string{"owner": "x"})
	create(t, eng, "shortsrc", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "short-dlq", MaxReceiveCount: 1}
	}, nil)
	create(t, eng, "nodlq", nil, nil)
	create(t, eng, "looping", nil, nil)
	create(t, eng, "tight", func(c *engine.QueueConfig) { c.Visibility = 5 * time.Second }, nil)
	create(t, eng, "lazy", func(c *engine.QueueConfig) { c.Visibility = 12 * time.Hour }, nil)
	create(t, eng, "delayed", func(c *engine.QueueConfig) {
		c.Retention = time.Minute
		c.Delay = 2 * time.Minute
	}, nil)
	create(t, eng, "one.fifo", nil, nil)
	create(t, eng, "many.fifo", nil, nil)

	for i := range 20 {
		send(t, eng, "one.fifo", engine.Message{Body: fmt.Appendf(nil, "m%d", i), GroupID: "g"})
		send(t, eng, "many.fifo", engine.Message{Body: fmt.Appendf(nil, "m%d", i), GroupID: fmt.Sprint("g", i%4)})
	}
	// nodlq's only message is at 85 % of its 4-day retention when checked.
	send(t, eng, "nodlq", engine.Message{Body: []byte("old")})
	now := start.Add(time.Duration(0.85 * float64(4*24*time.Hour)))
	stats := Stats{
		Now:    now,
		Window: 15 * time.Minute,
		Queues: map[string]QueueStats{
			"good":    {P99: 2 * time.Second, ProcessingSamples: 100},
			"bad":     {P99: 3 * time.Second, ProcessingSamples: 100, Prefetch: 500},
			"tight":   {P99: 2 * time.Second, ProcessingSamples: 100, Prefetch: 80},
			"lazy":    {P99: 100 * time.Millisecond, ProcessingSamples: 100, Prefetch: 10},
			"nodlq":   {P99: time.Second, ProcessingSamples: 5}, // too few samples
			"looping": {Received: 40, Redelivered: 12, PrefetchUnlimited: true},
			"bad-dlq": {Received: 7},
		},
		AlertRules: map[string][]string{"good-dlq": {"dlq_growth", "dlq_depth"}},
	}
	fs := Check(eng, stats)
	want := []struct {
		queue, check string
		verdict      Verdict
		reason       string
	}{
		{"good", CheckVisibility, Green, "15×"},
		{"good", CheckDLQ, Green, "good-dlq"},
		{"good", CheckMaxReceiveCount, Green, "5"},
		{"good-dlq", CheckDLQConsumers, Green, "no receives"},
		{"good-dlq", CheckDLQRetention, Green, "longer"},
		{"good-dlq", CheckDLQAlert, Green, "2 alert"},
		{"good-dlq", CheckDLQOwner, Green, "payments"},
		{"bad", CheckVisibility, Red, "duplicate deliveries"},
		{"bad", CheckMaxReceiveCount, Yellow, "over 10"},
		{"bad", CheckPrefetch, Red, "far above"},
		{"bad-dlq", CheckDLQConsumers, Yellow, "7 receives"},
		{"bad-dlq", CheckDLQRetention, Yellow, "no longer"},
		{"bad-dlq", CheckDLQAlert, Yellow, "no alert rule"},
		{"bad-dlq", CheckDLQOwner, Yellow, "landfill"},
		{"short-dlq", CheckDLQRetention, Red, "shorter"},
		{"shortsrc", CheckMaxReceiveCount, Yellow, "under 3"},
		{"nodlq", CheckDLQ, Yellow, "no dead-letter queue"},
		{"nodlq", CheckVisibility, "", ""},
		{"nodlq", CheckRetention, Yellow, "85%"},
		{"looping", CheckDLQ, Red, "12 redeliveries"},
		{"looping", CheckPrefetch, Red, "unlimited"},
		{"tight", CheckVisibility, Yellow, "under 6×"},
		{"tight", CheckPrefetch, Yellow, "above 50"},
		{"lazy", CheckVisibility, Yellow, "over 100×"},
		{"lazy", CheckPrefetch, Green, "10"},
		{"delayed", CheckRetention, Red, "expire before"},
		{"one.fifo", CheckFIFOGroups, Yellow, "one message group"},
		{"many.fifo", CheckFIFOGroups, Green, "4 message groups"},
	}
	for _, w := range want {
		v, reason := find(fs, w.queue, w.check)
		if v != w.verdict || !strings.Contains(reason, w.reason) {
			t.Errorf("%s/%s = %s %q; want %s containing %q", w.queue, w.check, v, reason, w.verdict, w.reason)
		}
	}
	if Worst(fs) != Red {
		t.Errorf("worst = %s", Worst(fs))
	}
	// Sorted by queue, then worst first.
	for i := 1; i < len(fs); i++ {
		a, b := fs[i-1], fs[i]
		if a.Queue > b.Queue || (a.Queue == b.Queue && rank(a.Verdict) < rank(b.Verdict)) {
			t.Fatalf("not sorted at %d: %+v then %+v", i, a, b)
		}
	}
}

func TestShortDLQRetentionRedNearEnd(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	eng := open(t, clk)
	create(t, eng, "d", func(c *engine.QueueConfig) { c.Retention = time.Hour }, map[string]string{"owner": "x"})
	create(t, eng, "s", func(c *engine.QueueConfig) {
		c.Retention = 30 * time.Minute
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "d", MaxReceiveCount: 3}
	}, nil)
	send(t, eng, "d", engine.Message{Body: []byte("x")})
	fs := Check(eng, Stats{Now: start.Add(58 * time.Minute)})
	if v, r := find(fs, "d", CheckRetention); v != Red || !strings.Contains(r, "lost before triage") {
		t.Fatalf("d retention = %s %q", v, r)
	}
	// Without stats the observation checks are skipped, not guessed.
	for _, f := range fs {
		switch f.Check {
		case CheckVisibility, CheckDLQConsumers, CheckDLQAlert, CheckPrefetch:
			t.Errorf("check %s ran without data: %+v", f.Check, f)
		}
	}
	if Worst(nil) != Green {
		t.Fatal("worst of nothing")
	}
}

func send(t *testing.T, eng *engine.Engine, q string, m engine.Message) {
	t.Helper()
	res, err := eng.Send(q, []engine.Message{m})
	if err != nil || res[0].Err != nil {
		t.Fatalf("send %s: %v %v", q, err, res)
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1500 * time.Millisecond: "1.5s", 30 * time.Second: "30s", 4 * time.Minute: "4m",
		96 * time.Hour: "4d", 3 * time.Hour: "3h", 90 * time.Second: "1m30s", 250 * time.Millisecond: "250ms",
	} {
		if got := short(d); got != want {
			t.Errorf("short(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestFIFODLQOrderNeedsAcknowledgement: a FIFO queue with a dead-letter
// queue is yellow until tagged fifo-dlq-ack=true (DLQ-133).
func TestFIFODLQOrderNeedsAcknowledgement(t *testing.T) {
	eng := open(t, clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))
	create(t, eng, "dlq.fifo", nil, nil)
	dl := func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq.fifo", MaxReceiveCount: 5}
	}
	create(t, eng, "orders.fifo", dl, nil)
	create(t, eng, "events.fifo", dl, map[string]string{FIFODLQAckTag: "true"})
	fs := Check(eng, Stats{})
	if v, _ := find(fs, "orders.fifo", CheckFIFODLQOrder); v != Yellow {
		t.Fatalf("orders.fifo %s", v)
	}
	if v, _ := find(fs, "events.fifo", CheckFIFODLQOrder); v != Green {
		t.Fatalf("events.fifo %s", v)
	}
	if v, _ := find(fs, "dlq.fifo", CheckFIFODLQOrder); v != "" {
		t.Fatalf("dlq.fifo has no policy: %s", v)
	}
}

// Every check's yellow and red findings name a fix; green ones none.
func TestEveryCheckHasAFix(t *testing.T) {
	for _, check := range []string{CheckVisibility, CheckMaxReceiveCount, CheckDLQ, CheckDLQConsumers, CheckDLQRetention,
		CheckDLQAlert, CheckDLQOwner, CheckPrefetch, CheckFIFOGroups, CheckRetention, CheckDLQShared, CheckFIFODLQOrder} {
		if fix := fixFor(check, "orders"); fix == "" {
			t.Errorf("check %s has no fix", check)
		}
	}
	c := &checker{}
	c.add("q", CheckDLQOwner, Yellow, "no owner")
	c.add("q", CheckDLQOwner, Green, "owned")
	if !strings.Contains(c.out[0].Fix, "tag-queue") || c.out[1].Fix != "" {
		t.Fatalf("fixes %+v", c.out)
	}
}
