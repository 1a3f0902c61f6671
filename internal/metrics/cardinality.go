package metrics

// The label-cardinality guard. Every queue has its own series (eight
// vectors and six gauges), so 20,000 queues made a /metrics page of
// 124 MB. At most maxSeries queues get series of their own: the first
// seen, kept while they exist. Queues beyond that are counted together
// under queue="(other)" (gauges summed, the oldest age the largest), and
// sluice_metrics_unlabelled_queues says how many were folded in.

// DefaultMaxQueueSeries is how many queues get series of their own.
const DefaultMaxQueueSeries = 1000

// otherLabel is the queue label of the folded-in queues. No SQS queue can
// be named it (parentheses are not allowed in SQS names); an AMQP queue
// could, and would then share its series.
const otherLabel = "(other)"

// WithMaxQueueSeries sets how many queues get series of their own
// (0: DefaultMaxQueueSeries; negative: no limit).
func WithMaxQueueSeries(n int) Option {
	return func(m *Metrics) {
		if n != 0 {
			m.maxSeries = n
		}
	}
}

// labelFor is the queue label for name: name itself when it has (or can
// still get) series of its own, otherLabel once the cap is reached.
func (m *Metrics) labelFor(name string) string {
	if m.maxSeries < 0 {
		return name
	}
	if _, ok := m.queues.Load(name); ok {
		return name
	}
	if m.labelled.Load() >= int64(m.maxSeries) {
		return otherLabel
	}
	return name
}

// otherQueue returns the children of the folded-in series.
func (m *Metrics) otherQueue() *queueMetrics {
	if q := m.other.Load(); q != nil {
		return q
	}
	q := m.newQueueMetrics(otherLabel)
	if m.other.CompareAndSwap(nil, q) {
		return q
	}
	return m.other.Load()
}
