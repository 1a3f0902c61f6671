package cluster

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A node leading several shards exports their servers as one: series of
// the same labels added up, others side by side, the process's families
// once.
func TestShardSumAddsTheShardsServers(t *testing.T) {
	server := func(queue string, requests float64, syncs []float64, free float64) *prometheus.Registry {
		r := prometheus.NewRegistry()
		req := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_http_requests_total", Help: "h"}, []string{"api", "action", "code"})
		req.WithLabelValues("sqs", "SendMessage", "200").Add(requests)
		visible := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_queue_visible_messages", Help: "h"}, []string{"queue"})
		visible.WithLabelValues(queue).Set(requests)
		sync := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_store_wal_sync_seconds", Help: "h", Buckets: []float64{0.001, 0.01}})
		for _, s := range syncs {
			sync.Observe(s)
		}
		disk := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_disk_free_bytes", Help: "h"})
		disk.Set(free)
		// The queues beyond the label cap, folded into queue="other"
		// on every shard: their counts add up, their oldest age does not.
		age := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_queue_oldest_message_age_seconds", Help: "h"}, []string{"queue"})
		age.WithLabelValues("other").Set(requests * 10)
		visible.WithLabelValues("other").Set(1)
		r.MustRegister(req, visible, sync, disk, age)
		return r
	}
	g := shardSum{
		base:   server("a", 3, []float64{0.0005}, 100),
		others: []prometheus.Gatherer{server("b", 4, []float64{0.005, 0.5}, 100), server("c", 5, nil, 100)},
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + labelSignature(m)
			switch {
			case m.Counter != nil:
				got[key] = fmt.Sprint(m.Counter.GetValue())
			case m.Gauge != nil:
				got[key] = fmt.Sprint(m.Gauge.GetValue())
			case m.Histogram != nil:
				var bs []string
				for _, b := range m.Histogram.GetBucket() {
					bs = append(bs, fmt.Sprintf("%v:%d", b.GetUpperBound(), b.GetCumulativeCount()))
				}
				got[key] = fmt.Sprintf("%v count %d sum %.4f", bs, m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum())
			}
		}
	}
	sig := func(pairs ...string) string {
		var b strings.Builder
		for i := 0; i < len(pairs); i += 2 {
			b.WriteString(pairs[i] + "\x00" + pairs[i+1] + "\xff")
		}
		return b.String()
	}
	want := map[string]string{
		"sluice_disk_free_bytes": "100", // the machine's, once
		"sluice_http_requests_total" + sig("action", "SendMessage", "api", "sqs", "code", "200"): "12",
		"sluice_queue_visible_messages" + sig("queue", "a"):                                      "3",
		"sluice_queue_visible_messages" + sig("queue", "b"):                                      "4",
		"sluice_queue_visible_messages" + sig("queue", "c"):                                      "5",
		"sluice_queue_visible_messages" + sig("queue", "other"):                                  "3",
		"sluice_queue_oldest_message_age_seconds" + sig("queue", "other"):                        "50",
		"sluice_store_wal_sync_seconds":                                                          "[0.001:1 0.01:2] count 3 sum 0.5055",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("gathered %q\nwant %q", got, want)
	}

	// A family of two types cannot be added: said, not hidden.
	odd := prometheus.NewRegistry()
	odd.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_http_requests_total", Help: "h"}))
	if _, err := (shardSum{base: server("a", 1, nil, 1), others: []prometheus.Gatherer{odd}}).Gather(); err == nil {
		t.Fatal("a counter and a gauge of one name were added without an error")
	}
}
