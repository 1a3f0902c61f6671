package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/sqs"
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

// amqpCollector exports the AMQP front-end's connections, channels and
// consumers, counted at each scrape, and its publisher flow control
// (amqp.FlowStats).
type amqpCollector struct {
	s                                *Server
	connections, channels, consumers *prometheus.Desc
	throttled, throttledSeconds      *prometheus.Desc
	throttleTimeouts                 *prometheus.Desc
	throttlingQueues, paused         *prometheus.Desc
}

func newAMQPCollector(s *Server) amqpCollector {
	return amqpCollector{
		s:           s,
		connections: prometheus.NewDesc("sluice_amqp_connections", "Open AMQP client connections.", nil, nil),
		channels:    prometheus.NewDesc("sluice_amqp_channels", "Open AMQP channels across all connections.", nil, nil),
		consumers:   prometheus.NewDesc("sluice_amqp_consumers", "AMQP consumers (basic.consume) across all queues.", nil, nil),
		throttled: prometheus.NewDesc("sluice_amqp_flow_throttled_publishes_total",
			"Times a publishing connection stopped being read because a queue it published to was over its flow-control high-water mark.", nil, nil),
		throttledSeconds: prometheus.NewDesc("sluice_amqp_flow_throttled_seconds_total",
			"Seconds publishing connections spent not being read for flow control, summed over connections.", nil, nil),
		throttleTimeouts: prometheus.NewDesc("sluice_amqp_flow_timeouts_total",
			"Flow-control pauses that ended at their bound (amqp_flow_max_wait) with the queue still over its mark.", nil, nil),
		throttlingQueues: prometheus.NewDesc("sluice_amqp_flow_throttling_queues",
			"Queues holding their publishers back now (over the flow-control high-water mark, not yet back to half of it).", nil, nil),
		paused: prometheus.NewDesc("sluice_amqp_flow_paused_connections",
			"Publishing connections not being read now for flow control.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c amqpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.connections
	ch <- c.channels
	ch <- c.consumers
	ch <- c.throttled
	ch <- c.throttledSeconds
	ch <- c.throttleTimeouts
	ch <- c.throttlingQueues
	ch <- c.paused
}

// Collect implements prometheus.Collector.
func (c amqpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.amqp.Stats()
	ch <- prometheus.MustNewConstMetric(c.connections, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(c.channels, prometheus.GaugeValue, float64(st.Channels))
	ch <- prometheus.MustNewConstMetric(c.consumers, prometheus.GaugeValue, float64(st.Consumers))
	fs := c.s.amqp.FlowStats()
	ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(fs.ThrottledPublishes))
	ch <- prometheus.MustNewConstMetric(c.throttledSeconds, prometheus.CounterValue, fs.ThrottledSeconds)
	ch <- prometheus.MustNewConstMetric(c.throttleTimeouts, prometheus.CounterValue, float64(fs.TimedOut))
	ch <- prometheus.MustNewConstMetric(c.throttlingQueues, prometheus.GaugeValue, float64(fs.ThrottlingQueues))
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(fs.PausedConnections))
}

// sqsFlowCollector exports the SQS send back-pressure counters
// (sqs.Handler.SendFlowStats).
type sqsFlowCollector struct {
	h                           *sqs.Handler
	throttled, seconds, timeout *prometheus.Desc
}

func newSQSFlowCollector(h *sqs.Handler) sqsFlowCollector {
	return sqsFlowCollector{
		h: h,
		throttled: prometheus.NewDesc("sluice_sqs_send_throttled_total",
			"SendMessage and SendMessageBatch requests that waited for send back-pressure (sqs_send_flow_backlog).", nil, nil),
		seconds: prometheus.NewDesc("sluice_sqs_send_throttled_seconds_total",
			"Seconds sends waited for back-pressure, summed over requests.", nil, nil),
		timeout: prometheus.NewDesc("sluice_sqs_send_flow_timeouts_total",
			"Sends that waited the whole sqs_send_flow_max_wait (the receivers did not shrink the backlog meanwhile).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c sqsFlowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.throttled
	ch <- c.seconds
	ch <- c.timeout
}

// Collect implements prometheus.Collector.
func (c sqsFlowCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.h.SendFlowStats()
	ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(st.Throttled))
	ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, st.ThrottledSeconds)
	ch <- prometheus.MustNewConstMetric(c.timeout, prometheus.CounterValue, float64(st.TimedOut))
}
