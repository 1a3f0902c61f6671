package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// TestQueueSeriesCap: with more queues than the series cap, /metrics
// grows no further: the queues beyond the cap are counted together under
// queue="(other)", and their messages still show up there.
func TestQueueSeriesCap(t *testing.T) {
	m := New(WithMaxQueueSeries(5))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m.Registry().MustRegister(m.QueueCollector(eng))
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	for i := 0; i < 50; i++ {
		name := "q" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if _, _, err := eng.CreateQueue(name, engine.DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Send(name, []engine.Message{{Body: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	small := scrape()
	for i := 50; i < 200; i++ {
		name := "q" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if _, _, err := eng.CreateQueue(name, engine.DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Send(name, []engine.Message{{Body: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	big := scrape()
	if strings.Count(big, `sluice_queue_visible_messages{`) != 6 {
		t.Fatalf("visible series: %d, want 5 queues and (other)", strings.Count(big, `sluice_queue_visible_messages{`))
	}
	if !strings.Contains(big, `sluice_queue_visible_messages{queue="(other)"} 195`) ||
		!strings.Contains(big, `sluice_sent_total{queue="(other)"} 195`) ||
		!strings.Contains(big, "sluice_metrics_unlabelled_queues 195") {
		t.Fatalf("folded series missing:\n%s", grep(big, "(other)", "unlabelled"))
	}
	if len(big) > len(small)+1024 {
		t.Fatalf("/metrics grew from %d to %d bytes with 150 more queues", len(small), len(big))
	}
}

func grep(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
