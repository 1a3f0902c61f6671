package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/testlog"
)

// fixture is a real engine over memstore, on a fake clock, with a Manager
// as its observer.
type fixture struct {
	t    *testing.T
	clk  *clock.Fake
	e    *engine.Engine
	m    *Manager
	logs *testlog.Buffer

	cancel context.CancelFunc
	done   chan struct{}
}

func newFixture(t *testing.T, mod func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: clock.NewFake(time.Unix(1_700_000_000, 0)), logs: &testlog.Buffer{}}
	opts := DefaultOptions()
	if mod != nil {
		mod(&opts)
	}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	arr := NewArrivals(opts, f.clk)
	e, err := engine.Open(engine.Options{Store: memstore.New(), Clock: f.clk, Observer: arr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	f.e = e
	f.m = New(e, arr, opts, f.clk, log)
	return f
}

// run starts the Manager; the test's cleanup stops it and waits.
func (f *fixture) run() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		f.m.Run(ctx)
		close(f.done)
	}()
	f.t.Cleanup(f.stop)
}

func (f *fixture) stop() {
	if f.cancel == nil {
		return
	}
	f.cancel()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		f.t.Fatal("Run did not return after its context ended")
	}
	f.cancel = nil
}

// stepUntil advances the fake clock in steps until cond holds. It moves
// the clock only while the Manager's Run waits for its next evaluation,
// and after a step that reaches that evaluation it waits for Run to have
// evaluated and to wait again: however slow the machine, no evaluation is
// skipped (an arrival could otherwise age out of the growth window between
// two evaluations). It returns the simulated time that passed.
func (f *fixture) stepUntil(what string, step time.Duration, cond func() bool) time.Duration {
	f.t.Helper()
	start := f.clk.Now()
	deadline := time.Now().Add(10 * time.Second)
	fail := func() { f.t.Fatalf("timed out waiting for %s; states %+v", what, f.m.States()) }
	var seen uint64 // the latest wait of Run known to have ended
	for !cond() {
		for f.m.parks.Load() <= seen {
			if time.Now().After(deadline) {
				fail()
			}
			time.Sleep(100 * time.Microsecond) // polling Run's state
		}
		if time.Now().After(deadline) {
			fail()
		}
		parks, due := f.m.parks.Load(), f.m.nextEval.Load()
		f.clk.Advance(step)
		if f.clk.Now().UnixNano() >= due {
			seen = parks // this wait ended: the next one follows the evaluation
		}
		time.Sleep(100 * time.Microsecond) // let webhook senders and the engine's timers run
	}
	return f.clk.Now().Sub(start)
}

func (f *fixture) create(name string, mod func(*engine.QueueConfig)) {
	f.t.Helper()
	cfg := engine.DefaultQueueConfig()
	if mod != nil {
		mod(&cfg)
	}
	if _, _, err := f.e.CreateQueue(name, cfg, nil); err != nil {
		f.t.Fatalf("create %s: %v", name, err)
	}
}

// withDLQ creates "dlq" and "q", whose dead-letter queue it is.
func (f *fixture) withDLQ() {
	f.create("dlq", nil)
	f.create("q", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
	})
}

func (f *fixture) send(q string, n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		if _, err := f.e.Send(q, []engine.Message{{Body: []byte(fmt.Sprint("m", i))}}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// poison dead-letters n messages from q into dlq (terminal failures).
func (f *fixture) poison(n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		f.send("q", 1)
		d, err := f.e.Receive(context.Background(), "q", engine.ReceiveRequest{Max: 1, WaitSet: true})
		if err != nil || len(d) != 1 {
			f.t.Fatalf("receive: %v, %d", err, len(d))
		}
		out, err := f.e.ReportFailure("q", d[0].ReceiptHandle, engine.Failure{ErrorClass: "SchemaError", Terminal: true})
		if err != nil || !out.DeadLettered {
			f.t.Fatalf("report failure: %v %+v", err, out)
		}
	}
}

// state returns the alert's state, or one with an empty Status.
func (f *fixture) state(queue, rule, severity string) State {
	for _, s := range f.m.States() {
		if s.Queue == queue && s.Rule == rule && s.Severity == severity {
			return s
		}
	}
	return State{}
}

// hook is a test webhook that records what it receives. It answers 500 to
// the first fail requests.
type hook struct {
	srv *httptest.Server

	mu       sync.Mutex
	fail     int
	requests int
	got      []Notification
}

func newHook(t *testing.T, fail int) *hook {
	h := &hook{fail: fail}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.requests++
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("webhook got %s with content type %q", r.Method, r.Header.Get("Content-Type"))
		}
		if h.requests <= h.fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var n Notification
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		h.got = append(h.got, n)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) received() []Notification {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Notification(nil), h.got...)
}

func (h *hook) count() (requests, delivered int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests, len(h.got)
}

func TestPoisonWaveFiresGrowthThenResolves(t *testing.T) {
	wh := newHook(t, 0)
	f := newFixture(t, func(o *Options) { o.Webhooks = []string{wh.srv.URL} })
	f.withDLQ()
	f.run()

	// Ten dead letters are not "more than ten".
	f.poison(10)
	f.stepUntil("an evaluation of 10 arrivals", 5*time.Second, func() bool {
		return f.state("dlq", RuleDLQGrowth, SeverityPage).Value == 10
	})
	if s := f.state("dlq", RuleDLQGrowth, SeverityPage); s.Status != StatusOK {
		t.Fatalf("10 dead letters: %+v", s)
	}

	f.poison(1)
	waveAt := f.clk.Now()
	f.stepUntil("the firing POST", 5*time.Second, func() bool { return len(wh.received()) == 1 })
	n := wh.received()[0]
	if n.Rule != RuleDLQGrowth || n.Queue != "dlq" || n.Severity != SeverityPage || n.Status != StatusFiring ||
		n.Value != 11 || n.Threshold != 10 || n.EndsAt != nil || n.StartsAt.Before(waveAt) || !strings.Contains(n.Message, "11 messages") {
		t.Fatalf("firing notification %+v", n)
	}
	if s := f.state("dlq", RuleDLQGrowth, SeverityPage); s.Status != StatusFiring || !s.Since.Equal(n.StartsAt) {
		t.Fatalf("state %+v", s)
	}
	// The source queue is not a dead-letter queue: no growth alert.
	if s := f.state("q", RuleDLQGrowth, SeverityPage); s.Status != "" {
		t.Fatalf("q has a growth alert: %+v", s)
	}

	// Once the wave leaves the 15-minute window (counted in whole
	// minutes, so up to 16), the alert resolves.
	f.stepUntil("the resolved POST", 15*time.Second, func() bool { return len(wh.received()) == 2 })
	r := wh.received()[1]
	if r.Status != StatusResolved || r.Value != 0 || r.EndsAt == nil || !r.StartsAt.Equal(n.StartsAt) {
		t.Fatalf("resolved notification %+v", r)
	}
	if after := r.EndsAt.Sub(waveAt); after < 15*time.Minute || after > 16*time.Minute+time.Minute {
		t.Fatalf("resolved %v after the wave, want 15–17 min", after)
	}
	if s := f.state("dlq", RuleDLQGrowth, SeverityPage); s.Status != StatusResolved {
		t.Fatalf("state %+v", s)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `msg="alert firing" rule=dlq_growth queue=dlq`) || !strings.Contains(logs, `msg="alert resolved" rule=dlq_growth`) {
		t.Fatalf("transitions not logged:\n%s", logs)
	}
}

func TestDepthThresholds(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.DLQGrowthWindow = 0
		o.DLQDepthWarn, o.DLQDepthCritical = 3, 5
		o.QueueDepthWarn = 2
		o.OldestAgeWarn = 5 * time.Minute
	})
	f.withDLQ()
	f.create("plain", nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.m.Collector())
	f.run()

	status := func(q, rule, sev string) string { return f.state(q, rule, sev).Status }
	f.poison(3)
	f.stepUntil("dlq_depth warning", 5*time.Second, func() bool { return status("dlq", RuleDLQDepth, SeverityWarning) == StatusFiring })
	if s := f.state("dlq", RuleDLQDepth, SeverityCritical); s.Status != StatusOK || s.Value != 3 || s.Threshold != 5 {
		t.Fatalf("critical at 3 messages: %+v", s)
	}
	if got := firing(t, reg, "dlq", RuleDLQDepth, SeverityWarning); got != 1 {
		t.Fatalf("sluice_alert_firing for the warning = %v", got)
	}
	if got := firing(t, reg, "dlq", RuleDLQDepth, SeverityCritical); got != 0 {
		t.Fatalf("sluice_alert_firing for the critical = %v", got)
	}
	f.poison(2)
	f.stepUntil("dlq_depth critical", 5*time.Second, func() bool { return status("dlq", RuleDLQDepth, SeverityCritical) == StatusFiring })

	// Growth is off; queue_depth is for the other queues only.
	for _, s := range f.m.States() {
		if s.Rule == RuleDLQGrowth || s.Rule == RuleQueueDepth && s.Queue == "dlq" || s.Rule == RuleDLQDepth && s.Queue != "dlq" {
			t.Errorf("unexpected alert %+v", s)
		}
	}

	f.send("plain", 2)
	f.stepUntil("queue_depth warning", 5*time.Second, func() bool { return status("plain", RuleQueueDepth, SeverityWarning) == StatusFiring })
	if s := f.state("plain", RuleQueueDepth, SeverityCritical); s.Status != "" {
		t.Fatalf("queue_depth critical is off but evaluated: %+v", s)
	}

	// The dead letters keep their send time, so dlq's oldest message is
	// as old as plain's, or older.
	f.stepUntil("oldest_message_age warning", 15*time.Second, func() bool {
		return status("plain", RuleOldestAge, SeverityWarning) == StatusFiring && status("dlq", RuleOldestAge, SeverityWarning) == StatusFiring
	})
	if s := f.state("plain", RuleOldestAge, SeverityWarning); s.Value < 300 || s.Threshold != 300 {
		t.Fatalf("age alert %+v", s)
	}

	// Emptying the DLQ resolves both severities.
	if _, err := f.e.DeleteMatching("dlq", engine.Filter{}); err != nil {
		t.Fatal(err)
	}
	f.stepUntil("dlq_depth resolved", 5*time.Second, func() bool {
		return status("dlq", RuleDLQDepth, SeverityWarning) == StatusResolved && status("dlq", RuleDLQDepth, SeverityCritical) == StatusResolved
	})

	// The HTTP view, filtered.
	srv := httptest.NewServer(f.m)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/sluice/v1/alerts?status=firing")
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Alerts []State }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var got []string
	for _, s := range body.Alerts {
		got = append(got, s.Queue+"/"+s.Rule+"/"+s.Severity+"/"+s.Status)
	}
	want := "plain/oldest_message_age/warning/firing,plain/queue_depth/warning/firing"
	if strings.Join(got, ",") != want {
		t.Fatalf("GET ?status=firing = %v, want %s", got, want)
	}
	resp, err = http.Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST answered %s", resp.Status)
	}
}

// firing returns sluice_alert_firing for one alert, or -1 when absent.
func firing(t *testing.T, reg *prometheus.Registry, queue, rule, sev string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != "sluice_alert_firing" {
			continue
		}
		for _, m := range fam.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if l["queue"] == queue && l["rule"] == rule && l["severity"] == sev {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestWebhookRetriedUntilDelivered(t *testing.T) {
	wh := newHook(t, 3)
	f := newFixture(t, func(o *Options) {
		o.Webhooks = []string{wh.srv.URL}
		o.DLQDepthWarn = 1
		o.WebhookBackoffBase, o.WebhookBackoffCap = time.Second, 4*time.Second
	})
	f.withDLQ()
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.m.Collector())
	f.run()
	f.poison(1)
	// Backoff waits run on the fake clock: step it until the fourth
	// request is accepted.
	f.stepUntil("delivery after three 500s", 500*time.Millisecond, func() bool {
		_, delivered := wh.count()
		return delivered >= 1
	})
	requests, _ := wh.count()
	got := wh.received()
	if requests != 4 || len(got) != 1 || got[0].Rule != RuleDLQDepth || got[0].Status != StatusFiring {
		t.Fatalf("%d requests, received %+v", requests, got)
	}
	if n := strings.Count(f.logs.String(), "will retry"); n != 3 {
		t.Fatalf("%d retries logged, want 3", n)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("the delivered counter", func() bool { return notifications(t, reg, "delivered") == 1 }))
}

func notifications(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() == "sluice_alert_notifications_total" {
			for _, m := range fam.Metric {
				if m.Label[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

func TestHangingWebhookDoesNotBlockAnother(t *testing.T) {
	release := make(chan struct{})
	var hung sync.WaitGroup
	hung.Add(1)
	var once sync.Once
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(hung.Done)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	fast := newHook(t, 0)
	f := newFixture(t, func(o *Options) {
		o.Webhooks = []string{slow.URL, fast.srv.URL}
		o.DLQDepthWarn = 1
		o.WebhookTimeout = time.Minute // real time: the slow hook hangs for the whole test
		o.WebhookDrainTimeout = 100 * time.Millisecond
	})
	defer close(release) // runs before slow.Close, after the Manager stops
	f.withDLQ()
	f.run()

	f.poison(1)
	f.stepUntil("the fast hook's firing POST", 5*time.Second, func() bool { return len(fast.received()) == 1 })
	hung.Wait() // the slow hook got the same notification, and is holding it

	// Evaluation goes on: the resolution reaches the fast hook too.
	if _, err := f.e.DeleteMatching("dlq", engine.Filter{}); err != nil {
		t.Fatal(err)
	}
	f.stepUntil("the fast hook's resolved POST", 5*time.Second, func() bool { return len(fast.received()) == 2 })
	if got := fast.received(); got[0].Status != StatusFiring || got[1].Status != StatusResolved {
		t.Fatalf("fast hook got %+v", got)
	}
	// Stopping does not wait for the hung request: its context ends, and
	// the undelivered notifications are dropped with a log line once the
	// drain time is up.
	stopAt := time.Now()
	f.stop()
	if d := time.Since(stopAt); d > 5*time.Second {
		t.Fatalf("stopping took %v", d)
	}
	if !strings.Contains(f.logs.String(), "dropped undelivered notifications") {
		t.Fatalf("no drop logged:\n%s", f.logs.String())
	}
}

func TestShutdownDrainsQueuedNotifications(t *testing.T) {
	wh := newHook(t, 1000) // refuses everything: the notification waits in backoff
	ok := newHook(t, 0)
	f := newFixture(t, func(o *Options) {
		o.Webhooks = []string{wh.srv.URL, ok.srv.URL}
		o.DLQDepthWarn = 1
		o.WebhookTimeout = 5 * time.Second
	})
	f.withDLQ()
	// The clock never moves in this test: Run's first evaluation fires the
	// alert, and the failing hook's sender then waits in a backoff that
	// never ends.
	f.poison(1)
	f.run()
	poll.CheckFor(t, 10*time.Second, poll.True("the first failed attempt", func() bool { r, _ := wh.count(); return r >= 1 }))
	poll.CheckFor(t, 10*time.Second, poll.True("the healthy hook's POST", func() bool { return len(ok.received()) == 1 }))
	f.stop()
	// The failing hook gets one last attempt at shutdown, then the
	// notification is dropped and logged.
	if r, _ := wh.count(); r != 2 {
		t.Fatalf("failing hook saw %d requests, want 2 (one attempt, one at shutdown)", r)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "dropped undelivered notifications") || !strings.Contains(logs, "webhook=0") {
		t.Fatalf("drop not logged:\n%s", logs)
	}
	if strings.Contains(logs, wh.srv.URL) {
		t.Fatal("a webhook URL was logged; URLs may carry secrets")
	}
}

func TestDeletedQueueResolvesItsAlerts(t *testing.T) {
	wh := newHook(t, 0)
	f := newFixture(t, func(o *Options) {
		o.Webhooks = []string{wh.srv.URL}
		o.DLQDepthWarn = 1
	})
	f.withDLQ()
	f.run()
	f.poison(1)
	f.stepUntil("firing", 5*time.Second, func() bool { return len(wh.received()) == 1 })
	if err := f.e.DeleteQueue("dlq"); err != nil {
		t.Fatal(err)
	}
	f.stepUntil("resolved", 5*time.Second, func() bool { return len(wh.received()) == 2 })
	if r := wh.received()[1]; r.Status != StatusResolved || !strings.Contains(r.Message, "deleted") {
		t.Fatalf("resolution %+v", r)
	}
	for _, s := range f.m.States() {
		if s.Queue == "dlq" {
			t.Fatalf("deleted queue still has alert %+v", s)
		}
	}
}

func TestArrivalsWindow(t *testing.T) {
	a := newArrivals(15 * time.Minute)
	t0 := time.Unix(1_700_000_000, 0).Truncate(time.Minute)
	a.add("d", t0)
	a.add("d", t0.Add(30*time.Second))
	a.add("d", t0.Add(5*time.Minute))
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{0, 2}, // the whole current minute counts
		{time.Minute, 2},
		{5 * time.Minute, 3},
		{15 * time.Minute, 3},
		{15*time.Minute + 59*time.Second, 3}, // t0's minute is still in the window
		{16 * time.Minute, 1},
		{21 * time.Minute, 0},
	} {
		if n, _ := a.count("d", t0.Add(c.at)); n != c.want {
			t.Errorf("count at +%v = %d, want %d", c.at, n, c.want)
		}
	}
	// A bucket reused a window later starts from zero.
	a.add("d", t0.Add(16*time.Minute))
	if n, _ := a.count("d", t0.Add(16*time.Minute)); n != 2 {
		t.Errorf("after reuse: %d, want 2", n)
	}
	if _, known := a.count("other", t0); known {
		t.Error("a queue without arrivals is known")
	}
	a.retain(func(string) bool { return false })
	if _, known := a.count("d", t0); known {
		t.Error("retain kept a dropped queue")
	}
}

func TestBackoffIsFullJitterCapped(t *testing.T) {
	m := New(nil, nil, DefaultOptions(), nil, nil)
	h := newWebhook(m, 0, "http://example.invalid/")
	for attempt := 1; attempt <= 12; attempt++ {
		ceil := min(time.Second<<(attempt-1), time.Minute)
		var top time.Duration
		for range 200 {
			d := h.backoff(attempt)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: backoff %v outside [0, %v]", attempt, d, ceil)
			}
			top = max(top, d)
		}
		if top < ceil/2 {
			t.Errorf("attempt %d: 200 draws all below %v; not spread up to %v", attempt, top, ceil)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		name string
		mod  func(*Options)
		want string // "" for valid
	}{
		{"growth off", func(o *Options) { o.DLQGrowthWindow = 0 }, ""},
		{"any dead letter pages", func(o *Options) { o.DLQGrowthCount = 0 }, ""},
		{"webhooks", func(o *Options) { o.Webhooks = []string{"https://hooks.example.com/T0/secret"} }, ""},
		{"zero interval", func(o *Options) { o.Interval = 0 }, "interval"},
		{"negative count", func(o *Options) { o.DLQGrowthCount = -1 }, "growth count"},
		{"short window", func(o *Options) { o.DLQGrowthWindow = 30 * time.Second }, "growth window"},
		{"long window", func(o *Options) { o.DLQGrowthWindow = 48 * time.Hour }, "growth window"},
		{"warn above critical", func(o *Options) { o.DLQDepthWarn = 300 }, "dlq depth warning threshold 300 is above the critical one 200"},
		{"negative depth", func(o *Options) { o.QueueDepthCritical = -1 }, "queue depth"},
		{"age warn above critical", func(o *Options) { o.OldestAgeWarn, o.OldestAgeCritical = time.Hour, time.Minute }, "oldest message age warning threshold 1h0m0s"},
		{"bad scheme", func(o *Options) { o.Webhooks = []string{"ftp://x/secret"} }, "webhooks[0] must be an http or https URL"},
		{"no host", func(o *Options) { o.Webhooks = []string{"http:///path"} }, "webhooks[0] has no host"},
		{"no attempts", func(o *Options) { o.Webhooks = []string{"http://x"}; o.WebhookMaxAttempts = 0 }, "max attempts"},
		{"cap below base", func(o *Options) { o.Webhooks = []string{"http://x"}; o.WebhookBackoffCap = time.Millisecond }, "backoff"},
		{"no timeout", func(o *Options) { o.Webhooks = []string{"http://x"}; o.WebhookTimeout = 0 }, "timeout"},
		{"no queue", func(o *Options) { o.Webhooks = []string{"http://x"}; o.WebhookQueueSize = 0 }, "queue size"},
		{"negative drain", func(o *Options) { o.Webhooks = []string{"http://x"}; o.WebhookDrainTimeout = -1 }, "drain"},
	} {
		o := DefaultOptions()
		c.mod(&o)
		err := o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: the error repeats the URL: %v", c.name, err)
		}
	}
	// Every problem is reported, not just the first.
	o := DefaultOptions()
	o.Interval, o.DLQGrowthCount = 0, -1
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "interval") || !strings.Contains(err.Error(), "growth count") {
		t.Fatalf("joined errors: %v", err)
	}
}

func TestNewPanicsOnInvalidOptions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New accepted invalid options")
		}
	}()
	New(nil, nil, Options{}, nil, nil)
}

// TestNewPanicsOnArrivalsForAnotherWindow: the Arrivals the engine feeds
// and the Manager's growth rule must count over the same window.
func TestNewPanicsOnArrivalsForAnotherWindow(t *testing.T) {
	o := DefaultOptions()
	arr := NewArrivals(o, nil)
	o.DLQGrowthWindow *= 2
	defer func() {
		if recover() == nil {
			t.Fatal("New accepted Arrivals made for another window")
		}
	}()
	New(nil, arr, o, nil, nil)
}

// A page about a poison wave clears as soon as the operator empties the
// dead-letter queue (the overview's banner then agrees with its table),
// and arrivals after that count from zero.
func TestEmptiedDLQResolvesGrowthPage(t *testing.T) {
	f := newFixture(t, nil)
	f.withDLQ()
	f.run()
	f.poison(11)
	f.stepUntil("the growth page", 5*time.Second, func() bool {
		return f.state("dlq", RuleDLQGrowth, SeverityPage).Status == StatusFiring
	})
	if _, err := f.e.DeleteMatching("dlq", engine.Filter{}); err != nil {
		t.Fatal(err)
	}
	took := f.stepUntil("the page resolved by the emptied DLQ", 5*time.Second, func() bool {
		return f.state("dlq", RuleDLQGrowth, SeverityPage).Status == StatusResolved
	})
	if took > time.Minute {
		t.Fatalf("the page cleared %v after the DLQ was emptied; want the next evaluation, not the end of the window", took)
	}
	f.poison(3)
	f.stepUntil("3 new arrivals counted", 5*time.Second, func() bool {
		return f.state("dlq", RuleDLQGrowth, SeverityPage).Value == 3
	})
	if s := f.state("dlq", RuleDLQGrowth, SeverityPage); s.Status == StatusFiring {
		t.Fatalf("3 arrivals after the emptying fire the page: %+v", s)
	}
}

// A firing page survives a restart of the alert manager: the new one
// starts with it firing (no second page), keeps the growth window, and
// resolves it (with a notification) when the condition ends.
func TestFiringAlertSurvivesRestart(t *testing.T) {
	wh := newHook(t, 0)
	f := newFixture(t, func(o *Options) { o.Webhooks = []string{wh.srv.URL} })
	f.withDLQ()
	f.run()
	f.poison(11)
	// Stop only once the sender has its answer: a POST interrupted by the
	// stop is sent again by the shutdown drain (at least once), which is
	// not the restart behaviour this test is about.
	f.stepUntil("the firing POST", 5*time.Second, func() bool {
		return len(wh.received()) == 1 && f.m.hooks[0].delivered.Load() == 1
	})
	first := wh.received()[0]
	f.stop()

	// A new manager over the same engine, as after a broker restart.
	opts := DefaultOptions()
	opts.Webhooks = []string{wh.srv.URL}
	f.m = New(f.e, nil, opts, f.clk, slog.New(slog.NewTextHandler(f.logs, nil)))
	f.run()
	poll.CheckFor(t, 10*time.Second, poll.True("the first evaluation after the restart", func() bool {
		s := f.state("dlq", RuleDLQGrowth, SeverityPage)
		return s.Status == StatusFiring && s.Value == 11
	}))
	if s := f.state("dlq", RuleDLQGrowth, SeverityPage); !s.Since.Equal(first.StartsAt) {
		t.Fatalf("restored alert %+v, want firing since %v", s, first.StartsAt)
	}
	if n := len(wh.received()); n != 1 {
		t.Fatalf("%d notifications after the restart; the page must not be sent again: %+v", n, wh.received())
	}
	// Emptying the DLQ resolves it, as before the restart.
	if _, err := f.e.DeleteMatching("dlq", engine.Filter{}); err != nil {
		t.Fatal(err)
	}
	f.stepUntil("the resolved POST", 5*time.Second, func() bool { return len(wh.received()) == 2 })
	if r := wh.received()[1]; r.Status != StatusResolved || !r.StartsAt.Equal(first.StartsAt) {
		t.Fatalf("resolved %+v", r)
	}
}
