// Package metrics exports Sluice's Prometheus metrics: event counters and
// histograms fed by the engine's Observer hook, per-queue gauges read from
// the engine when Prometheus scrapes, the WAL fsync latency of the store,
// and the Go runtime and process collectors. docs/observability.md lists
// every metric.
//
// Each Metrics has its own registry; nothing is registered in the global
// default one, so two brokers (or two tests) in one process do not collide.
//
// # Series of deleted queues
//
// Every per-queue series carries a queue label. When Prometheus scrapes,
// the collector first asks the engine which queues exist and drops the
// counters and histograms of any queue that no longer does; the gauges are
// only ever produced for existing queues. A deleted queue's series thus
// disappear at the first scrape after the delete (and a queue recreated
// under the same name starts again from zero, which Prometheus reads as a
// counter reset).
//
// # Counters start at zero
//
// At each scrape the counters of every existing queue are created at zero,
// and, for a queue with a dead-letter queue, sluice_dead_lettered_total for
// both SQS reasons (max_receives, terminal). Without that, a counter's
// series would appear only with its first event, and increase() in an
// alert rule cannot see the jump from "no series" to its first value: a
// poison wave landing between two scrapes would go unnoticed.
package metrics

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// Histogram buckets, in seconds.
var (
	// timeToDeadLetterBuckets spans a message that fails at once to one
	// that retried for the longest retention (14 days).
	timeToDeadLetterBuckets = []float64{
		1, 5, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600,
		86400, 3 * 86400, 7 * 86400, 14 * 86400,
	}
	// processingBuckets spans a fast consumer to the longest lease
	// (engine.MaxVisibility, 12 h).
	processingBuckets = []float64{
		0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
		60, 300, 900, 3600, 4 * 3600, 12 * 3600,
	}
	// syncBuckets: an NVMe fsync takes tens of microseconds, a cloud
	// volume's a few milliseconds, a sick disk seconds.
	syncBuckets = []float64{
		0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
		0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
	}
)

// initReasons are the dead-letter reasons whose counters start at zero for
// every queue with a dead-letter policy (the reasons the SQS policy and
// failure reports produce).
var initReasons = [...]string{engine.ReasonMaxReceives, engine.ReasonTerminal}

// Metrics collects Sluice's metrics. It needs no engine: it implements
// engine.Observer, so it is made first and passed (or Multi of it and
// other observers) as engine.Options.Observer; then the collector of
// QueueCollector, made with the opened engine, is registered in Registry.
// All methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry
	clk clock.Clock

	sent, received, redelivered, deleted, expired *prometheus.CounterVec
	deadLettered                                  *prometheus.CounterVec
	byClass                                       *classCounter
	timeToDeadLetter, processing                  *prometheus.HistogramVec
	walSync                                       prometheus.Histogram

	// Children of the vectors, cached so that an Observer call is a map
	// load and an atomic add rather than a label hash under the vector's
	// lock.
	queues sync.Map // queue name → *queueMetrics
	dead   sync.Map // deadKey → prometheus.Counter

	// The cardinality guard (cardinality.go).
	maxSeries int
	labelled  atomic.Int64                 // entries in queues
	other     atomic.Pointer[queueMetrics] // queue="(other)"

	visible, inFlight, delayed, oldestAge, isDLQ, dlqTarget, storeFailed, unlabelled *prometheus.Desc
	dropped, paused, waiting                                                         *prometheus.Desc

	http *httpRequests

	// extra holds collectors added by options (WithBuildInfo), registered
	// with the rest in New.
	extra []prometheus.Collector
}

type queueMetrics struct {
	sent, received, redelivered, deleted, expired prometheus.Counter
	timeToDeadLetter, processing                  prometheus.Observer
}

type deadKey struct{ queue, target, reason string }

// Option configures New.
type Option func(*Metrics)

// WithClock makes the oldest-message age use clk (the engine's clock)
// instead of the wall clock.
func WithClock(clk clock.Clock) Option {
	return func(m *Metrics) { m.clk = clk }
}

// New returns a Metrics with its own registry, holding the store's sync
// latency, HTTP requests, build information and the Go runtime and process
// collectors. The per-queue metrics are exported once
// Registry().MustRegister(m.QueueCollector(eng)) has been called.
func New(opts ...Option) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		reg:       prometheus.NewRegistry(),
		clk:       clock.Real{},
		maxSeries: DefaultMaxQueueSeries,
		byClass:   newClassCounter(),
		http:      newHTTPRequests(),

		sent:         counter("sluice_sent_total", "Messages stored by Send.", "queue"),
		received:     counter("sluice_received_total", "Messages returned by Receive, including redeliveries.", "queue"),
		redelivered:  counter("sluice_redelivered_total", "Messages returned by Receive that had been received before.", "queue"),
		deleted:      counter("sluice_deleted_total", "Messages deleted by consumers after a receive.", "queue"),
		expired:      counter("sluice_expired_total", "Messages removed because their retention ran out.", "queue"),
		deadLettered: counter("sluice_dead_lettered_total", "Messages moved from queue to its dead-letter queue target, by reason.", "queue", "target", "reason"),
		timeToDeadLetter: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_time_to_dead_letter_seconds",
			Help:    "Time from a message's send to its dead-lettering, by the queue it left.",
			Buckets: timeToDeadLetterBuckets,
		}, []string{"queue"}),
		processing: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_processing_seconds",
			Help:    "Time from a message's last receive to its delete.",
			Buckets: processingBuckets,
		}, []string{"queue"}),
		walSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_store_wal_sync_seconds",
			Help:    "Latency of the store's write-ahead-log fsyncs, which every durable write waits for.",
			Buckets: syncBuckets,
		}),

		visible:     prometheus.NewDesc("sluice_queue_visible_messages", "Messages ready to be received now.", []string{"queue"}, nil),
		inFlight:    prometheus.NewDesc("sluice_queue_inflight_messages", "Messages received and not yet deleted or returned.", []string{"queue"}, nil),
		delayed:     prometheus.NewDesc("sluice_queue_delayed_messages", "Messages not yet visible because of a delay or retry backoff.", []string{"queue"}, nil),
		oldestAge:   prometheus.NewDesc("sluice_queue_oldest_message_age_seconds", "Age of the oldest message in the queue, in any state, from its send; 0 when empty.", []string{"queue"}, nil),
		isDLQ:       prometheus.NewDesc("sluice_queue_is_dlq", "1 when some queue dead-letters into this queue (its dead-letter policy names it, or its AMQP dead-letter exchange routes to it), else 0.", []string{"queue"}, nil),
		dlqTarget:   prometheus.NewDesc("sluice_queue_dead_letter_target", "1 for each queue with a dead-letter policy, labelled with its target.", []string{"queue", "target"}, nil),
		unlabelled:  prometheus.NewDesc("sluice_metrics_unlabelled_queues", "Queues beyond the per-queue series cap, counted together under queue=\"(other)\".", nil, nil),
		dropped:     prometheus.NewDesc("sluice_dropped_total", "Messages dropped for want of a dead-letter target (rejected without requeue, over a length limit, at the delivery limit), since the broker started.", []string{"queue"}, nil),
		paused:      prometheus.NewDesc("sluice_queue_paused", "1 while delivery from the queue is paused by an operator (messages held visible), else 0.", []string{"queue"}, nil),
		waiting:     prometheus.NewDesc("sluice_queue_waiting_receives", "Receives parked on the queue now, waiting for a message: SQS long polls and AMQP consumers with prefetch credit left.", []string{"queue"}, nil),
		storeFailed: prometheus.NewDesc("sluice_store_failed", "1 once a storage error has made the engine refuse all changes, else 0.", nil, nil),
	}
	for _, o := range opts {
		o(m)
	}
	m.reg.MustRegister(
		m.http.vec,
		m.walSync,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.reg.MustRegister(m.extra...)
	return m
}

// QueueCollector returns the collector of the per-queue metrics: the
// counters and histograms this Metrics records as eng's Observer, and the
// gauges and redrive tasks read from eng at every scrape, which also drops
// the series of deleted queues. Register it once, in Registry, after
// engine.Open.
func (m *Metrics) QueueCollector(eng *engine.Engine) prometheus.Collector {
	return engineCollector{queueCollector{m, eng}, newTaskCollector(eng)}
}

// engineCollector is QueueCollector's collector: the queues' and the tasks'.
type engineCollector struct {
	queues queueCollector
	tasks  taskCollector
}

// Describe implements prometheus.Collector.
func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	c.queues.Describe(ch)
	c.tasks.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	c.queues.Collect(ch)
	c.tasks.Collect(ch)
}

// Registry returns the registry holding Sluice's metrics, for registering
// more collectors (such as the alert manager's).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats, for
// GET /metrics. A collector that fails does not fail the scrape: the other
// metrics are still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ObserveSync records the latency of one WAL fsync; pass it as
// pebblestore.Options.OnSync.
func (m *Metrics) ObserveSync(d time.Duration) { m.walSync.Observe(d.Seconds()) }

var _ engine.Observer = (*Metrics)(nil)

// Sent implements engine.Observer.
func (m *Metrics) Sent(queue string, n int) { m.queue(queue).sent.Add(float64(n)) }

// Received implements engine.Observer.
func (m *Metrics) Received(queue string, n, redelivered int) {
	q := m.queue(queue)
	q.received.Add(float64(n))
	if redelivered > 0 {
		q.redelivered.Add(float64(redelivered))
	}
}

// Deleted implements engine.Observer.
func (m *Metrics) Deleted(queue string, processing time.Duration) {
	q := m.queue(queue)
	q.deleted.Inc()
	q.processing.Observe(processing.Seconds())
}

// DeadLettered implements engine.Observer.
func (m *Metrics) DeadLettered(queue, target, reason string, timeToDeadLetter time.Duration) {
	m.queue(queue).timeToDeadLetter.Observe(timeToDeadLetter.Seconds())
	m.deadCounter(deadKey{m.labelFor(queue), m.labelFor(target), reason}).Inc()
}

// DeadLetteredClass implements engine.ErrorClassObserver.
func (m *Metrics) DeadLetteredClass(queue, reason, errorClass string) {
	m.byClass.inc(queue, reason, errorClass)
}

// Expired implements engine.Observer.
func (m *Metrics) Expired(queue string, n int) { m.queue(queue).expired.Add(float64(n)) }

// queue returns the cached children of queue's vectors, creating them
// (at zero) on first use.
func (m *Metrics) queue(name string) *queueMetrics {
	if q, ok := m.queues.Load(name); ok {
		return q.(*queueMetrics)
	}
	if m.labelFor(name) == otherLabel {
		return m.otherQueue()
	}
	actual, loaded := m.queues.LoadOrStore(name, m.newQueueMetrics(name))
	if !loaded {
		m.labelled.Add(1)
	}
	return actual.(*queueMetrics)
}

func (m *Metrics) newQueueMetrics(name string) *queueMetrics {
	return &queueMetrics{
		sent:             m.sent.WithLabelValues(name),
		received:         m.received.WithLabelValues(name),
		redelivered:      m.redelivered.WithLabelValues(name),
		deleted:          m.deleted.WithLabelValues(name),
		expired:          m.expired.WithLabelValues(name),
		timeToDeadLetter: m.timeToDeadLetter.WithLabelValues(name),
		processing:       m.processing.WithLabelValues(name),
	}
}

func (m *Metrics) deadCounter(k deadKey) prometheus.Counter {
	if c, ok := m.dead.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.dead.LoadOrStore(k, m.deadLettered.WithLabelValues(k.queue, k.target, k.reason))
	return c.(prometheus.Counter)
}

// prune drops the series of queues for which gone is true. A queue is
// dropped as a source and as a target of dead-lettering.
func (m *Metrics) prune(isGone func(queue string) bool) {
	gone := func(q string) bool { return q != otherLabel && isGone(q) }
	m.queues.Range(func(k, _ any) bool {
		name := k.(string)
		if !gone(name) {
			return true
		}
		if _, ok := m.queues.LoadAndDelete(name); ok {
			m.labelled.Add(-1)
		}
		m.byClass.forget(name)
		for _, v := range []*prometheus.MetricVec{
			m.sent.MetricVec, m.received.MetricVec, m.redelivered.MetricVec, m.deleted.MetricVec,
			m.expired.MetricVec, m.timeToDeadLetter.MetricVec, m.processing.MetricVec,
		} {
			v.DeleteLabelValues(name)
		}
		return true
	})
	m.dead.Range(func(k, _ any) bool {
		dk := k.(deadKey)
		if !gone(dk.queue) && !gone(dk.target) {
			return true
		}
		m.dead.Delete(dk)
		m.deadLettered.DeleteLabelValues(dk.queue, dk.target, dk.reason)
		return true
	})
}

// queueCollector is registered in place of the vectors, so that within one
// scrape the pruning of deleted queues happens before the vectors are
// collected, and the gauges are read from the engine.
type queueCollector struct {
	m   *Metrics
	eng *engine.Engine
}

func (c queueCollector) vectors() []prometheus.Collector {
	m := c.m
	return []prometheus.Collector{m.sent, m.received, m.redelivered, m.deleted, m.expired, m.deadLettered, m.byClass.vec, m.timeToDeadLetter, m.processing}
}

// Describe implements prometheus.Collector.
func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vectors() {
		v.Describe(ch)
	}
	m := c.m
	for _, d := range []*prometheus.Desc{m.visible, m.inFlight, m.delayed, m.oldestAge, m.isDLQ, m.dlqTarget, m.storeFailed, m.unlabelled, m.dropped, m.paused, m.waiting} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It reads each queue's counts
// with engine.GetQueue (constant time per queue, no message scan).
func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.collectQueues(c.eng, ch)
	for _, v := range c.vectors() {
		v.Collect(ch)
	}
}

func (m *Metrics) collectQueues(eng *engine.Engine, ch chan<- prometheus.Metric) {
	failed := 0.0
	if eng.Failed() != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(m.storeFailed, prometheus.GaugeValue, failed)

	// A queue the snapshot could not read (the store has failed, and
	// sluice_store_failed says so) keeps its counters but has no gauges.
	snap := eng.Snapshot()
	infos, exists := snap.Infos, snap.Exists
	dlqs := make(map[string]bool)
	for dlq := range eng.DeadLetterQueues() {
		dlqs[dlq] = true
	}
	// A queue missing from the list may have been created since; only
	// one the engine does not know now is gone.
	m.prune(func(q string) bool {
		if exists[q] {
			return false
		}
		_, err := eng.Config(q)
		return errors.Is(err, engine.ErrQueueNotFound)
	})

	now := m.clk.Now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	var folded int
	var other struct{ visible, inFlight, delayed, age, waiting float64 }
	for _, info := range infos {
		name := info.Name
		m.queue(name) // the counters exist from the queue's first scrape
		age := 0.0
		if !info.OldestSentAt.IsZero() {
			age = max(0, now.Sub(info.OldestSentAt).Seconds())
		}
		if m.labelFor(name) == otherLabel {
			folded++
			other.visible += float64(info.Visible)
			other.inFlight += float64(info.InFlight)
			other.delayed += float64(info.Delayed)
			other.age = max(other.age, age)
			other.waiting += float64(info.Waiting)
			continue
		}
		gauge(m.visible, float64(info.Visible), name)
		gauge(m.inFlight, float64(info.InFlight), name)
		gauge(m.delayed, float64(info.Delayed), name)
		gauge(m.oldestAge, age, name)
		gauge(m.waiting, float64(info.Waiting), name)
		isDLQ := 0.0
		if dlqs[name] {
			isDLQ = 1
		}
		gauge(m.isDLQ, isDLQ, name)
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(info.Dropped), name)
		paused := 0.0
		if info.Config.Paused {
			paused = 1
		}
		gauge(m.paused, paused, name)
		if d := info.Config.DeadLetter; d != nil {
			gauge(m.dlqTarget, 1, name, d.Target)
			if exists[d.Target] && m.labelFor(d.Target) != otherLabel {
				for _, r := range initReasons {
					m.deadCounter(deadKey{name, d.Target, r})
				}
				if info.Config.CrashLimit > 0 {
					m.deadCounter(deadKey{name, d.Target, engine.ReasonConsumerCrash})
				}
			}
		}
	}
	gauge(m.unlabelled, float64(folded))
	if folded > 0 {
		gauge(m.visible, other.visible, otherLabel)
		gauge(m.inFlight, other.inFlight, otherLabel)
		gauge(m.delayed, other.delayed, otherLabel)
		gauge(m.oldestAge, other.age, otherLabel)
		gauge(m.waiting, other.waiting, otherLabel)
	}
}
