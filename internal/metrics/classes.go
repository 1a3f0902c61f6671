package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Error classes of dead letters (DLQ-22). The class comes from consumers'
// failure reports, so its cardinality is bounded here: per queue the first
// MaxErrorClasses distinct classes get their own series, later ones are
// counted as "other"; a dead letter without a reported class is
// "unclassified".
const (
	MaxErrorClasses   = 20
	ClassOther        = "other"
	ClassUnclassified = "unclassified"
)

// classCounter is sluice_dead_lettered_by_class_total with its bound.
type classCounter struct {
	vec *prometheus.CounterVec
	mu  sync.Mutex
	// seen[queue] is the set of classes with their own series.
	seen map[string]map[string]bool
}

func newClassCounter() *classCounter {
	return &classCounter{
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dead_lettered_by_class_total",
			Help: "Messages dead-lettered from queue, by reason and by the error class of their last failure report (at most 20 classes per queue, then \"other\"; \"unclassified\" without a report).",
		}, []string{"queue", "reason", "class"}),
		seen: map[string]map[string]bool{},
	}
}

func (c *classCounter) inc(queue, reason, class string) {
	if class == "" {
		class = ClassUnclassified
	}
	c.mu.Lock()
	s := c.seen[queue]
	if s == nil {
		s = map[string]bool{}
		c.seen[queue] = s
	}
	if !s[class] {
		if len(s) >= MaxErrorClasses {
			class = ClassOther
		} else {
			s[class] = true
		}
	}
	c.mu.Unlock()
	c.vec.WithLabelValues(queue, reason, class).Inc()
}

// forget drops a deleted queue's series.
func (c *classCounter) forget(queue string) {
	c.mu.Lock()
	delete(c.seen, queue)
	c.mu.Unlock()
	c.vec.DeletePartialMatch(prometheus.Labels{"queue": queue})
}
