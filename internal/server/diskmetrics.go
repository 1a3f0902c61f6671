package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// diskCollector exports the free space of the data directory's
// filesystem next to the minFreefree_disk watermark below which new messages
// are refused, read at each scrape (only with the disk store).
type diskCollector struct {
	s             *Server
	free, minFree *prometheus.Desc
}

func newDiskCollector(s *Server) diskCollector {
	return diskCollector{
		s:       s,
		free:    prometheus.NewDesc("sluice_disk_free_bytes", "Free space on the data directory's filesystem (for unprivileged writers).", nil, nil),
		minFree: prometheus.NewDesc("sluice_disk_min_free_bytes", "The min_free_disk watermark: below it new messages are refused (0: the watch is off).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.minFree
}

// Collect implements prometheus.Collector.
func (c diskCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.minFree, prometheus.GaugeValue, float64(c.s.opts.MinFreeDisk))
	if free, err := c.s.freeBytes(c.s.opts.DataDir); err == nil {
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(free))
	}
}
