package metrics

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

type fixture struct {
	t   *testing.T
	clk *clock.Fake
	e   *engine.Engine
	m   *Metrics
	srv *httptest.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.m = New(WithClock(f.clk))
	e, err := engine.Open(engine.Options{Store: memstore.New(), Clock: f.clk, Observer: f.m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	f.e = e
	f.m.Registry().MustRegister(f.m.QueueCollector(e))
	f.srv = httptest.NewServer(f.m.Handler())
	t.Cleanup(f.srv.Close)
	return f
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

func (f *fixture) send(q string, bodies ...string) {
	f.t.Helper()
	var msgs []engine.Message
	for _, b := range bodies {
		msgs = append(msgs, engine.Message{Body: []byte(b)})
	}
	res, err := f.e.Send(q, msgs)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			f.t.Fatal(r.Err)
		}
	}
}

func (f *fixture) recv(q string, max int) []engine.Delivery {
	f.t.Helper()
	d, err := f.e.Receive(context.Background(), q, engine.ReceiveRequest{Max: max, WaitSet: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// scrape GETs /metrics and parses the text exposition.
func (f *fixture) scrape() families {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("scrape: %s", resp.Status)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		f.t.Fatalf("parse scrape: %v", err)
	}
	return families(fams)
}

type families map[string]*dto.MetricFamily

// find returns the metric of family name whose labels include want, or nil.
func (fs families) find(name string, want map[string]string) *dto.Metric {
	fam := fs[name]
	if fam == nil {
		return nil
	}
next:
	for _, m := range fam.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value returns a counter's or gauge's value, or NaN when the series is
// absent.
func (fs families) value(name string, labels ...string) float64 {
	m := fs.find(name, pairs(labels))
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

func (fs families) histogram(name string, labels ...string) *dto.Histogram {
	m := fs.find(name, pairs(labels))
	if m == nil {
		return nil
	}
	return m.Histogram
}

func pairs(kv []string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// queuesIn lists the distinct queue label values in every sluice_ family,
// and the target values of sluice_dead_lettered_total.
func (fs families) queuesIn() []string {
	seen := map[string]bool{}
	for name, fam := range fs {
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if l.GetName() == "queue" || l.GetName() == "target" && name == "sluice_dead_lettered_total" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	var out []string
	for q := range seen {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

func expect(t *testing.T, fs families, want float64, name string, labels ...string) {
	t.Helper()
	if got := fs.value(name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func TestEventsAndGauges(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("q", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
	})
	f.create("plain", nil)

	// Before any event, the counters of existing queues are exported at
	// zero, and so is the dead-letter counter of q's policy.
	fs := f.scrape()
	expect(t, fs, 0, "sluice_sent_total", "queue", "q")
	expect(t, fs, 0, "sluice_dead_lettered_total", "queue", "q", "target", "dlq", "reason", "max_receives")
	expect(t, fs, 0, "sluice_store_failed")

	start := f.clk.Now()
	f.send("q", "a", "b", "c")
	d := f.recv("q", 3)
	if len(d) != 3 {
		t.Fatalf("received %d", len(d))
	}
	f.clk.Advance(2 * time.Second)
	if _, err := f.e.Delete("q", []string{d[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.ReportFailure("q", d[1].ReceiptHandle, engine.Failure{ErrorClass: "KeyError", Terminal: true}); err != nil {
		t.Fatal(err)
	}
	// The third message's lease ends; its next receive finds it at
	// maxReceiveCount and dead-letters it instead of returning it.
	f.clk.Advance(31 * time.Second)
	if got := f.recv("q", 1); len(got) != 0 {
		t.Fatalf("expected the message to be dead-lettered, got %d", len(got))
	}

	// A redelivery on a queue without a dead-letter queue.
	f.send("plain", "x")
	f.recv("plain", 1)
	f.clk.Advance(31 * time.Second)
	if got := f.recv("plain", 1); len(got) != 1 {
		t.Fatalf("redelivery: got %d", len(got))
	}
	f.m.ObserveSync(300 * time.Microsecond)

	fs = f.scrape()
	expect(t, fs, 3, "sluice_sent_total", "queue", "q")
	expect(t, fs, 3, "sluice_received_total", "queue", "q")
	expect(t, fs, 0, "sluice_redelivered_total", "queue", "q")
	expect(t, fs, 1, "sluice_deleted_total", "queue", "q")
	expect(t, fs, 1, "sluice_dead_lettered_total", "queue", "q", "target", "dlq", "reason", "terminal")
	expect(t, fs, 1, "sluice_dead_lettered_total", "queue", "q", "target", "dlq", "reason", "max_receives")
	expect(t, fs, 2, "sluice_received_total", "queue", "plain")
	expect(t, fs, 1, "sluice_redelivered_total", "queue", "plain")

	if h := fs.histogram("sluice_processing_seconds", "queue", "q"); h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() != 2 {
		t.Errorf("processing histogram %v, want one sample of 2 s", h)
	}
	h := fs.histogram("sluice_time_to_dead_letter_seconds", "queue", "q")
	if h == nil || h.GetSampleCount() != 2 || h.GetSampleSum() != 2+33 {
		t.Errorf("time-to-dead-letter histogram %v, want samples of 2 s and 33 s", h)
	}
	if h := fs.histogram("sluice_store_wal_sync_seconds"); h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() != 0.0003 {
		t.Errorf("sync histogram %v", h)
	}

	expect(t, fs, 2, "sluice_queue_visible_messages", "queue", "dlq")
	expect(t, fs, 0, "sluice_queue_visible_messages", "queue", "q")
	expect(t, fs, 1, "sluice_queue_inflight_messages", "queue", "plain")
	expect(t, fs, 0, "sluice_queue_delayed_messages", "queue", "plain")
	expect(t, fs, 1, "sluice_queue_is_dlq", "queue", "dlq")
	expect(t, fs, 0, "sluice_queue_is_dlq", "queue", "q")
	expect(t, fs, 1, "sluice_queue_dead_letter_target", "queue", "q", "target", "dlq")
	// The dead letters keep their original send time: the DLQ's oldest
	// message is as old as the wave.
	expect(t, fs, f.clk.Now().Sub(start).Seconds(), "sluice_queue_oldest_message_age_seconds", "queue", "dlq")
	expect(t, fs, 0, "sluice_queue_oldest_message_age_seconds", "queue", "q")

	// The Go runtime and process collectors are in the same registry.
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fs[name] == nil {
			t.Errorf("%s missing from the scrape", name)
		}
	}
}

func TestExpiredCounter(t *testing.T) {
	f := newFixture(t)
	f.create("short", func(c *engine.QueueConfig) { c.Retention = engine.MinRetention })
	f.send("short", "a", "b")
	// Each step waits until the engine's scheduler is parked on the clock
	// (or the count is reached).
	poll.AdvanceUntil(t, f.clk, 5*time.Second, 1, "the retention to expire the messages", func() bool {
		return f.scrape().value("sluice_expired_total", "queue", "short") == 2
	})
	expect(t, f.scrape(), 0, "sluice_queue_visible_messages", "queue", "short")
}

func TestDeletedQueueSeriesDisappear(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("q", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
	})
	f.create("keep", nil)
	f.send("q", "a")
	d := f.recv("q", 1)
	if _, err := f.e.ReportFailure("q", d[0].ReceiptHandle, engine.Failure{Terminal: true}); err != nil {
		t.Fatal(err)
	}
	f.send("keep", "k")
	if got := f.scrape().queuesIn(); strings.Join(got, ",") != "dlq,keep,q" {
		t.Fatalf("queues in scrape %v", got)
	}

	if err := f.e.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	fs := f.scrape()
	if got := fs.queuesIn(); strings.Join(got, ",") != "dlq,keep" {
		t.Fatalf("after deleting q, queues in scrape %v", got)
	}
	expect(t, fs, 1, "sluice_sent_total", "queue", "keep")
	// With no source left, dlq is no longer anyone's dead-letter queue.
	expect(t, fs, 0, "sluice_queue_is_dlq", "queue", "dlq")

	// Deleting a target drops the dead-letter series that name it.
	f.create("src", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
	})
	if f.scrape().find("sluice_dead_lettered_total", map[string]string{"queue": "src"}) == nil {
		t.Fatal("src's dead-letter counter is not initialised")
	}
	if err := f.e.DeleteQueue("dlq"); err != nil {
		t.Fatal(err)
	}
	fs = f.scrape()
	if m := fs.find("sluice_dead_lettered_total", map[string]string{"target": "dlq"}); m != nil {
		t.Fatalf("series of a deleted target remain: %v", m)
	}
	if got := fs.queuesIn(); strings.Join(got, ",") != "keep,src" {
		t.Fatalf("after deleting dlq, queues in scrape %v", got)
	}
	// src's policy still names dlq, and the scrape says so.
	expect(t, fs, 1, "sluice_queue_dead_letter_target", "queue", "src", "target", "dlq")
}

// TestCountsBeforeQueueCollector: what the Observer records before the
// engine exists (during engine.Open, say) is exported once the queue
// collector, made with the engine, is registered; before that the
// per-queue series are not exported at all.
func TestCountsBeforeQueueCollector(t *testing.T) {
	m := New()
	m.Sent("q", 2)
	if got := testutilValue(t, m, "sluice_sent_total"); !math.IsNaN(got) {
		t.Fatalf("sent exported without a queue collector: %v", got)
	}
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, _, err := eng.CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	m.Registry().MustRegister(m.QueueCollector(eng))
	if got := testutilValue(t, m, "sluice_sent_total"); got != 2 {
		t.Fatalf("sent %v", got)
	}
}

// testutilValue gathers the registry directly, without HTTP.
func testutilValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() == name && len(fam.Metric) == 1 {
			return fam.Metric[0].GetCounter().GetValue()
		}
	}
	return math.NaN()
}

func TestTwoInstancesDoNotCollide(t *testing.T) {
	a, b := New(), New()
	a.Sent("q", 1)
	if got := testutilValue(t, b, "sluice_sent_total"); !math.IsNaN(got) {
		t.Fatalf("b sees a's event: %v", got)
	}
}

type recorder struct {
	engine.NopObserver
	name string
	log  *[]string
}

func (r recorder) Sent(q string, n int) { *r.log = append(*r.log, r.name+":"+q) }

func TestMulti(t *testing.T) {
	var log []string
	a := recorder{name: "a", log: &log}
	b := recorder{name: "b", log: &log}
	c := recorder{name: "c", log: &log}

	if _, ok := Multi().(engine.NopObserver); !ok {
		t.Error("Multi() is not a NopObserver")
	}
	if _, ok := Multi(nil, engine.NopObserver{}).(engine.NopObserver); !ok {
		t.Error("Multi of nothing useful is not a NopObserver")
	}
	if o := Multi(nil, a); o != engine.Observer(a) {
		t.Errorf("Multi of one observer is %T, want the observer", o)
	}
	o := Multi(a, Multi(b, nil, c))
	if got := len(o.(multi)); got != 3 {
		t.Fatalf("nested Multi not flattened: %d observers", got)
	}
	o.Sent("q", 1)
	o.Received("q", 1, 0)
	o.Deleted("q", time.Second)
	o.DeadLettered("q", "d", engine.ReasonTerminal, time.Second)
	o.Expired("q", 1)
	if strings.Join(log, ",") != "a:q,b:q,c:q" {
		t.Fatalf("fan-out order %v", log)
	}
}

// BenchmarkObserver measures the hot-path cost the engine pays per event.
func BenchmarkObserver(b *testing.B) {
	m := New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Sent("orders", 1)
			m.Deleted("orders", time.Millisecond)
		}
	})
}
