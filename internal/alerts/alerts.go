// Package alerts evaluates Sluice's built-in alert rules against the
// engine's per-queue statistics, keeps each alert's state, and notifies
// webhooks of every transition.
//
// # Rules
//
// Each rule is evaluated per queue, every Options.Interval, from
// engine.GetQueue (constant-time counts; messages are never scanned) and
// from the dead-letter arrivals that Arrivals, the engine's Observer, counts:
//
//	rule                severity           fires when                           queues
//	dlq_growth          page               arrivals in window > DLQGrowthCount   dead-letter queues
//	dlq_depth           warning, critical  all messages >= threshold             dead-letter queues
//	queue_depth         warning, critical  visible messages >= threshold         other queues
//	oldest_message_age  warning, critical  age of oldest message >= threshold    all queues
//	not_consumed        warning            visible, none waiting, no receive     other queues, not paused
//	                                       for NotConsumedAfter
//
// A dead-letter queue is one that some queue's DeadLetterPolicy names, or
// one that has received a dead letter since the Manager started. Growth,
// not depth, is what should page (dlq-practice §8.2): a DLQ that has sat
// at 3 for a month is noise, one adding 50 an hour is an incident.
//
// # State
//
// An alert is one (queue, rule, severity). Its status is ok until it
// first fires, then firing, then resolved once its condition no longer
// holds, and firing again if it returns. Each change to firing and to
// resolved is logged and sent to every webhook. An alert whose queue is
// deleted (or stops being a dead-letter queue) is resolved, if firing, and
// forgotten. Firing alerts are kept in the engine's metadata and survive
// a restart, and the growth rule's window survives a planned one
// (persist.go); the not_consumed rule counts a queue's time without a
// receive from the Manager's start when it has had none since, or, for an
// alert firing before the restart, from before it fired.
//
// # Goroutines
//
// Run evaluates on the injectable clock and starts one sender goroutine
// per webhook. Evaluation hands notifications to the senders without
// blocking, so a slow or dead webhook delays only its own notifications.
package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// Rule names.
const (
	RuleDLQGrowth  = "dlq_growth"
	RuleDLQDepth   = "dlq_depth"
	RuleQueueDepth = "queue_depth"
	RuleOldestAge  = "oldest_message_age"
	// RuleNotConsumed: a backlog nobody takes from (Options.NotConsumedAfter).
	RuleNotConsumed = "not_consumed"
)

// Severities.
const (
	SeverityPage     = "page"
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
)

// Statuses of an alert.
const (
	StatusOK       = "ok"       // has not fired since the Manager started
	StatusFiring   = "firing"   // the condition holds
	StatusResolved = "resolved" // fired, and the condition no longer holds
)

// State is one alert's current state.
type State struct {
	Queue     string    `json:"queue"`
	Rule      string    `json:"rule"`
	Severity  string    `json:"severity"`
	Status    string    `json:"status"`
	Value     float64   `json:"value"`     // at the last evaluation; seconds for ages
	Threshold float64   `json:"threshold"` // seconds for ages
	Since     time.Time `json:"since"`     // the last change of Status (first evaluation for ok)
	Message   string    `json:"message"`
}

type key struct{ queue, rule, severity string }

type alert struct {
	State
	startsAt time.Time // when it last started firing
}

// Manager evaluates the rules and keeps the alerts. Create it with New.
type Manager struct {
	eng  *engine.Engine
	opts Options
	clk  clock.Clock
	log  *slog.Logger

	arrivals *arrivals
	hooks    []*webhook

	// started is when New made the Manager: the not_consumed rule counts
	// from it for a queue that has had no receive since.
	started time.Time

	mu     sync.Mutex
	alerts map[key]*alert

	// parks counts how often Run has started waiting for its next
	// evaluation, and nextEval is when that is due (Unix ns, on the
	// Manager's clock): tests on a fake clock advance it only while Run
	// waits, so that no evaluation is skipped.
	parks    atomic.Uint64
	nextEval atomic.Int64

	firingDesc, notifyDesc *prometheus.Desc
}

// New returns a Manager for eng, whose dlq_growth rule reads arr, the
// Arrivals given to eng's Observer (nil: a counter of its own, which no
// engine feeds, for a Manager whose growth rule sees no arrivals). opts
// must pass Validate and arr must have been made with the same
// DLQGrowthWindow (New panics otherwise: both are the caller's mistakes,
// caught at start-up, where a bad configuration stops the broker with a
// clear message). clk nil means the wall clock, log nil discards.
//
// eng may be nil only for a Manager that never runs (one asked for its
// Collector's descriptions).
func New(eng *engine.Engine, arr *Arrivals, opts Options, clk clock.Clock, log *slog.Logger) *Manager {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if arr == nil {
		arr = NewArrivals(opts, clk)
	}
	if arr.window != opts.DLQGrowthWindow {
		panic(fmt.Sprintf("alerts: Arrivals made for a %v window, Options say %v", arr.window, opts.DLQGrowthWindow))
	}
	m := &Manager{
		eng:      eng,
		opts:     opts,
		clk:      clk,
		log:      log,
		arrivals: arr.a,
		started:  clk.Now(),
		alerts:   make(map[key]*alert),
		firingDesc: prometheus.NewDesc("sluice_alert_firing",
			"1 while the built-in alert is firing, else 0.", []string{"queue", "rule", "severity"}, nil),
		notifyDesc: prometheus.NewDesc("sluice_alert_notifications_total",
			"Webhook notifications by outcome: delivered, failed (attempts used up or refused), dropped (queue full or shutdown).",
			[]string{"result"}, nil),
	}
	for i, u := range opts.Webhooks {
		m.hooks = append(m.hooks, newWebhook(m, i, u))
	}
	return m
}

// Run evaluates the rules at once and then every Options.Interval of the
// Manager's clock, until ctx ends. It also runs the webhook senders; on
// return they have delivered what they could within WebhookDrainTimeout
// and logged what they dropped. Call Run once, on a Manager made with an
// engine.
func (m *Manager) Run(ctx context.Context) {
	if m.eng == nil {
		panic("alerts: Run on a Manager made without an engine")
	}
	var wg sync.WaitGroup
	for _, h := range m.hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.run(ctx)
		}()
	}
	m.load()
	m.evaluate()
	t := m.clk.NewTimer(m.opts.Interval)
	next := m.clk.Now().Add(m.opts.Interval)
	for done := false; !done; {
		m.nextEval.Store(next.UnixNano())
		m.parks.Add(1)
		select {
		case <-ctx.Done():
			t.Stop()
			done = true
		case <-t.C():
			m.evaluate()
			t.Reset(m.opts.Interval)
			next = m.clk.Now().Add(m.opts.Interval)
		}
	}
	m.saveArrivals()
	wg.Wait()
}

// check is one rule's verdict on one alert at this evaluation.
type check struct {
	key
	value, threshold float64
	firing           bool
	message          string
}

// evaluate runs every rule on every queue and applies the transitions.
func (m *Manager) evaluate() {
	eng := m.eng
	now := m.clk.Now()
	// Arrivals are read before the queues: the engine reports a dead
	// letter once its copy is in the target, so every arrival counted
	// here is in the counts read below. (Read the other way round, an
	// arrival between the two reads looked like a DLQ the operator had
	// emptied, and cleared the growth window.)
	arrived := m.arrivals.counts(now)
	// A queue the snapshot could not read (the store has failed) keeps
	// its alerts as they are: that is not a reason to resolve them.
	snap := eng.Snapshot()
	infos, exists, unread := snap.Infos, snap.Exists, snap.Unread
	dlqs := make(map[string]bool)
	for dlq := range eng.DeadLetterQueues() {
		dlqs[dlq] = true
	}
	// A queue missing from the list may have been created since (and
	// already received dead letters); keep its arrivals unless the engine
	// does not know it now.
	m.arrivals.retain(func(q string) bool {
		if exists[q] {
			return true
		}
		_, err := eng.Config(q)
		return !errors.Is(err, engine.ErrQueueNotFound)
	})

	var checks []check
	for _, info := range infos {
		a, known := arrived[info.Name]
		checks = m.rules(checks, info, dlqs[info.Name], a, known, now)
	}
	m.apply(checks, unread, now)
}

// rules appends the checks of every enabled rule for one queue.
// arrived is the queue's dead-letter arrivals in the growth window, read
// before info; known reports whether the queue has received any since the
// Manager started.
func (m *Manager) rules(out []check, info engine.QueueInfo, isDLQ bool, arrived int, known bool, now time.Time) []check {
	o := &m.opts
	q := info.Name
	isDLQ = isDLQ || known
	depth := func(rule string, value int, warn, crit int, what string) {
		for _, t := range []struct {
			sev string
			th  int
		}{{SeverityWarning, warn}, {SeverityCritical, crit}} {
			if t.th > 0 {
				out = append(out, check{
					key: key{q, rule, t.sev}, value: float64(value), threshold: float64(t.th),
					firing:  value >= t.th,
					message: fmt.Sprintf("%s holds %d %s (%s at %d)", q, value, what, t.sev, t.th),
				})
			}
		}
	}
	if isDLQ {
		if info.Visible+info.InFlight+info.Delayed == 0 && arrived > 0 {
			// The operator emptied the DLQ (redrive, delete, purge): the
			// wave it paged about is handled, so the page clears now
			// rather than when the arrivals age out of the window, and
			// the window counts from here.
			m.arrivals.clear(q)
			arrived = 0
		}
		if o.DLQGrowthWindow > 0 {
			out = append(out, check{
				key: key{q, RuleDLQGrowth, SeverityPage}, value: float64(arrived), threshold: float64(o.DLQGrowthCount),
				firing: arrived > o.DLQGrowthCount,
				message: fmt.Sprintf("%d messages dead-lettered into %s in the last %v (pages above %d)",
					arrived, q, o.DLQGrowthWindow, o.DLQGrowthCount),
			})
		}
		depth(RuleDLQDepth, info.Visible+info.InFlight+info.Delayed, o.DLQDepthWarn, o.DLQDepthCritical, "dead letters")
	} else {
		depth(RuleQueueDepth, info.Visible, o.QueueDepthWarn, o.QueueDepthCritical, "visible messages")
		if o.NotConsumedAfter > 0 && !info.Config.Paused {
			out = append(out, m.notConsumed(info, now))
		}
	}
	var age time.Duration
	if !info.OldestSentAt.IsZero() {
		age = max(0, now.Sub(info.OldestSentAt))
	}
	for _, t := range []struct {
		sev string
		th  time.Duration
	}{{SeverityWarning, o.OldestAgeWarn}, {SeverityCritical, o.OldestAgeCritical}} {
		if t.th > 0 {
			out = append(out, check{
				key: key{q, RuleOldestAge, t.sev}, value: age.Seconds(), threshold: t.th.Seconds(),
				firing:  age >= t.th,
				message: fmt.Sprintf("the oldest message in %s is %v old (%s at %v)", q, age.Round(time.Second), t.sev, t.th),
			})
		}
	}
	return out
}

// notConsumed is the not_consumed check of a queue that is neither a
// dead-letter queue nor paused: firing while the queue has visible
// messages, no receive waits on it (engine.QueueInfo.Waiting) and none
// has asked it for messages for Options.NotConsumedAfter, counted from
// the Manager's start when none has since (engine.ReceivedAtHint: SQS
// receives, AMQP consumers' fetches and basic.get, found or not). A
// consumer that holds its whole prefetch that long without settling
// counts as not consuming too.
//
// An alert already firing when no receive has come since the start (one
// loaded after a restart, persist.go) keeps counting from before it
// fired, so a restart in the middle of an outage does not resolve it.
func (m *Manager) notConsumed(info engine.QueueInfo, now time.Time) check {
	k, after := key{info.Name, RuleNotConsumed, SeverityWarning}, m.opts.NotConsumedAfter
	since := m.started
	if at, ok := m.eng.ReceivedAtHint(info.Name); ok && at.After(since) {
		since = at
	} else if fired, ok := m.firingSince(k); ok && fired.Add(-after).Before(since) {
		since = fired.Add(-after)
	}
	idle := max(0, now.Sub(since))
	return check{
		key: k, value: idle.Seconds(), threshold: after.Seconds(),
		firing: info.Visible > 0 && info.Waiting == 0 && idle >= after,
		message: fmt.Sprintf("%s holds %d visible messages and no consumer has asked for one in %v (warning at %v)",
			info.Name, info.Visible, idle.Round(time.Second), after),
	}
}

// firingSince returns when the alert k started firing, if it is firing.
func (m *Manager) firingSince(k key) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.alerts[k]; a != nil && a.Status == StatusFiring {
		return a.Since, true
	}
	return time.Time{}, false
}

// apply updates the alerts from this evaluation's checks, resolves and
// forgets the alerts that were not checked (except those of unread
// queues), and notifies the transitions.
func (m *Manager) apply(checks []check, unread map[string]bool, now time.Time) {
	var changed []Notification
	m.mu.Lock()
	seen := make(map[key]bool, len(checks))
	for _, c := range checks {
		seen[c.key] = true
		a := m.alerts[c.key]
		if a == nil {
			a = &alert{State: State{Queue: c.queue, Rule: c.rule, Severity: c.severity, Status: StatusOK, Since: now}}
			m.alerts[c.key] = a
		}
		a.Value, a.Threshold, a.Message = c.value, c.threshold, c.message
		switch {
		case c.firing && a.Status != StatusFiring:
			a.Status, a.Since, a.startsAt = StatusFiring, now, now
			changed = append(changed, a.notification())
		case !c.firing && a.Status == StatusFiring:
			a.Status, a.Since = StatusResolved, now
			changed = append(changed, a.notification())
		}
	}
	for k, a := range m.alerts {
		if seen[k] || unread[k.queue] {
			continue
		}
		delete(m.alerts, k)
		if a.Status == StatusFiring {
			a.Status, a.Since = StatusResolved, now
			a.Message = fmt.Sprintf("%s is no longer evaluated for %s: it was deleted or is no longer a dead-letter queue", a.Queue, a.Rule)
			changed = append(changed, a.notification())
		}
	}
	starts := make(map[key]time.Time, len(changed))
	for _, n := range changed {
		starts[key{n.Queue, n.Rule, n.Severity}] = n.StartsAt
	}
	m.mu.Unlock()

	m.persist(changed, starts)
	for _, n := range changed {
		attrs := []any{"rule", n.Rule, "queue", n.Queue, "severity", n.Severity, "value", n.Value, "threshold", n.Threshold, "message", n.Message}
		if n.Status == StatusFiring {
			m.log.Warn("alert firing", attrs...)
		} else {
			m.log.Info("alert resolved", append(attrs, "fired_for", n.EndsAt.Sub(n.StartsAt))...)
		}
		for _, h := range m.hooks {
			h.enqueue(n)
		}
	}
}

// States returns every alert, sorted by queue, rule and severity.
func (m *Manager) States() []State {
	m.mu.Lock()
	out := make([]State, 0, len(m.alerts))
	for _, a := range m.alerts {
		out = append(out, a.State)
	}
	m.mu.Unlock()
	sortStates(out)
	return out
}

// sortStates sorts alerts by queue, rule and severity.
func sortStates(out []State) {
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Severity < b.Severity
	})
}

// List is the answer of GET /sluice/v1/alerts.
type List struct {
	Alerts []State `json:"alerts"`
	// Missing names the parts of a cluster whose alerts are not listed (a
	// shard whose leader could not be reached); absent when none.
	Missing []string `json:"missing,omitempty"`
}

// ServeHTTP answers GET /sluice/v1/alerts with this manager's alerts
// (Handler without others).
func (m *Manager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.Handler(nil).ServeHTTP(w, r)
}

// Handler answers GET /sluice/v1/alerts with a List. The query parameters
// status, queue and rule, when given, keep only the alerts that match
// (e.g. ?status=firing). others, when not nil, adds the alerts kept
// outside this manager (a cluster's other shards, each evaluated by its
// own leader), and names what it could not read in Missing.
func (m *Manager) Handler(others func(ctx context.Context) ([]State, []string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodHead {
			return
		}
		all := m.States()
		var l List
		if others != nil {
			more, missing := others(r.Context())
			all = append(all, more...)
			sortStates(all)
			l.Missing = missing
		}
		q := r.URL.Query()
		l.Alerts = []State{}
		for _, s := range all {
			if match(q.Get("status"), s.Status) && match(q.Get("queue"), s.Queue) && match(q.Get("rule"), s.Rule) {
				l.Alerts = append(l.Alerts, s)
			}
		}
		// The status is sent: a client gone by now cannot be told.
		_ = json.NewEncoder(w).Encode(l)
	})
}

func match(want, got string) bool { return want == "" || want == got }

// Collector exports sluice_alert_firing{queue,rule,severity} (one series
// per alert) and sluice_alert_notifications_total{result}. Register it in
// the metrics registry.
func (m *Manager) Collector() prometheus.Collector { return collector{m} }

type collector struct{ m *Manager }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.firingDesc
	ch <- c.m.notifyDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	for _, s := range m.States() {
		v := 0.0
		if s.Status == StatusFiring {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.firingDesc, prometheus.GaugeValue, v, s.Queue, s.Rule, s.Severity)
	}
	var delivered, failed, dropped uint64
	for _, h := range m.hooks {
		delivered += h.delivered.Load()
		failed += h.failed.Load()
		dropped += h.dropped.Load()
	}
	ch <- prometheus.MustNewConstMetric(m.notifyDesc, prometheus.CounterValue, float64(delivered), "delivered")
	ch <- prometheus.MustNewConstMetric(m.notifyDesc, prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(m.notifyDesc, prometheus.CounterValue, float64(dropped), "dropped")
}
