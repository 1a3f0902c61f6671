package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dedup"
)

// calls counts handler calls per message body.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) inc(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[body]++
	return c.n[body]
}

func (c *calls) get(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[body]
}

func newWorker(t *testing.T, src worker.Source, h worker.HandlerFunc, o worker.Options) *worker.Worker {
	t.Helper()
	w, err := worker.New(src, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// modes runs a test against the failure-report extension when the broker
// serves it, and always against the plain-SQS fallback.
func modes(t *testing.T, fn func(t *testing.T, b *broker, mode worker.ExtensionMode)) {
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		fn(t, startBroker(t), worker.ExtensionOff)
	})
	t.Run("auto", func(t *testing.T) {
		t.Parallel()
		fn(t, startBroker(t), worker.ExtensionAuto)
	})
}

func TestTransientFailuresRecover(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, b *broker, mode worker.ExtensionMode) {
		url, dlq := b.queue("orders", 2, 5, nil)
		b.send(url, "a", "b", "c", "d", "e")
		var c calls
		var done atomic.Int32
		o := fastOptions(t)
		w := newWorker(t, b.source(url, worker.SQSSourceOptions{Extension: mode}), func(_ context.Context, m *worker.Message) error {
			if n := c.inc(string(m.Body)); n <= 2 {
				if m.Attempt != n {
					t.Errorf("%s: attempt %d on call %d", m.Body, m.Attempt, n)
				}
				return worker.Transient(fmt.Errorf("downstream timeout on call %d", n))
			}
			done.Add(1)
			return nil
		}, o)
		run(t, w)
		waitFor(t, 20*time.Second, "all five processed", func() bool { return done.Load() == 5 && w.Stats().Processed == 5 })
		waitFor(t, 5*time.Second, "queue empty", func() bool { return b.depth(url) == 0 })
		if n := b.depth(dlq); n != 0 {
			t.Errorf("dlq depth %d", n)
		}
		st := w.Stats()
		if st.Processed != 5 || st.Failed != 10 || st.Retried+st.Deferred != 10 || st.DeadLettered != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestPoisonEndsInDLQWithContext(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, b *broker, mode worker.ExtensionMode) {
		url, dlq := b.queue("orders", 2, 3, nil)
		ids := b.send(url, "ok-1", "poison", "ok-2")
		var c calls
		o := fastOptions(t)
		w := newWorker(t, b.source(url, worker.SQSSourceOptions{Extension: mode}), func(_ context.Context, m *worker.Message) error {
			c.inc(string(m.Body))
			if string(m.Body) == "poison" {
				// Unclassified: transient by default, so it is retried
				// until maxReceiveCount.
				return errors.New("cannot parse order")
			}
			return nil
		}, o)
		run(t, w)
		waitFor(t, 20*time.Second, "poison in the DLQ", func() bool { return b.depth(dlq) == 1 })
		waitFor(t, 5*time.Second, "queue empty", func() bool { return b.depth(url) == 0 })
		if n := c.get("poison"); n != 3 {
			t.Errorf("poison handled %d times, want maxReceiveCount = 3", n)
		}
		ext := mode == worker.ExtensionAuto && b.extension()
		if ext {
			msgs := b.browse("orders-dlq")
			if len(msgs) != 1 {
				t.Fatalf("browse: %v", msgs)
			}
			lf, _ := msgs[0]["lastFailure"].(map[string]any)
			if lf["errorClass"] != "cannot parse order" || lf["message"] != "cannot parse order" || lf["consumerVersion"] != "test-1.0" {
				t.Errorf("last failure %v", lf)
			}
		}
		got := b.drainDLQ(dlq)
		if len(got) != 1 || got[0].ID != ids[1] || got[0].Body != "poison" {
			t.Fatalf("dlq: %+v", got)
		}
		a := got[0].Attrs
		if a["SluiceDeadLetterReason"] != "max_receives" || a["SluiceAttempts"] != "3" {
			t.Errorf("dead-letter context %v", a)
		}
		if ext {
			if a["SluiceErrorClass"] != "cannot parse order" || a["SluiceErrorMessage"] != "cannot parse order" ||
				a["SluiceConsumerVersion"] != "test-1.0" || a["SluiceConsumerId"] == "" || a["SluiceErrorTrace"] == "" {
				t.Errorf("failure context %v", a)
			}
			waitFor(t, 5*time.Second, "dead-lettering counted", func() bool { return w.Stats().DeadLettered == 1 })
		} else {
			t.Logf("mode %v: no failure-report extension, the context is only logged", mode)
		}
	})
}

var errBadInput = errors.New("missing required field customer_id")

func TestTerminalDeadLetteredOnFirstAttempt(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, b *broker, mode worker.ExtensionMode) {
		url, dlq := b.queue("orders", 5, 5, nil)
		b.send(url, "bad", "panic", "good")
		var c calls
		o := fastOptions(t)
		w := newWorker(t, b.source(url, worker.SQSSourceOptions{Extension: mode}), func(_ context.Context, m *worker.Message) error {
			c.inc(string(m.Body))
			switch string(m.Body) {
			case "bad":
				return worker.Terminal(fmt.Errorf("validate: %w", errBadInput))
			case "panic":
				parts := strings.Split(string(m.Body), ":")
				_ = parts[1] // a bug: index out of range
			}
			return nil
		}, o)
		run(t, w)
		waitFor(t, 20*time.Second, "two in the DLQ", func() bool { return b.depth(dlq) == 2 })
		waitFor(t, 5*time.Second, "queue empty", func() bool { return b.depth(url) == 0 })
		for _, body := range []string{"bad", "panic", "good"} {
			if n := c.get(body); n != 1 {
				t.Errorf("%s handled %d times, want 1", body, n)
			}
		}
		ext := mode == worker.ExtensionAuto && b.extension()
		for _, m := range b.drainDLQ(dlq) {
			a := m.Attrs
			if !ext {
				// Plain SQS: handed back until maxReceiveCount moved it.
				if a["SluiceDeadLetterReason"] != "max_receives" {
					t.Errorf("%s: %v", m.Body, a)
				}
				continue
			}
			if a["SluiceDeadLetterReason"] != "terminal" || a["SluiceAttempts"] != "1" {
				t.Errorf("%s: %v", m.Body, a)
			}
			want := map[string]string{"bad": "missing required field customer_id", "panic": "panic(runtime.Error)"}[m.Body]
			if m.Body == "panic" {
				want = a["SluiceErrorClass"] // the runtime error's concrete type varies; check the prefix
				if len(want) < 6 || want[:6] != "panic(" {
					t.Errorf("panic class %q", want)
				}
			}
			if a["SluiceErrorClass"] != want {
				t.Errorf("%s: class %q, want %q", m.Body, a["SluiceErrorClass"], want)
			}
		}
	})
}

func TestSlowHandlerKeptAliveByHeartbeats(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	url, _ := b.queue("slow", 1, 5, nil)
	b.send(url, "slow")
	var c calls
	var finished atomic.Bool
	o := fastOptions(t)
	o.Concurrency = 3 // idle handlers would pick up a redelivery
	w := newWorker(t, b.source(url, worker.SQSSourceOptions{}), func(ctx context.Context, m *worker.Message) error {
		if n := c.inc(string(m.Body)); n > 1 {
			t.Errorf("redelivered while the first handler was alive (call %d, attempt %d)", n, m.Attempt)
		}
		// Three and a half visibility timeouts of real work.
		select {
		case <-time.After(3500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		finished.Store(true)
		return nil
	}, o)
	run(t, w)
	waitFor(t, 15*time.Second, "slow handler finished", func() bool { return finished.Load() && w.Stats().Processed == 1 })
	waitFor(t, 5*time.Second, "queue empty", func() bool { return b.depth(url) == 0 })
	if n := c.get("slow"); n != 1 {
		t.Errorf("handled %d times", n)
	}
	if st := w.Stats(); st.Received != 1 || st.Processed != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestBreakerAndBudgetUnderOutage(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	url, dlq := b.queue("outage", 2, 50, nil)
	const total = 60
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = "m" + strconv.Itoa(i)
	}
	b.send(url, bodies...)

	var outage atomic.Bool
	outage.Store(true)
	var calls, ok atomic.Int64
	var seen sync.Map
	rec := &recorder{}
	o := fastOptions(t)
	o.Metrics = rec
	o.Concurrency = 10
	o.Breaker = worker.Breaker{Threshold: 0.5, MinAttempts: 20, Window: 5 * time.Second, OpenFor: 700 * time.Millisecond}
	o.RetryBudget = worker.RetryBudget{Ratio: 0.2, MinRetries: 2, Window: 5 * time.Second}
	w := newWorker(t, b.source(url, worker.SQSSourceOptions{}), func(_ context.Context, m *worker.Message) error {
		calls.Add(1)
		if outage.Load() {
			return worker.Transient(errors.New("payments API: 503"))
		}
		if _, dup := seen.LoadOrStore(string(m.Body), true); !dup {
			ok.Add(1)
		}
		return nil
	}, o)
	start := time.Now()
	run(t, w)

	waitFor(t, 10*time.Second, "breaker open", func() bool { return w.BreakerState() == worker.BreakerOpen })
	openedAfter, c0 := time.Since(start), calls.Load()
	// While the outage lasts the breaker cycles open → half-open (one
	// probe) → open. Wait for a few cycles and count the handler calls.
	waitFor(t, 10*time.Second, "three probes", func() bool {
		n := 0
		for _, s := range rec.states() {
			if s == worker.BreakerHalfOpen {
				n++
			}
		}
		return n >= 3
	})
	during, c1 := time.Since(start)-openedAfter, calls.Load()
	before := float64(c0) / openedAfter.Seconds()
	rate := float64(c1-c0) / during.Seconds()
	t.Logf("outage: %d calls in %v before the breaker opened (%.0f/s), %d in the %v after (%.1f/s)",
		c0, openedAfter.Round(time.Millisecond), before, c1-c0, during.Round(time.Millisecond), rate)
	// In flight when it opened (≤ Concurrency) plus one probe per cycle.
	if c1-c0 > int64(o.Concurrency)+int64(len(rec.states())) {
		t.Errorf("%d handler calls while the breaker was open", c1-c0)
	}
	if rate*4 > before {
		t.Errorf("receive rate did not drop: %.1f/s before, %.1f/s while open", before, rate)
	}
	st := w.Stats()
	if st.Deferred == 0 || st.Retried > uint64(float64(st.Failed)*0.2)+2*3 {
		t.Errorf("retry budget: %+v", st)
	}

	outage.Store(false)
	waitFor(t, 20*time.Second, "breaker closed", func() bool { return w.BreakerState() == worker.BreakerClosed })
	waitFor(t, 20*time.Second, "every message processed", func() bool { return ok.Load() == total })
	waitFor(t, 5*time.Second, "queue empty", func() bool { return b.depth(url) == 0 })
	if n := b.depth(dlq); n != 0 {
		t.Errorf("%d messages dead-lettered by an outage", n)
	}
	if st := w.Stats(); st.BreakerOpens == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestIdempotentRedrive(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	url, _ := b.queue("payments", 2, 3, nil)
	ids := b.send(url, "charge-42")
	var charges atomic.Int32
	var keys sync.Map
	o := fastOptions(t)
	o.Deduper = dedup.NewMemory(time.Hour)
	w := newWorker(t, b.source(url, worker.SQSSourceOptions{}), func(_ context.Context, m *worker.Message) error {
		keys.Store(worker.DefaultKey(m), true)
		charges.Add(1) // the side effect
		return nil
	}, o)
	run(t, w)
	waitFor(t, 10*time.Second, "first charge", func() bool { return w.Stats().Processed == 1 })

	// The same message turns up in the DLQ (say, its delete was lost and
	// it was dead-lettered) and an operator redrives it: the redrive makes
	// a new message, with a new MessageId and SluiceOriginalMessageId set.
	b.admin("/sluice/v1/queues/payments-dlq/import", fmt.Sprintf(`{"id":%q,"body":"charge-42"}`+"\n", ids[0]))
	b.admin("/sluice/v1/queues/payments-dlq/redrive", `{"destination":"payments","rate":500}`)
	waitFor(t, 10*time.Second, "redriven copy skipped", func() bool { return w.Stats().Duplicates == 1 })
	waitFor(t, 5*time.Second, "queue empty", func() bool { return b.depth(url) == 0 })
	if n := charges.Load(); n != 1 {
		t.Errorf("charged %d times", n)
	}
	if _, ok := keys.Load(ids[0]); !ok {
		t.Errorf("key was not the original MessageId")
	}
}

func TestShutdownLosesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"graceful", 10 * time.Second},     // in-flight handlers finish
		{"forced", 300 * time.Millisecond}, // in-flight handlers are released
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBroker(t)
			url, _ := b.queue("jobs", 30, 0, nil)
			const total = 40
			bodies := make([]string, total)
			for i := range bodies {
				bodies[i] = "job-" + strconv.Itoa(i)
			}
			b.send(url, bodies...)
			var processed sync.Map
			var n atomic.Int32
			o := fastOptions(t)
			o.Concurrency = 5
			o.Prefetch = 5
			o.ShutdownTimeout = tc.timeout
			w := newWorker(t, b.source(url, worker.SQSSourceOptions{}), func(ctx context.Context, m *worker.Message) error {
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return ctx.Err()
				}
				processed.Store(string(m.Body), true)
				n.Add(1)
				return nil
			}, o)
			stop := run(t, w)
			waitFor(t, 10*time.Second, "some processed and others in flight", func() bool {
				return n.Load() >= 5 && w.Stats().Received >= uint64(n.Load())+3
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			done := 0
			processed.Range(func(any, any) bool { done++; return true })
			left := b.depth(url)
			st := w.Stats()
			t.Logf("processed %d, left %d, released %d", done, left, st.Released)
			if done+left != total {
				t.Errorf("processed %d + left %d != sent %d", done, left, total)
			}
			if tc.name == "forced" && st.Released == 0 {
				t.Errorf("nothing released: %+v", st)
			}
			if tc.name == "graceful" && st.Released != 0 {
				t.Errorf("released %d on a graceful shutdown", st.Released)
			}
		})
	}
}

// A Sluice whose failure endpoint is not there (here: a reverse proxy
// that only forwards the SQS API) is detected on the first report, which
// then falls back to plain SQS: the poison still reaches the DLQ, and the
// handler runs once.
func TestMissingExtensionFallsBackToPlainSQS(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	var reports atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reports.Add(1)
		http.NotFound(w, r)
	}))
	defer proxy.Close()
	url, dlq := b.queue("orders", 5, 3, nil)
	b.send(url, "bad-1", "bad-2")
	var c calls
	src := b.source(url, worker.SQSSourceOptions{ExtensionEndpoint: proxy.URL})
	o := fastOptions(t)
	o.Concurrency = 1 // one report at a time, so the first one decides
	w := newWorker(t, src, func(_ context.Context, m *worker.Message) error {
		c.inc(string(m.Body))
		return worker.Terminal(errBadInput)
	}, o)
	run(t, w)
	waitFor(t, 20*time.Second, "both in the DLQ", func() bool { return b.depth(dlq) == 2 })
	if c.get("bad-1") != 1 || c.get("bad-2") != 1 {
		t.Errorf("handled %v", c.n)
	}
	if n := reports.Load(); n != 1 {
		t.Errorf("%d reports to the missing endpoint, want 1 (then remembered)", n)
	}
	for _, m := range b.drainDLQ(dlq) {
		if m.Attrs["SluiceDeadLetterReason"] != "max_receives" || m.Attrs["SluiceErrorClass"] != "" {
			t.Errorf("%s: %v", m.Body, m.Attrs)
		}
	}
}
