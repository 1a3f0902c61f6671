package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/buildinfo"
)

// WithBuildInfo exports sluice_build_info, a gauge that is always 1 and
// carries the build's version, commit, date and Go version as labels (the
// Prometheus convention for joining a build onto other series, and for
// seeing a fleet's versions at a glance).
func WithBuildInfo(i buildinfo.Info) Option {
	return func(m *Metrics) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_build_info",
			Help: "Always 1; the labels name the running build (version, commit, date, go_version).",
			ConstLabels: prometheus.Labels{
				"version": i.Version, "commit": i.Commit, "date": i.Date, "go_version": i.GoVersion,
			},
		})
		g.Set(1)
		m.extra = append(m.extra, g)
	}
}
