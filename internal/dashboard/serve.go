package dashboard

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
)

//go:embed static
var staticFiles embed.FS

// contentSecurityPolicy keeps the app to its own origin: no CDN, no inline
// script, nothing framed.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// static serves the embedded app under /ui/.
func (d *Dashboard) static() http.Handler {
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Small files, served locally: always revalidate, so an upgraded
		// broker never runs a stale app.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// serveEvents streams the overview as server-sent events ("overview"
// events, one per sample; the first at once). The app falls back to
// polling the overview when the stream fails.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	eng := d.eng
	ch, ok := d.subscribe()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "TooManyStreams", "too many event streams; poll /sluice/v1/dashboard/overview")
		return
	}
	defer d.unsubscribe(ch)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(data []byte) bool {
		if _, err := fmt.Fprintf(w, "event: overview\ndata: %s\n\n", data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// Reconnect after one sample interval if the stream breaks.
	fmt.Fprintf(w, "retry: %d\n\n", max(1000, d.opts.SampleInterval.Milliseconds()))
	first, err := marshal(d.overview(r.Context(), eng, d.clk.Now()))
	if err != nil || !send(first) {
		return
	}
	// A comment every 15 s keeps proxies from closing an idle stream.
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		case data := <-ch:
			if !send(data) {
				return
			}
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// Advice is GET /sluice/v1/advisor.
type Advice struct {
	At       time.Time         `json:"at"`
	Worst    advisor.Verdict   `json:"worst"`
	Findings []advisor.Finding `json:"findings"`
	// Gaps name the checks that could not run for lack of data.
	Gaps []string `json:"gaps"`
}

func (d *Dashboard) serveAdvisor(w http.ResponseWriter, r *http.Request) {
	a := d.advice()
	if d.opts.OtherFindings != nil {
		ctx, cancel := context.WithTimeout(r.Context(), otherQueuesTimeout)
		defer cancel()
		more, missing := d.opts.OtherFindings(ctx)
		a.Findings = append(a.Findings, more...)
		advisor.SortFindings(a.Findings)
		a.Worst = advisor.Worst(a.Findings)
		for _, m := range missing {
			a.Gaps = append(a.Gaps, "every check of the queues of "+m)
		}
	}
	writeJSON(w, a)
}

// ServeLocalAdvisor answers the advisor for this dashboard's engine
// alone, without Options.OtherFindings: what a cluster's shard 0 reads
// from the other shards' leaders.
func (d *Dashboard) ServeLocalAdvisor(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, d.advice())
}

// advice runs the advisor's checks on this dashboard's engine.
func (d *Dashboard) advice() Advice {
	eng := d.eng
	now := d.clk.Now()
	stats := d.Stats(now)
	findings := advisor.Check(eng, stats)
	if findings == nil {
		findings = []advisor.Finding{}
	}
	a := Advice{At: now.UTC(), Worst: advisor.Worst(findings), Findings: findings, Gaps: []string{
		"prefetch: consumer prefetch is not known (SQS has none; the AMQP front-end will report it)",
	}}
	if stats.AlertRules == nil {
		a.Gaps = append(a.Gaps, "dlq_alert: the alert rules are not known to the dashboard (Options.Alerts is not set)")
	}
	if stats.Window == 0 {
		a.Gaps = append(a.Gaps, "visibility, dlq_consumers: no samples yet; processing times and receives need the dashboard running for a while")
	}
	return a
}

// Stats returns the advisor's observations at now: per queue, the p99
// processing time and the receives and redeliveries over the history; and
// which alert rules watch which queue when Options.Alerts is set.
func (d *Dashboard) Stats(now time.Time) advisor.Stats {
	st := advisor.Stats{Now: now, Queues: map[string]advisor.QueueStats{}}
	from := now.Add(-d.opts.History)
	eng := d.eng
	d.mu.Lock()
	type base struct {
		s  sample
		ok bool
	}
	bases := make(map[string]base, len(d.series))
	for name, r := range d.series {
		b, ok := r.baseline(from)
		bases[name] = base{b, ok}
	}
	d.mu.Unlock()
	var oldest time.Time
	for name, b := range bases {
		if !b.ok || eng == nil {
			continue
		}
		info, err := eng.GetQueue(name)
		if err != nil {
			continue
		}
		if oldest.IsZero() || b.s.at.Before(oldest) {
			oldest = b.s.at
		}
		st.Queues[name] = advisor.QueueStats{
			Received:    sub(info.Received, b.s.received),
			Redelivered: sub(info.Redelivered, b.s.redeliv),
		}
	}
	if !oldest.IsZero() {
		st.Window = max(0, now.Sub(oldest))
	}
	if st.Window == 0 {
		// Nothing sampled over any span: receives are not known.
		st.Queues = map[string]advisor.QueueStats{}
	}
	d.rec.obs.Range(func(k, v any) bool {
		name := k.(string)
		times := v.(*observed).processing(from)
		if len(times) == 0 {
			return true
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		qs := st.Queues[name]
		qs.P99 = percentile(times, 0.99)
		qs.ProcessingSamples = len(times)
		st.Queues[name] = qs
		return true
	})
	if d.opts.Alerts != nil {
		st.AlertRules = map[string][]string{}
		for _, s := range d.opts.Alerts.States() {
			st.AlertRules[s.Queue] = append(st.AlertRules[s.Queue], s.Rule)
		}
	}
	return st
}
