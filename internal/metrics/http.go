package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// httpRequests counts answered API requests by API, action and HTTP
// status (sluice_http_requests_total). Children are cached: one map load
// per request rather than a label hash under the vector's lock.
type httpRequests struct {
	vec   *prometheus.CounterVec
	cache sync.Map // reqKey → prometheus.Counter
}

type reqKey struct {
	api, action string
	status      int
}

func newHTTPRequests() *httpRequests {
	return &httpRequests{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_http_requests_total",
		Help: "API requests answered, by API (sqs, admin), action (SQS action, admin route) and HTTP status code.",
	}, []string{"api", "action", "code"})}
}

// ObserveSQSRequest counts one answered SQS request; pass it as
// sqs.Options.OnRequest. action must come from a bounded set (the SQS
// handler passes "invalid" for names it does not know).
func (m *Metrics) ObserveSQSRequest(action string, status int) {
	m.observeRequest("sqs", action, status)
}

// ObserveAdminRequest counts one answered admin API request by its route
// pattern; pass it as admin.Options.OnRequest.
func (m *Metrics) ObserveAdminRequest(route string, status int) {
	m.observeRequest("admin", route, status)
}

func (m *Metrics) observeRequest(api, action string, status int) {
	k := reqKey{api, action, status}
	c, ok := m.http.cache.Load(k)
	if !ok {
		c, _ = m.http.cache.LoadOrStore(k, m.http.vec.WithLabelValues(k.api, action, strconv.Itoa(status)))
	}
	c.(prometheus.Counter).Inc()
}
