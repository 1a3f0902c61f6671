// Package dashboard is Sluice's operator UI: a static single-page app under
// /ui/ (plain HTML, CSS and ES modules, embedded, no network needed) and the
// JSON it reads under /sluice/v1/dashboard/, plus the config advisor at
// /sluice/v1/advisor (package advisor).
//
// # What it records
//
// The engine keeps only counters since start and current gauges. The
// dashboard adds history:
//
//   - Run samples every queue's QueueInfo each SampleInterval of the
//     injectable clock into a bounded series per queue (History long,
//     stored as runs of unchanged readings: history.go): depth
//     by state, oldest age, and the sent/received/redelivered/deleted/
//     dead-lettered counters, from which rates are derived.
//   - Observer (give it to engine.Options, with metrics.Multi when there
//     are other observers) records each deleted message's processing time
//     (its last receive to its delete) in a bounded ring per queue, for
//     percentiles, and counts dead letters by reason per source and per
//     target queue.
//
// Memory is bounded per queue: at most maxSamples samples (one run each
// at worst, one in all for an idle queue) and maxProcessing processing
// times. Series of deleted queues are dropped.
//
// # Endpoints
//
//	GET /ui/…                                  the app (index.html, modules, CSS)
//	GET /sluice/v1/dashboard/overview          every queue: current meters and sparkline series
//	GET /sluice/v1/dashboard/queues/{name}     one queue: configuration, history, percentiles, dead letters by reason
//	GET /sluice/v1/dashboard/events            server-sent events: the overview after every sample
//	GET /sluice/v1/advisor                     the advisor's findings
//
// Everything else the app does (browse, delete, export, redrive, tasks,
// alerts) goes to the admin API and the alerts endpoint directly.
//
// # Goroutines
//
// Run is the only goroutine the package starts; each open event stream is
// served on its request's goroutine and ends when the client goes, when
// Run returns, or never otherwise, so stop Run before shutting the HTTP
// server down.
package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// Options configure a Dashboard. Zero values take the defaults noted.
type Options struct {
	Logger *slog.Logger // nil: discard
	Clock  clock.Clock  // nil: clock.Real
	// SampleInterval is how often queues are sampled (5s).
	SampleInterval time.Duration
	// History is how much of the past is kept and shown (15m).
	History time.Duration

	// SparkWindow is the span of the overview's sparklines (5m, at most
	// History).
	SparkWindow time.Duration
	// GrowthWindow is the span over which a dead-letter queue's growth
	// (arrivals) is counted (15m, the default dlq_growth rule; at most
	// History).
	GrowthWindow time.Duration
	// DLQWarn and DLQCritical colour a dead-letter queue's depth yellow
	// and red (50 and 200, dlq-practice §8.2).
	DLQWarn, DLQCritical int
	// Alerts, when set, tells the advisor which queues an alert rule
	// watches (*alerts.Manager satisfies it). Nil skips that check.
	Alerts AlertSource
	// OtherQueues, when set, returns the meters of the queues that live
	// outside this dashboard's engine (a cluster's other shards, each
	// read from its own leader's dashboard), and a description of each
	// part it could not reach. The overview lists them with this
	// engine's queues.
	OtherQueues func(ctx context.Context) (queues []QueueMeters, missing []string)
	// OtherFindings is OtherQueues for the advisor: the findings on the
	// queues outside this dashboard's engine, each part checked by its
	// own leader's advisor.
	OtherFindings func(ctx context.Context) (findings []advisor.Finding, missing []string)
	// Placement, when set, names where this dashboard's queues live in a
	// cluster with several shards: every queue's meters carry it.
	Placement *Placement
}

// Placement is a cluster shard and the node leading it.
type Placement struct {
	Shard  int
	Leader uint64
}

// AlertSource reports the current alerts (every rule evaluated per queue,
// whatever its status).
type AlertSource interface {
	States() []alerts.State
}

// Bounds on what is kept per queue.
const (
	maxSamples    = 20000 // samples per queue (History / SampleInterval, capped)
	maxProcessing = 4096  // processing times per queue
	maxStreams    = 64    // concurrent event streams; more answer 503 (the app then polls)
)

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = 5 * time.Second
	}
	if o.History <= 0 {
		o.History = 15 * time.Minute
	}
	if o.History < o.SampleInterval {
		o.History = o.SampleInterval
	}
	if o.SparkWindow <= 0 {
		o.SparkWindow = 5 * time.Minute
	}
	o.SparkWindow = min(o.SparkWindow, o.History)
	if o.GrowthWindow <= 0 {
		o.GrowthWindow = 15 * time.Minute
	}
	o.GrowthWindow = min(o.GrowthWindow, o.History)
	if o.DLQWarn <= 0 {
		o.DLQWarn = 50
	}
	if o.DLQCritical <= 0 {
		o.DLQCritical = 200
	}
	return o
}

// Dashboard records queue history and serves the UI. Create it with New.
type Dashboard struct {
	eng  *engine.Engine
	rec  *Recorder
	opts Options
	log  *slog.Logger
	clk  clock.Clock
	mux  *http.ServeMux

	mu sync.Mutex
	// timeline and series are the history: see history.go.
	timeline *timeline
	series   map[string]*series
	subs     map[chan []byte]struct{}
	done     chan struct{} // closed when Run returns
	running  bool
}

var _ http.Handler = (*Dashboard)(nil)

// New returns a Dashboard for eng, whose processing times and dead letters
// by reason come from rec, the Recorder given to eng's Observer (nil: a
// Recorder of its own, which no engine feeds). rec must run on
// opts.Clock. New panics on a nil engine or a Recorder on another clock:
// both are wiring mistakes.
func New(eng *engine.Engine, rec *Recorder, opts Options) *Dashboard {
	if eng == nil {
		panic("dashboard: New without an engine")
	}
	opts = opts.withDefaults()
	if rec == nil {
		rec = NewRecorder(opts.Clock)
	}
	if rec.clk != opts.Clock {
		panic("dashboard: the Recorder runs on another clock than Options.Clock")
	}
	d := &Dashboard{
		eng:      eng,
		rec:      rec,
		opts:     opts,
		log:      opts.Logger,
		clk:      opts.Clock,
		timeline: newTimeline(min(maxSamples, int(opts.History/opts.SampleInterval)+2)),
		series:   make(map[string]*series),
		subs:     make(map[chan []byte]struct{}),
		done:     make(chan struct{}),
	}
	d.routes()
	return d
}

// Run samples every queue at once and then every SampleInterval until ctx
// ends, pushing each sample to the open event streams. Call it once.
func (d *Dashboard) Run(ctx context.Context) {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		panic("dashboard: Run called twice")
	}
	d.running = true
	d.mu.Unlock()
	defer close(d.done)
	d.tick()
	t := d.clk.NewTimer(d.opts.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			d.tick()
			t.Reset(d.opts.SampleInterval)
		}
	}
}

// tick takes one sample of every queue and notifies the streams.
func (d *Dashboard) tick() {
	eng := d.eng
	now := d.clk.Now()
	snap := eng.Snapshot()
	// Queues the snapshot could not read (a failed store) keep their
	// history: they exist, only this sample is missing.
	exists := snap.Exists
	taken := make([]reading, 0, len(snap.Infos))
	takenNames := make([]string, 0, len(snap.Infos))
	for i := range snap.Infos {
		taken = append(taken, readingOf(&snap.Infos[i]))
		takenNames = append(takenNames, snap.Infos[i].Name)
	}
	d.mu.Lock()
	k := d.timeline.add(now)
	for i, n := range takenNames {
		s := d.series[n]
		if s == nil {
			s = newSeries(d.timeline)
			d.series[n] = s
		}
		s.push(k, taken[i])
	}
	for n := range d.series {
		if !exists[n] && gone(eng, n) {
			delete(d.series, n)
		}
	}
	streams := len(d.subs)
	d.mu.Unlock()
	d.rec.obs.Range(func(k, _ any) bool {
		if n := k.(string); !exists[n] && gone(eng, n) {
			d.rec.obs.Delete(n)
		}
		return true
	})
	if streams > 0 {
		if data, err := marshal(d.overview(context.Background(), eng, now)); err == nil {
			d.broadcast(data)
		} else {
			d.log.Error("encoding the overview", "err", err)
		}
	}
}

// gone reports whether the engine does not know queue q now (a queue
// created after ListQueues is not gone).
func gone(eng *engine.Engine, q string) bool {
	_, err := eng.Config(q)
	return errors.Is(err, engine.ErrQueueNotFound)
}

// sample is one reading of a queue.
type sample struct {
	at                         time.Time
	visible, inflight, delayed int
	oldestAge                  float64 // seconds
	sent, received, redeliv    uint64
	deleted, deadLettered, exp uint64
}

// sampleOf is what info says at now.
func sampleOf(info *engine.QueueInfo, now time.Time) sample {
	rd := readingOf(info)
	return rd.at(now)
}

func (s *sample) depth() int { return s.visible + s.inflight + s.delayed }

// observed is what the Recorder records for one queue.
type observed struct {
	mu   sync.Mutex
	proc []procTime // ring of maxProcessing
	next int
	// Dead letters since start by reason: as the source, and as the target.
	deadByReason    map[string]uint64
	arrivedByReason map[string]uint64
}

// procTime is one processing time and when it ended; 16 bytes, where a
// time.Time alone takes 24 (a busy queue holds maxProcessing of them).
type procTime struct {
	at int64 // Unix nanoseconds
	d  time.Duration
}

func (r *Recorder) observed(q string) *observed {
	if o, ok := r.obs.Load(q); ok {
		return o.(*observed)
	}
	o, _ := r.obs.LoadOrStore(q, &observed{deadByReason: map[string]uint64{}, arrivedByReason: map[string]uint64{}})
	return o.(*observed)
}

// processing returns the processing times recorded at or after t.
func (o *observed) processing(t time.Time) []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]time.Duration, 0, len(o.proc))
	from := t.UnixNano()
	for _, p := range o.proc {
		if p.at >= from {
			out = append(out, p.d)
		}
	}
	return out
}

func (o *observed) reasons() (dead, arrived map[string]uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dead = make(map[string]uint64, len(o.deadByReason))
	for k, v := range o.deadByReason {
		dead[k] = v
	}
	arrived = make(map[string]uint64, len(o.arrivedByReason))
	for k, v := range o.arrivedByReason {
		arrived[k] = v
	}
	return dead, arrived
}

// Recorder is the engine.Observer that records, per queue, processing
// times and dead letters by reason, for the dashboard and the advisor. It
// needs no engine, so it is made first and handed to
// engine.Options.Observer (with metrics.Multi when there are other
// observers); then New takes it with the opened engine. It records from
// the engine's first event, before Run starts.
type Recorder struct {
	clk clock.Clock
	obs sync.Map // queue name → *observed
}

// NewRecorder returns an empty Recorder on clk (nil: clock.Real); give it
// the clock of the Dashboard's Options.
func NewRecorder(clk clock.Clock) *Recorder {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Recorder{clk: clk}
}

var _ engine.Observer = (*Recorder)(nil)

// Sent implements engine.Observer; the Recorder ignores it.
func (*Recorder) Sent(string, int) {}

// Received implements engine.Observer; the Recorder ignores it.
func (*Recorder) Received(string, int, int) {}

// Expired implements engine.Observer; the Recorder ignores it.
func (*Recorder) Expired(string, int) {}

// Deleted implements engine.Observer: it records the processing time.
func (r *Recorder) Deleted(queue string, processing time.Duration) {
	ob := r.observed(queue)
	now := r.clk.Now().UnixNano()
	ob.mu.Lock()
	if len(ob.proc) < maxProcessing {
		ob.proc = append(ob.proc, procTime{now, processing})
	} else {
		ob.proc[ob.next] = procTime{now, processing}
		ob.next = (ob.next + 1) % maxProcessing
	}
	ob.mu.Unlock()
}

// DeadLettered implements engine.Observer: it counts the dead letter by
// reason, at its source and at its target.
func (r *Recorder) DeadLettered(queue, target, reason string, _ time.Duration) {
	src := r.observed(queue)
	src.mu.Lock()
	src.deadByReason[reason]++
	src.mu.Unlock()
	if target == "" {
		return
	}
	dst := r.observed(target)
	dst.mu.Lock()
	dst.arrivedByReason[reason]++
	dst.mu.Unlock()
}

// percentile returns the p-quantile (0–1) of sorted by the nearest-rank
// method.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}

// subscribe registers an event stream; ok is false when there are too
// many.
func (d *Dashboard) subscribe() (chan []byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.subs) >= maxStreams {
		return nil, false
	}
	ch := make(chan []byte, 1)
	d.subs[ch] = struct{}{}
	return ch, true
}

func (d *Dashboard) unsubscribe(ch chan []byte) {
	d.mu.Lock()
	delete(d.subs, ch)
	d.mu.Unlock()
}

// broadcast hands data to every stream without blocking: a stream that has
// not taken the previous overview gets this one instead.
func (d *Dashboard) broadcast(data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.subs {
		select {
		case ch <- data:
		default:
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- data:
			default:
			}
		}
	}
}
