package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// The JSON the app reads. Times are RFC 3339 in UTC, durations seconds,
// rates per second; series are oldest first and share the T axis (Unix
// milliseconds).

// Overview is GET /sluice/v1/dashboard/overview and each event of the
// stream.
type Overview struct {
	At                    time.Time     `json:"at"`
	SampleIntervalSeconds float64       `json:"sampleIntervalSeconds"`
	SparkSeconds          float64       `json:"sparkSeconds"`
	HistorySeconds        float64       `json:"historySeconds"`
	Thresholds            Thresholds    `json:"thresholds"`
	Queues                []QueueMeters `json:"queues"`
	// Missing names the parts of a cluster whose queues are not listed:
	// a shard whose leader could not be reached. Empty when every queue
	// is listed.
	Missing []string `json:"missing,omitempty"`
}

// Thresholds colour the DLQ depth meter.
type Thresholds struct {
	DLQWarn     int `json:"dlqWarn"`
	DLQCritical int `json:"dlqCritical"`
}

// QueueMeters is one queue's current meters, with series for sparklines
// (overview) or charts (queue page).
type QueueMeters struct {
	Name              string   `json:"name"`
	FIFO              bool     `json:"fifo"`
	IsDeadLetterQueue bool     `json:"isDeadLetterQueue"`
	Sources           []string `json:"sources"`
	DeadLetterQueue   string   `json:"deadLetterQueue,omitempty"`
	MaxReceiveCount   int      `json:"maxReceiveCount,omitempty"`
	// Paused is true while an operator holds the queue's delivery.
	Paused bool `json:"paused"`
	// Shard and Leader, in a cluster with several shards, name the shard
	// the queue lives on and the node leading it; absent otherwise.
	Shard  *int   `json:"shard,omitempty"`
	Leader uint64 `json:"leader,omitempty"`

	Visible  int `json:"visible"`
	InFlight int `json:"inflight"`
	Delayed  int `json:"delayed"`
	Depth    int `json:"depth"`
	// Waiting counts the receives parked on the queue now
	// (engine.QueueInfo.Waiting); not in the series.
	Waiting          int     `json:"waiting"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	// Level colours a dead-letter queue's depth: ok, warn (>= DLQWarn) or
	// critical (>= DLQCritical); empty on other queues.
	Level string `json:"level,omitempty"`
	// Growth is a dead-letter queue's arrivals over the growth window.
	Growth *Growth `json:"growth,omitempty"`
	// Rates over the last minute (or what has been sampled of it); absent
	// until the queue has been sampled.
	Rates  *Rates  `json:"rates,omitempty"`
	Series *Series `json:"series,omitempty"`
}

// Growth counts a dead-letter queue's arrivals over WindowSeconds (shorter
// than configured while the history fills).
type Growth struct {
	Arrivals      uint64  `json:"arrivals"`
	WindowSeconds float64 `json:"windowSeconds"`
}

// Rates are events per second.
type Rates struct {
	Sent          float64 `json:"sent"`
	Received      float64 `json:"received"`
	Deleted       float64 `json:"deleted"`
	DeadLettered  float64 `json:"deadLettered"`
	Redelivered   float64 `json:"redelivered"`
	WindowSeconds float64 `json:"windowSeconds"`
}

// Series are sampled meters; the rate series are per second over the step
// before each point.
type Series struct {
	T            []int64   `json:"t"`
	Visible      []int     `json:"visible"`
	InFlight     []int     `json:"inflight"`
	Delayed      []int     `json:"delayed"`
	Depth        []int     `json:"depth"`
	OldestAge    []float64 `json:"oldestAge"`
	Sent         []float64 `json:"sent"`
	Received     []float64 `json:"received"`
	Deleted      []float64 `json:"deleted"`
	DeadLettered []float64 `json:"deadLettered"`
	Redelivered  []float64 `json:"redelivered"`
}

// QueueDetail is GET /sluice/v1/dashboard/queues/{name}.
type QueueDetail struct {
	QueueMeters
	HistorySeconds float64           `json:"historySeconds"`
	Config         Config            `json:"config"`
	Tags           map[string]string `json:"tags,omitempty"`
	CreatedAt      time.Time         `json:"createdAt"`
	Counters       Counters          `json:"counters"`
	Processing     Processing        `json:"processing"`
	Redeliveries   Redeliveries      `json:"redeliveries"`
	// DeadLettersByReason counts messages dead-lettered from this queue
	// since the broker started, by reason; ArrivalsByReason those
	// dead-lettered into it.
	DeadLettersByReason map[string]uint64 `json:"deadLettersByReason"`
	ArrivalsByReason    map[string]uint64 `json:"arrivalsByReason"`
	// Breakdown is a dead-letter queue's current content by reason, error
	// class and source queue.
	Breakdown *Breakdown `json:"breakdown,omitempty"`
}

// Config is the part of a queue's configuration the queue page shows.
type Config struct {
	VisibilityTimeoutSeconds float64      `json:"visibilityTimeoutSeconds"`
	DelaySeconds             float64      `json:"delaySeconds"`
	RetentionSeconds         float64      `json:"retentionSeconds"`
	ReceiveWaitSeconds       float64      `json:"receiveWaitSeconds"`
	MaxMessageSize           int          `json:"maxMessageSize"`
	DeadLetter               *DeadLetter  `json:"deadLetter,omitempty"`
	Retry                    *RetryPolicy `json:"retry,omitempty"`
	FIFO                     bool         `json:"fifo"`
	ContentBasedDedup        bool         `json:"contentBasedDeduplication,omitempty"`
	DedupScope               string       `json:"deduplicationScope,omitempty"`
	FifoThroughputLimit      string       `json:"fifoThroughputLimit,omitempty"`
	MaxLength                int          `json:"maxLength,omitempty"`
	MaxLengthBytes           int64        `json:"maxLengthBytes,omitempty"`
	Overflow                 string       `json:"overflow,omitempty"`
	MessageTTLSeconds        *float64     `json:"messageTtlSeconds,omitempty"`
	// Dead-letter practice settings (docs/dlq-contract.md).
	Requeue            string  `json:"requeue,omitempty"`
	CrashLimit         int     `json:"crashLimit,omitempty"`
	CrashWindowSeconds float64 `json:"crashWindowSeconds,omitempty"`
	RetryBudgetPercent int     `json:"retryBudgetPercent,omitempty"`
	UnknownFailure     string  `json:"unknownFailure,omitempty"`
	Paused             bool    `json:"paused"`
}

// DeadLetter is the queue's dead-letter policy.
type DeadLetter struct {
	Target          string `json:"target,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount"`
	Routed          bool   `json:"routed,omitempty"`
}

// RetryPolicy is the broker-side backoff.
type RetryPolicy struct {
	Strategy    string  `json:"strategy"`
	BaseSeconds float64 `json:"baseSeconds"`
	CapSeconds  float64 `json:"capSeconds"`
}

// Counters since the broker started.
type Counters struct {
	Sent         uint64 `json:"sent"`
	Received     uint64 `json:"received"`
	Redelivered  uint64 `json:"redelivered"`
	Deleted      uint64 `json:"deleted"`
	DeadLettered uint64 `json:"deadLettered"`
	Expired      uint64 `json:"expired"`
	Dropped      uint64 `json:"dropped"`
}

// Processing is processing time (last receive to delete) percentiles over
// the messages deleted within the history.
type Processing struct {
	Samples       int     `json:"samples"`
	WindowSeconds float64 `json:"windowSeconds"`
	P50Seconds    float64 `json:"p50Seconds"`
	P90Seconds    float64 `json:"p90Seconds"`
	P99Seconds    float64 `json:"p99Seconds"`
	MaxSeconds    float64 `json:"maxSeconds"`
}

// Redeliveries are receives of messages received before.
type Redeliveries struct {
	Total         uint64  `json:"total"`
	InWindow      uint64  `json:"inWindow"`
	Received      uint64  `json:"receivedInWindow"`
	WindowSeconds float64 `json:"windowSeconds"`
}

// Breakdown counts a dead-letter queue's messages (the first Scanned, in
// queue order) by dead-letter reason, last error class and source queue.
type Breakdown struct {
	Scanned      int            `json:"scanned"`
	Truncated    bool           `json:"truncated"`
	Reasons      map[string]int `json:"reasons"`
	ErrorClasses map[string]int `json:"errorClasses"`
	Sources      map[string]int `json:"sources"`
}

// Limits of the JSON answers.
const (
	sparkPoints     = 60  // points of an overview sparkline
	chartPoints     = 360 // points of a queue page chart
	rateWindow      = time.Minute
	breakdownPages  = 5 // pages of 1000 messages looked at for a breakdown
	breakdownPageSz = 1000
)

func (d *Dashboard) routes() {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", d.static())
	mux.HandleFunc("GET /sluice/v1/dashboard/overview", d.serveOverview)
	mux.HandleFunc("GET /sluice/v1/dashboard/queues/{name}", d.serveQueue)
	mux.HandleFunc("GET /sluice/v1/dashboard/events", d.serveEvents)
	mux.HandleFunc("GET /sluice/v1/advisor", d.serveAdvisor)
	mux.HandleFunc("/sluice/v1/dashboard/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFound", "no such dashboard endpoint")
	})
	d.mux = mux
}

// ServeHTTP serves /ui/, /sluice/v1/dashboard/ and /sluice/v1/advisor.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) serveOverview(w http.ResponseWriter, r *http.Request) {
	eng := d.eng
	writeJSON(w, d.overview(r.Context(), eng, d.clk.Now()))
}

// ServeLocalOverview answers the overview of this dashboard's engine
// alone, without Options.OtherQueues: what a cluster's shard 0 reads from
// the other shards' leaders.
func (d *Dashboard) ServeLocalOverview(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, d.localOverview(d.eng, d.clk.Now()))
}

// otherQueuesTimeout bounds Options.OtherQueues in one overview.
const otherQueuesTimeout = 3 * time.Second

// overview reads every queue now (so the meters are current even between
// samples) and adds the sparkline series from the history; with
// Options.OtherQueues, the other shards' queues too, sorted by name with
// this engine's.
func (d *Dashboard) overview(ctx context.Context, eng *engine.Engine, now time.Time) Overview {
	o := d.localOverview(eng, now)
	if d.opts.OtherQueues == nil {
		return o
	}
	ctx, cancel := context.WithTimeout(ctx, otherQueuesTimeout)
	defer cancel()
	more, missing := d.opts.OtherQueues(ctx)
	o.Queues = append(o.Queues, more...)
	slices.SortFunc(o.Queues, func(a, b QueueMeters) int { return strings.Compare(a.Name, b.Name) })
	o.Missing = missing
	return o
}

// localOverview is overview for this dashboard's engine only.
func (d *Dashboard) localOverview(eng *engine.Engine, now time.Time) Overview {
	o := Overview{
		At:                    now.UTC(),
		SampleIntervalSeconds: d.opts.SampleInterval.Seconds(),
		SparkSeconds:          d.opts.SparkWindow.Seconds(),
		HistorySeconds:        d.opts.History.Seconds(),
		Thresholds:            Thresholds{DLQWarn: d.opts.DLQWarn, DLQCritical: d.opts.DLQCritical},
		Queues:                []QueueMeters{},
	}
	infos, sources := readQueues(eng)
	routedTo := routedDLQs(sources)
	for i := range infos {
		info := &infos[i]
		m := d.meters(info, sources[info.Name], now, d.opts.SparkWindow, sparkPoints)
		if m.DeadLetterQueue == "" {
			m.DeadLetterQueue = routedTo[info.Name]
		}
		o.Queues = append(o.Queues, m)
	}
	return o
}

// routedDLQs maps each source queue to its first dead-letter queue (by
// name) from the dlq → sources map, so that a queue dead-lettering through
// an AMQP dead-letter exchange shows the queue its dead letters reach.
func routedDLQs(sources map[string][]string) map[string]string {
	out := make(map[string]string)
	for dlq, srcs := range sources {
		for _, s := range srcs {
			if cur, ok := out[s]; !ok || dlq < cur {
				out[s] = dlq
			}
		}
	}
	return out
}

// readQueues returns every queue's info, sorted by name, and each DLQ's
// sources (AMQP dead-letter exchanges' targets included).
func readQueues(eng *engine.Engine) ([]engine.QueueInfo, map[string][]string) {
	var infos []engine.QueueInfo
	for _, n := range eng.ListQueues("") {
		info, err := eng.GetQueue(n)
		if err != nil {
			continue
		}
		infos = append(infos, info)
	}
	return infos, eng.DeadLetterQueues()
}

// meters builds a queue's current meters and, from the samples within
// span, a series of at most points points.
func (d *Dashboard) meters(info *engine.QueueInfo, sources []string, now time.Time, span time.Duration, points int) QueueMeters {
	cur := sampleOf(info, now)
	m := QueueMeters{
		Name: info.Name, FIFO: info.Config.FIFO,
		IsDeadLetterQueue: len(sources) > 0, Sources: sources,
		Visible: cur.visible, InFlight: cur.inflight, Delayed: cur.delayed, Depth: cur.depth(),
		OldestAgeSeconds: cur.oldestAge, Paused: info.Config.Paused, Waiting: info.Waiting,
	}
	if m.Sources == nil {
		m.Sources = []string{}
	}
	if p := d.opts.Placement; p != nil {
		k := p.Shard
		m.Shard, m.Leader = &k, p.Leader
	}
	if dl := info.Config.DeadLetter; dl != nil {
		m.DeadLetterQueue, m.MaxReceiveCount = dl.Target, dl.MaxReceiveCount
	}
	d.mu.Lock()
	r := d.series[info.Name]
	var window []sample
	var base *sample // the sample before the window, for the first point's rates
	var rateBase, growthBase sample
	var haveRate, haveGrowth bool
	if r != nil {
		window = r.since(now.Add(-span))
		if len(window) > 0 {
			if b, ok := r.baseline(window[0].at.Add(-time.Nanosecond)); ok && b.at.Before(window[0].at) {
				base = &b
			}
		}
		rateBase, haveRate = r.baseline(now.Add(-rateWindow))
		growthBase, haveGrowth = r.baseline(now.Add(-d.opts.GrowthWindow))
	}
	d.mu.Unlock()

	if m.IsDeadLetterQueue {
		switch {
		case m.Depth >= d.opts.DLQCritical:
			m.Level = "critical"
		case m.Depth >= d.opts.DLQWarn:
			m.Level = "warn"
		default:
			m.Level = "ok"
		}
		if haveGrowth {
			m.Growth = &Growth{Arrivals: sub(cur.sent, growthBase.sent), WindowSeconds: now.Sub(growthBase.at).Seconds()}
		}
	}
	if haveRate {
		if dt := now.Sub(rateBase.at).Seconds(); dt > 0 {
			m.Rates = &Rates{
				Sent: rate(cur.sent, rateBase.sent, dt), Received: rate(cur.received, rateBase.received, dt),
				Deleted: rate(cur.deleted, rateBase.deleted, dt), DeadLettered: rate(cur.deadLettered, rateBase.deadLettered, dt),
				Redelivered: rate(cur.redeliv, rateBase.redeliv, dt), WindowSeconds: dt,
			}
		}
	}
	m.Series = seriesOf(window, base, points)
	return m
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

func rate(a, b uint64, dt float64) float64 { return float64(sub(a, b)) / dt }

// seriesOf downsamples samples to at most points points, keeping the
// newest. base, when not nil, precedes samples and is the first point's
// rate base; without it the first point's rates are zero.
func seriesOf(samples []sample, base *sample, points int) *Series {
	s := &Series{
		T: []int64{}, Visible: []int{}, InFlight: []int{}, Delayed: []int{}, Depth: []int{}, OldestAge: []float64{},
		Sent: []float64{}, Received: []float64{}, Deleted: []float64{}, DeadLettered: []float64{}, Redelivered: []float64{},
	}
	if len(samples) == 0 {
		return s
	}
	stride := max(1, (len(samples)+points-1)/points)
	var picked []sample
	for i := len(samples) - 1; i >= 0; i -= stride {
		picked = append(picked, samples[i])
	}
	slices.Reverse(picked)
	if base == nil && len(picked) > 0 && stride > 1 {
		// The sample before the first picked one (skipped by the
		// stride) is a truer base than none.
		first := len(samples) - 1 - (len(picked)-1)*stride
		if i := max(0, first-stride); i < first {
			base = &samples[i]
		}
	}
	for i, p := range picked {
		var prev sample
		var dt float64
		switch {
		case i > 0:
			prev = picked[i-1]
		case base != nil:
			prev = *base
		}
		if i > 0 || base != nil {
			dt = p.at.Sub(prev.at).Seconds()
		}
		r := func(a, b uint64) float64 {
			if dt <= 0 {
				return 0
			}
			return rate(a, b, dt)
		}
		s.T = append(s.T, p.at.UnixMilli())
		s.Visible = append(s.Visible, p.visible)
		s.InFlight = append(s.InFlight, p.inflight)
		s.Delayed = append(s.Delayed, p.delayed)
		s.Depth = append(s.Depth, p.depth())
		s.OldestAge = append(s.OldestAge, round(p.oldestAge))
		s.Sent = append(s.Sent, round(r(p.sent, prev.sent)))
		s.Received = append(s.Received, round(r(p.received, prev.received)))
		s.Deleted = append(s.Deleted, round(r(p.deleted, prev.deleted)))
		s.DeadLettered = append(s.DeadLettered, round(r(p.deadLettered, prev.deadLettered)))
		s.Redelivered = append(s.Redelivered, round(r(p.redeliv, prev.redeliv)))
	}
	return s
}

// round keeps three decimals, enough for a chart and a smaller answer.
func round(v float64) float64 {
	return float64(int64(v*1000+0.5)) / 1000
}

func (d *Dashboard) serveQueue(w http.ResponseWriter, r *http.Request) {
	eng := d.eng
	name := r.PathValue("name")
	info, err := eng.GetQueue(name)
	if err != nil {
		if errors.Is(err, engine.ErrQueueNotFound) {
			writeError(w, http.StatusNotFound, "QueueNotFound", "the queue does not exist")
			return
		}
		writeError(w, http.StatusServiceUnavailable, "StorageFailed", err.Error())
		return
	}
	all := eng.DeadLetterQueues()
	det := d.detail(eng, &info, all[name], d.clk.Now())
	if det.DeadLetterQueue == "" {
		det.DeadLetterQueue = routedDLQs(all)[name]
	}
	writeJSON(w, det)
}

func (d *Dashboard) detail(eng *engine.Engine, info *engine.QueueInfo, sources []string, now time.Time) QueueDetail {
	q := QueueDetail{
		QueueMeters:    d.meters(info, sources, now, d.opts.History, chartPoints),
		HistorySeconds: d.opts.History.Seconds(),
		Config:         configOf(&info.Config),
		Tags:           info.Tags,
		CreatedAt:      info.CreatedAt.UTC(),
		Counters: Counters{Sent: info.Sent, Received: info.Received, Redelivered: info.Redelivered,
			Deleted: info.Deleted, DeadLettered: info.DeadLettered, Expired: info.Expired, Dropped: info.Dropped},
		DeadLettersByReason: map[string]uint64{},
		ArrivalsByReason:    map[string]uint64{},
	}
	from := now.Add(-d.opts.History)
	if o, ok := d.rec.obs.Load(info.Name); ok {
		ob := o.(*observed)
		q.Processing = processingOf(ob.processing(from), d.opts.History)
		q.DeadLettersByReason, q.ArrivalsByReason = ob.reasons()
	}
	q.Processing.WindowSeconds = d.opts.History.Seconds()
	q.Redeliveries.Total = info.Redelivered
	d.mu.Lock()
	if r := d.series[info.Name]; r != nil {
		if b, ok := r.baseline(from); ok {
			q.Redeliveries.InWindow = sub(info.Redelivered, b.redeliv)
			q.Redeliveries.Received = sub(info.Received, b.received)
			q.Redeliveries.WindowSeconds = now.Sub(b.at).Seconds()
		}
	}
	d.mu.Unlock()
	if q.IsDeadLetterQueue {
		q.Breakdown = breakdown(eng, info.Name)
	}
	return q
}

func processingOf(times []time.Duration, window time.Duration) Processing {
	p := Processing{Samples: len(times), WindowSeconds: window.Seconds()}
	if len(times) == 0 {
		return p
	}
	slices.Sort(times)
	p.P50Seconds = percentile(times, 0.50).Seconds()
	p.P90Seconds = percentile(times, 0.90).Seconds()
	p.P99Seconds = percentile(times, 0.99).Seconds()
	p.MaxSeconds = times[len(times)-1].Seconds()
	return p
}

func configOf(c *engine.QueueConfig) Config {
	out := Config{
		VisibilityTimeoutSeconds: c.Visibility.Seconds(), DelaySeconds: c.Delay.Seconds(),
		RetentionSeconds: c.Retention.Seconds(), ReceiveWaitSeconds: c.ReceiveWait.Seconds(),
		MaxMessageSize: c.MaxMessageSize, FIFO: c.FIFO,
		MaxLength: c.MaxLength, MaxLengthBytes: c.MaxLengthBytes,
	}
	if c.MaxLength > 0 || c.MaxLengthBytes > 0 {
		out.Overflow = c.Overflow
	}
	if c.FIFO {
		out.ContentBasedDedup = c.ContentBasedDedup
		out.DedupScope = "queue"
		if c.DedupScope == engine.DedupScopeMessageGroup {
			out.DedupScope = "messageGroup"
		}
		out.FifoThroughputLimit = c.FifoThroughputLimit
	}
	if dl := c.DeadLetter; dl != nil {
		out.DeadLetter = &DeadLetter{Target: dl.Target, MaxReceiveCount: dl.MaxReceiveCount, Routed: dl.Routed}
	}
	if rp := c.Retry; rp != nil {
		out.Retry = &RetryPolicy{Strategy: rp.Strategy, BaseSeconds: rp.Base.Seconds(), CapSeconds: rp.Cap.Seconds()}
	}
	if c.HasMessageTTL {
		ttl := c.MessageTTL.Seconds()
		out.MessageTTLSeconds = &ttl
	}
	out.Requeue, out.RetryBudgetPercent, out.Paused = c.Requeue, c.RetryBudgetPercent, c.Paused
	out.UnknownFailure = c.UnknownFailure
	if c.CrashLimit > 0 {
		out.CrashLimit = c.CrashLimit
		out.CrashWindowSeconds = c.CrashWindow.Seconds()
		if c.CrashWindow <= 0 {
			out.CrashWindowSeconds = engine.DefaultCrashWindow.Seconds()
		}
	}
	return out
}

// breakdown browses (without changing anything) up to breakdownPages
// pages of a dead-letter queue and counts its messages.
func breakdown(eng *engine.Engine, queue string) *Breakdown {
	b := &Breakdown{Reasons: map[string]int{}, ErrorClasses: map[string]int{}, Sources: map[string]int{}}
	var cursor uint64
	for range breakdownPages {
		page, err := eng.Browse(queue, engine.Filter{}, cursor, breakdownPageSz)
		if err != nil {
			break
		}
		for i := range page.Messages {
			m := &page.Messages[i]
			b.Scanned++
			reason, source, class := "none", m.DeadLetterSource, "none"
			if m.DeadLetter != nil {
				reason, source = m.DeadLetter.Reason, m.DeadLetter.SourceQueue
			}
			if m.LastFailure != nil && m.LastFailure.ErrorClass != "" {
				class = m.LastFailure.ErrorClass
			}
			if source == "" {
				source = "none"
			}
			b.Reasons[reason]++
			b.ErrorClasses[class]++
			b.Sources[source]++
		}
		if page.Next == 0 {
			return b
		}
		cursor = page.Next
	}
	b.Truncated = true
	return b
}

// writeJSON answers 200 with v.
func writeJSON(w http.ResponseWriter, v any) {
	data, err := marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(data)
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// writeError answers with the admin API's error shape.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]map[string]string{"error": {"code": code, "message": msg}})
}
