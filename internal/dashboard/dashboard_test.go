package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// fixture: a real engine over memstore on a fake clock, with the
// dashboard's observer, sampling every 5 s. Queues: orders dead-letters
// into orders-dlq after 3 receives.
type fixture struct {
	t   *testing.T
	clk *clock.Fake
	eng *engine.Engine
	d   *Dashboard
	srv *httptest.Server
}

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	clk := clock.NewFake(start)
	opts.Clock = clk
	rec := NewRecorder(clk)
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	d := New(eng, rec, opts)
	srv := httptest.NewServer(d)
	t.Cleanup(func() { srv.Close(); eng.Close() })
	f := &fixture{t: t, clk: clk, eng: eng, d: d, srv: srv}
	cfg := engine.DefaultQueueConfig()
	cfg.Retention = 14 * 24 * time.Hour
	f.create("orders-dlq", cfg)
	cfg = engine.DefaultQueueConfig()
	cfg.Visibility = 2 * time.Second
	cfg.DeadLetter = &engine.DeadLetterPolicy{Target: "orders-dlq", MaxReceiveCount: 3}
	f.create("orders", cfg)
	return f
}

func (f *fixture) create(name string, cfg engine.QueueConfig) {
	f.t.Helper()
	if _, _, err := f.eng.CreateQueue(name, cfg, nil); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) send(q string, n int) {
	f.t.Helper()
	for n > 0 {
		k := min(n, engine.MaxBatch)
		msgs := make([]engine.Message, k)
		for i := range msgs {
			msgs[i] = engine.Message{Body: []byte("order")}
		}
		if _, err := f.eng.Send(q, msgs); err != nil {
			f.t.Fatal(err)
		}
		n -= k
	}
}

// process receives up to n messages of q, holds each for hold, and
// deletes it.
func (f *fixture) process(q string, n int, hold time.Duration) {
	f.t.Helper()
	for n > 0 {
		ds, err := f.eng.Receive(context.Background(), q, engine.ReceiveRequest{Max: min(n, 10), WaitSet: true})
		if err != nil || len(ds) == 0 {
			f.t.Fatalf("receive: %v (%d)", err, len(ds))
		}
		f.clk.Advance(hold)
		var hs []string
		for _, d := range ds {
			hs = append(hs, d.ReceiptHandle)
		}
		if _, err := f.eng.Delete(q, hs); err != nil {
			f.t.Fatal(err)
		}
		n -= len(ds)
	}
}

// poison receives n messages and reports each as a terminal failure.
func (f *fixture) poison(q string, n int, class string) {
	f.t.Helper()
	for n > 0 {
		ds, err := f.eng.Receive(context.Background(), q, engine.ReceiveRequest{Max: min(n, 10), WaitSet: true})
		if err != nil || len(ds) == 0 {
			f.t.Fatalf("receive: %v", err)
		}
		for _, d := range ds {
			if _, err := f.eng.ReportFailure(q, d.ReceiptHandle, engine.Failure{ErrorClass: class, Message: "boom", Terminal: true}); err != nil {
				f.t.Fatal(err)
			}
		}
		n -= len(ds)
	}
}

func (f *fixture) get(path string, out any) int {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			f.t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func (f *fixture) queue(ov Overview, name string) QueueMeters {
	for _, q := range ov.Queues {
		if q.Name == name {
			return q
		}
	}
	f.t.Fatalf("no queue %s in overview", name)
	return QueueMeters{}
}

func TestOverviewMetersRatesAndSeries(t *testing.T) {
	f := newFixture(t, Options{})
	f.d.tick()
	// One minute of traffic, sampled every 5 s: 12 messages sent and
	// processed per step (100 ms each), plus 3 poison per step.
	for range 12 {
		f.send("orders", 15)
		f.process("orders", 12, 100*time.Millisecond)
		f.poison("orders", 3, "KeyError")
		f.clk.Advance(5*time.Second - 200*time.Millisecond)
		f.d.tick()
	}
	var ov Overview
	if code := f.get("/sluice/v1/dashboard/overview", &ov); code != 200 {
		t.Fatalf("overview: %d", code)
	}
	if ov.Thresholds.DLQWarn != 50 || ov.Thresholds.DLQCritical != 200 || ov.SampleIntervalSeconds != 5 {
		t.Fatalf("defaults: %+v", ov)
	}
	dlq := f.queue(ov, "orders-dlq")
	if !dlq.IsDeadLetterQueue || dlq.Depth != 36 || dlq.Level != "ok" || len(dlq.Sources) != 1 {
		t.Fatalf("dlq meters: %+v", dlq)
	}
	if dlq.Growth == nil || dlq.Growth.Arrivals != 36 {
		t.Fatalf("growth: %+v", dlq.Growth)
	}
	o := f.queue(ov, "orders")
	if o.DeadLetterQueue != "orders-dlq" || o.MaxReceiveCount != 3 || o.Level != "" {
		t.Fatalf("orders: %+v", o)
	}
	// 15 sent per 5 s = 3/s over the last minute.
	if o.Rates == nil || o.Rates.Sent < 2.9 || o.Rates.Sent > 3.1 || o.Rates.Deleted < 2.3 || o.Rates.Deleted > 2.5 {
		t.Fatalf("rates: %+v", o.Rates)
	}
	s := o.Series
	if len(s.T) != 13 || len(s.Sent) != 13 || len(s.Visible) != 13 {
		t.Fatalf("series lengths: %d %d %d", len(s.T), len(s.Sent), len(s.Visible))
	}
	if s.Sent[0] != 0 || s.Sent[12] != 3 {
		t.Fatalf("sent rates: %v", s.Sent)
	}
	if ds := dlq.Series.Depth; ds[len(ds)-1] != 36 || ds[1] != 3 {
		t.Fatalf("dlq depth series: %v", ds)
	}

	// The queue page: percentiles, reasons, breakdown.
	var qd QueueDetail
	if code := f.get("/sluice/v1/dashboard/queues/orders", &qd); code != 200 {
		t.Fatalf("queue: %d", code)
	}
	if qd.Processing.Samples != 144 || qd.Processing.P50Seconds != 0.1 || qd.Processing.P99Seconds != 0.1 {
		t.Fatalf("processing: %+v", qd.Processing)
	}
	if qd.DeadLettersByReason["terminal"] != 36 || qd.Config.VisibilityTimeoutSeconds != 2 || qd.Config.DeadLetter.Target != "orders-dlq" {
		t.Fatalf("detail: %+v", qd)
	}
	if qd.Breakdown != nil {
		t.Fatal("breakdown on a source queue")
	}
	var dd QueueDetail
	f.get("/sluice/v1/dashboard/queues/orders-dlq", &dd)
	if dd.ArrivalsByReason["terminal"] != 36 || dd.Breakdown == nil || dd.Breakdown.ErrorClasses["KeyError"] != 36 ||
		dd.Breakdown.Sources["orders"] != 36 || dd.Breakdown.Reasons["terminal"] != 36 || dd.Breakdown.Truncated {
		t.Fatalf("dlq detail: %+v %+v", dd.ArrivalsByReason, dd.Breakdown)
	}
	if code := f.get("/sluice/v1/dashboard/queues/nope", nil); code != 404 {
		t.Fatalf("missing queue: %d", code)
	}
	if code := f.get("/sluice/v1/dashboard/nothing", nil); code != 404 {
		t.Fatalf("unknown endpoint: %d", code)
	}
}

func TestDLQLevelsAndHistoryBounds(t *testing.T) {
	f := newFixture(t, Options{SampleInterval: time.Second, History: 10 * time.Second, DLQWarn: 5, DLQCritical: 10})
	f.send("orders", 12)
	f.poison("orders", 6, "E")
	f.d.tick()
	var ov Overview
	f.get("/sluice/v1/dashboard/overview", &ov)
	if l := f.queue(ov, "orders-dlq").Level; l != "warn" {
		t.Fatalf("level at 6: %s", l)
	}
	f.poison("orders", 6, "E")
	f.get("/sluice/v1/dashboard/overview", &ov)
	if l := f.queue(ov, "orders-dlq").Level; l != "critical" {
		t.Fatalf("level at 12: %s", l)
	}
	// The ring keeps History/SampleInterval+2 samples.
	for range 50 {
		f.clk.Advance(time.Second)
		f.d.tick()
	}
	f.d.mu.Lock()
	n := f.d.series["orders"].n()
	f.d.mu.Unlock()
	if n != 12 {
		t.Fatalf("ring holds %d samples, want 12", n)
	}
	f.get("/sluice/v1/dashboard/overview", &ov)
	if got := len(f.queue(ov, "orders").Series.T); got != 11 {
		t.Fatalf("spark points over the 10 s history: %d", got)
	}
	// A deleted queue's series and observations are dropped.
	if err := f.eng.DeleteQueue("orders"); err != nil {
		t.Fatal(err)
	}
	f.d.tick()
	f.d.mu.Lock()
	_, kept := f.d.series["orders"]
	f.d.mu.Unlock()
	if _, obs := f.d.rec.obs.Load("orders"); kept || obs {
		t.Fatalf("deleted queue kept: series %v, observations %v", kept, obs)
	}
}

func TestSeriesDownsampling(t *testing.T) {
	var samples []sample
	for i := range 1000 {
		samples = append(samples, sample{at: start.Add(time.Duration(i) * time.Second), sent: uint64(2 * i), visible: i})
	}
	s := seriesOf(samples, nil, 60)
	if len(s.T) > 60 || len(s.T) < 50 {
		t.Fatalf("%d points", len(s.T))
	}
	if s.Visible[len(s.Visible)-1] != 999 {
		t.Fatal("newest sample not kept")
	}
	for i, r := range s.Sent {
		if r != 2 {
			t.Fatalf("rate %d = %v, want 2 (every point, the first included)", i, r)
		}
	}
	if e := seriesOf(nil, nil, 60); e.T == nil || len(e.T) != 0 {
		t.Fatal("empty series must encode as []")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.9: 90 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if percentile(nil, 0.5) != 0 || percentile(ds[:1], 0.99) != time.Millisecond {
		t.Fatal("edge cases")
	}
}

func TestObserverBounded(t *testing.T) {
	f := newFixture(t, Options{})
	obs := f.d.rec
	for range maxProcessing + 100 {
		obs.Deleted("q", time.Second)
	}
	o := f.d.rec.observed("q")
	if len(o.proc) != maxProcessing {
		t.Fatalf("%d processing times kept", len(o.proc))
	}
	obs.DeadLettered("q", "", engine.ReasonExpired, 0) // dropped: no target
	dead, _ := o.reasons()
	if dead[engine.ReasonExpired] != 1 {
		t.Fatalf("reasons %v", dead)
	}
}

func TestEventsStream(t *testing.T) {
	f := newFixture(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { f.d.Run(ctx); close(ran) }()
	// Run samples once before it parks on its timer: connect after that
	// sample, or it pushes an event of its own between the first one and
	// the one this test waits for (a CI run under -race got it with the
	// send below not in it yet).
	poll.Parked(t, f.clk, 1)
	resp, err := http.Get(f.srv.URL + "/sluice/v1/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	next := func() Overview {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var ov Overview
				if err := json.Unmarshal([]byte(data), &ov); err != nil {
					t.Fatal(err)
				}
				return ov
			}
		}
	}
	if ov := next(); len(ov.Queues) != 2 {
		t.Fatalf("first event: %+v", ov)
	}
	// The next sample pushes the next event.
	f.send("orders", 4)
	f.clk.Advance(5 * time.Second) // the sampler is parked (above)
	if ov := next(); f.queue(ov, "orders").Visible != 4 {
		t.Fatalf("second event: %+v", f.queue(ov, "orders"))
	}
	// Stopping Run ends the stream.
	cancel()
	<-ran
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatalf("stream did not end cleanly: %v", err)
	}
}

func TestStreamLimit(t *testing.T) {
	f := newFixture(t, Options{})
	var chans []chan []byte
	for range maxStreams {
		ch, ok := f.d.subscribe()
		if !ok {
			t.Fatal("refused below the limit")
		}
		chans = append(chans, ch)
	}
	if code := f.get("/sluice/v1/dashboard/events", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("over the limit: %d", code)
	}
	// A slow stream gets the newest overview, never blocks the sampler.
	f.d.broadcast([]byte("a"))
	f.d.broadcast([]byte("b"))
	if got := string(<-chans[0]); got != "b" {
		t.Fatalf("got %q", got)
	}
}

func TestStaticApp(t *testing.T) {
	f := newFixture(t, Options{})
	for path, want := range map[string]string{
		"/ui/":            "text/html",
		"/ui/app.js":      "javascript",
		"/ui/style.css":   "text/css",
		"/ui/favicon.svg": "image/svg+xml",
	} {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), want) {
			t.Errorf("%s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		// Offline: nothing may come from another origin.
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(string(body), bad) && !(path == "/ui/favicon.svg" && bad == "http://") {
				t.Errorf("%s refers to %q", path, bad)
			}
		}
	}
	if code := f.get("/ui/nope.js", nil); code != 404 {
		t.Fatalf("missing file: %d", code)
	}
}

func TestEveryStaticModuleIsImported(t *testing.T) {
	entries, err := staticFiles.ReadDir("static")
	if err != nil {
		t.Fatal(err)
	}
	// Every module is loaded: pages by app.js, helpers (dom.js,
	// charts.js, actions.js) by the pages.
	var all strings.Builder
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".js") {
			b, _ := staticFiles.ReadFile("static/" + e.Name())
			all.Write(b)
		}
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".js") && n != "app.js" && !strings.Contains(all.String(), "from './"+n+"'") {
			t.Errorf("%s is not imported by any module", n)
		}
	}
}

type fakeAlerts []alerts.State

func (a fakeAlerts) States() []alerts.State { return a }

func TestAdvisorEndpoint(t *testing.T) {
	f := newFixture(t, Options{Alerts: fakeAlerts{{Queue: "other-dlq", Rule: alerts.RuleDLQGrowth}}})
	f.d.tick()
	// Processing takes 3 s against a 2 s visibility timeout.
	f.send("orders", 30)
	f.process("orders", 30, 3*time.Second)
	f.clk.Advance(5 * time.Second)
	f.d.tick()
	var a Advice
	if code := f.get("/sluice/v1/advisor", &a); code != 200 {
		t.Fatalf("advisor: %d", code)
	}
	if a.Worst != advisor.Red {
		t.Fatalf("worst %s: %+v", a.Worst, a.Findings)
	}
	want := map[string]advisor.Verdict{
		"orders/visibility":        advisor.Red,
		"orders-dlq/dlq_alert":     advisor.Yellow,
		"orders-dlq/dlq_owner":     advisor.Yellow,
		"orders-dlq/dlq_retention": advisor.Green,
		"orders-dlq/dlq_consumers": advisor.Green,
	}
	got := map[string]advisor.Verdict{}
	for _, fd := range a.Findings {
		got[fd.Queue+"/"+fd.Check] = fd.Verdict
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	st := f.d.Stats(f.clk.Now())
	if qs := st.Queues["orders"]; qs.P99 != 3*time.Second || qs.ProcessingSamples != 30 || qs.Received != 30 {
		t.Fatalf("stats: %+v", qs)
	}
}

// TestWaitingReceivesMeter: a long poll parked on a queue shows in that
// queue's meters as long as it waits.
func TestWaitingReceivesMeter(t *testing.T) {
	f := newFixture(t, Options{})
	waiting := func(name string) int {
		var ov Overview
		if code := f.get("/sluice/v1/dashboard/overview", &ov); code != 200 {
			t.Fatalf("overview: %d", code)
		}
		return f.queue(ov, name).Waiting
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = f.eng.Receive(ctx, "orders", engine.ReceiveRequest{Max: 1, Wait: 20 * time.Second, WaitSet: true})
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("the long poll counted on orders", func() bool { return waiting("orders") == 1 }))
	if n := waiting("orders-dlq"); n != 0 {
		t.Fatalf("orders-dlq shows %d waiting", n)
	}
	cancel()
	<-done
	if n := waiting("orders"); n != 0 {
		t.Fatalf("orders shows %d waiting after the poll returned", n)
	}
}
