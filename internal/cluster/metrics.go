package cluster

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// GET /metrics on a cluster node is answered by that node, not forwarded:
// every node shows its own Raft metrics (sluice_raft_*), and the leader
// adds its engine's metrics (the queues, the APIs, the store: everything
// a single node exports). A follower shows its Raft metrics and its own
// process (go_*, process_*, sluice_build_info). So a Prometheus that
// scrapes every node sees each node's role, term and lag, and each queue
// once, from the leader.

// raftCollector reads a node's Raft status, of every shard, at every
// scrape. With several shards every series carries a shard label (shard
// 0 included); with one, none (the series of a cluster without shards).
type raftCollector struct {
	statuses func() []raftstore.Status // by shard
	sharded  bool

	term, commit, applied, applyLag, first, last, leader, role *prometheus.Desc
	leaderChanges, failedProposals, voters, learners           *prometheus.Desc
	peerMatch, peerLag, peerInSync, votersInSync, stopped      *prometheus.Desc
	snapshots, snapshotsDone                                   *prometheus.Desc
}

// roles are the values of sluice_raft_role's role label, all exported so
// that a node's series set does not change with its role ("removed": this
// node was removed from the group).
var roles = [...]string{"leader", "follower", "candidate", "removed"}

func newRaftCollector(statuses func() []raftstore.Status, sharded bool) *raftCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		if sharded {
			labels = append([]string{"shard"}, labels...)
		}
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &raftCollector{
		statuses:        statuses,
		sharded:         sharded,
		term:            d("sluice_raft_term", "The Raft term this node is in."),
		commit:          d("sluice_raft_commit_index", "The highest Raft log index this node knows committed (on a majority's logs)."),
		applied:         d("sluice_raft_applied_index", "The highest Raft log index applied to this node's state store."),
		applyLag:        d("sluice_raft_apply_lag_entries", "Committed entries this node has not applied yet (commit index minus applied index)."),
		first:           d("sluice_raft_log_first_index", "The first index this node's Raft log holds."),
		last:            d("sluice_raft_log_last_index", "The last index this node's Raft log holds."),
		leader:          d("sluice_raft_leader_id", "The node id of the leader this node knows, 0 when it knows none."),
		role:            d("sluice_raft_role", "1 for this node's Raft role (leader, follower, candidate, or removed from the group), 0 for the others.", "role"),
		leaderChanges:   d("sluice_raft_leader_changes_total", "Times this node learned of a new leader (itself included), since it started."),
		failedProposals: d("sluice_raft_proposals_failed_total", "Writes this node proposed as leader that failed because it lost the leadership before they applied (their clients got an error), since it started."),
		voters:          d("sluice_raft_voters", "Voting members in this node's applied membership."),
		learners:        d("sluice_raft_learners", "Learners in this node's applied membership: members added and not yet promoted to voter, and standby copies beyond the replication factor (the leader promotes one once its log has caught up and a voter is needed)."),
		peerMatch:       d("sluice_raft_peer_match_index", "On the leader only: the highest log index known replicated on each member.", "peer"),
		peerLag:         d("sluice_raft_peer_lag_entries", "On the leader only: entries each member is behind the leader's last log index.", "peer"),
		peerInSync:      d("sluice_raft_peer_in_sync", "On the leader only: 1 for each member the leader replicates to normally (heard from within an election timeout, no snapshot under way, its log within the promotion lag of the commit index), 0 for a member down, cut off or catching up; the leader itself is 1.", "peer"),
		votersInSync:    d("sluice_raft_voters_in_sync", "On the leader only: voters in sync (sluice_raft_peer_in_sync), the leader included. At or below a majority of sluice_raft_voters, one more voter lost stops the group's writes."),
		snapshots:       d("sluice_raft_snapshots_in_flight", "Snapshot streams of this group under way on this node, by direction: \"send\" (to members that need a copy) and \"receive\" (a copy for this node). The node bounds each direction over all its shards ([cluster] snapshot_streams).", "direction"),
		snapshotsDone:   d("sluice_raft_snapshots_total", "Snapshots of this group this node completed since it opened the group (at its start, or when it joined the shard), by direction: \"sent\" (streams written whole to members that needed a copy) and \"installed\" (copies this node received and installed in place of its state).", "direction"),
		stopped:         d("sluice_raft_stopped", "1 when this node's Raft node stopped on a failed write of its Raft log or state store (it takes no part in its group until it is opened again; after a full disk that is done in place once space is back), else 0."),
	}
}

// Describe implements prometheus.Collector.
func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.term, c.commit, c.applied, c.applyLag, c.first, c.last, c.leader, c.role,
		c.leaderChanges, c.failedProposals, c.voters, c.learners, c.peerMatch, c.peerLag, c.peerInSync, c.votersInSync,
		c.stopped, c.snapshots, c.snapshotsDone} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	for k, st := range c.statuses() {
		if st.ID == 0 {
			continue // a shard this node holds no copy of (ADR 0016): no series, rather than zeros
		}
		c.collect(ch, k, st)
	}
}

// collect sends shard k's series.
func (c *raftCollector) collect(ch chan<- prometheus.Metric, k int, st raftstore.Status) {
	lv := func(labels ...string) []string {
		if c.sharded {
			return append([]string{strconv.Itoa(k)}, labels...)
		}
		return labels
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), lv(labels...)...)
	}
	gauge(c.term, st.Term)
	gauge(c.commit, st.Commit)
	gauge(c.applied, st.Applied)
	gauge(c.applyLag, lag(st.Commit, st.Applied))
	gauge(c.first, st.FirstIndex)
	gauge(c.last, st.LastIndex)
	gauge(c.leader, st.Leader)
	for _, r := range roles {
		v := uint64(0)
		if st.Role == r {
			v = 1
		}
		gauge(c.role, v, r)
	}
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, float64(st.LeaderChanges), lv()...)
	ch <- prometheus.MustNewConstMetric(c.failedProposals, prometheus.CounterValue, float64(st.FailedProposals), lv()...)
	var voters, learners, votersInSync uint64
	for _, m := range st.Members {
		if m.Membership == raftstore.Learner {
			learners++
		} else {
			voters++
			if st.InSync[m.ID] {
				votersInSync++
			}
		}
	}
	gauge(c.voters, voters)
	gauge(c.learners, learners)
	if st.Match != nil { // leader only, as the peer series
		gauge(c.votersInSync, votersInSync)
	}
	stopped := uint64(0)
	if st.Stopped {
		stopped = 1
	}
	gauge(c.stopped, stopped)
	gauge(c.snapshots, uint64(st.SnapshotsSending), "send")
	gauge(c.snapshots, uint64(st.SnapshotsReceiving), "receive")
	ch <- prometheus.MustNewConstMetric(c.snapshotsDone, prometheus.CounterValue, float64(st.SnapshotsSent), lv("sent")...)
	ch <- prometheus.MustNewConstMetric(c.snapshotsDone, prometheus.CounterValue, float64(st.SnapshotsInstalled), lv("installed")...)
	for id, m := range st.Match {
		peer := strconv.FormatUint(id, 10)
		gauge(c.peerMatch, m, peer)
		gauge(c.peerLag, lag(st.LastIndex, m), peer)
		inSync := uint64(0)
		if st.InSync[id] {
			inSync = 1
		}
		gauge(c.peerInSync, inSync, peer)
	}
}

// lag is a − b, 0 when b is ahead.
func lag(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// nodeMetrics are the registries of a node's own metrics: its Raft
// metrics, and its process's for when it does not lead (the leader's
// server exports the process's itself).
type nodeMetrics struct {
	raft, process *prometheus.Registry
	// forwardErrors counts requests this node could not forward to the
	// leader (answered 503): expected around a leader change, a sign of
	// trouble between the nodes otherwise.
	forwardErrors prometheus.Counter
	// authFailures counts connections refused by the node handshake (a
	// peer without the cluster secret, or junk), by surface: raft, http
	// (the leader's internal HTTP listener) and amqp (its internal AMQP
	// listener); the dialling side counts a listener that failed to prove
	// the secret too.
	authFailures *prometheus.CounterVec
}

func newNodeMetrics(statuses func() []raftstore.Status, sharded bool, build prometheus.Collector) nodeMetrics {
	m := nodeMetrics{raft: prometheus.NewRegistry(), process: prometheus.NewRegistry(),
		forwardErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cluster_forward_errors_total",
			Help: "HTTP requests this node could not hand to a leader (no leader within the hold, or the leader unreachable), answered 503.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_auth_failures_total",
			Help: "Connections between nodes refused because the node handshake failed (a peer without the cluster secret, or not a node), by surface: raft, http, amqp (the leader's internal listeners).",
		}, []string{"surface"}),
	}
	for _, s := range []string{nodeauth.SurfaceRaft, nodeauth.SurfaceHTTP, nodeauth.SurfaceAMQP} {
		m.authFailures.WithLabelValues(s) // every series exists from the start, at 0
	}
	m.raft.MustRegister(newRaftCollector(statuses, sharded), m.forwardErrors, m.authFailures)
	m.process.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build)
	return m
}

// serveMetrics answers GET /metrics: this node's Raft metrics, and the
// engine's when this node leads shard 0 and serves, else this process's;
// with several shards, added to them, the series of the other shards'
// servers this node leads (shardSum).
func (n *Node) serveMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(n.gatherers(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// gatherers are what serveMetrics exports now.
func (n *Node) gatherers() prometheus.Gatherers {
	gs := prometheus.Gatherers{n.metrics.raft}
	n.mu.Lock()
	base := n.localMetrics
	var others []prometheus.Gatherer
	for _, s := range n.serving[1:] {
		if s != nil {
			others = append(others, s.srv.MetricsGatherer())
		}
	}
	n.mu.Unlock()
	if base == nil {
		base = n.metrics.process
	}
	if len(others) == 0 {
		return append(gs, base)
	}
	return append(gs, shardSum{base: base, others: others})
}

// shardSum gathers, as one server's, shard 0's server (or this process's
// metrics, when this node does not lead shard 0) and the servers of the
// other shards this node leads. A family more than one of them exports
// is one family whose series with the same labels are added up: the
// requests each server answered (sluice_http_requests_total), its store's
// syncs, its dead letters, each counted once on the node whose server
// did the work, so that a sum over the cluster's nodes counts each once.
// Series of different labels (each shard's queues) are listed side by
// side. The other shards' process-wide families (processWide) are left
// out: they would repeat, or double, the base's.
type shardSum struct {
	base   prometheus.Gatherer
	others []prometheus.Gatherer
}

// Gather implements prometheus.Gatherer.
func (g shardSum) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.base.Gather()
	errs := []error{err}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	for _, o := range g.others {
		oms, err := o.Gather()
		errs = append(errs, err)
		for _, mf := range oms {
			if processWide(mf.GetName()) {
				continue
			}
			have := byName[mf.GetName()]
			if have == nil {
				byName[mf.GetName()] = mf
				mfs = append(mfs, mf)
				continue
			}
			errs = append(errs, addFamily(have, mf))
		}
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs, errors.Join(errs...)
}

// processWide reports whether a family describes the process or the
// machine rather than one server's work: every server of the process
// exports the same values.
func processWide(name string) bool {
	switch name {
	case "sluice_build_info", "sluice_disk_free_bytes", "sluice_disk_min_free_bytes":
		return true
	}
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_")
}

// addFamily adds src's series to dst's (families of one name): a series
// with the labels of one of dst's is added to it (counters, gauges,
// untyped values, histograms' counts, sums and buckets; a summary's count
// and sum, its quantiles kept from dst; the larger of two maxGauge
// values); any other is appended.
func addFamily(dst, src *dto.MetricFamily) error {
	if dst.GetType() != src.GetType() {
		return fmt.Errorf("metric family %s: type %v and %v", dst.GetName(), dst.GetType(), src.GetType())
	}
	bySig := make(map[string]*dto.Metric, len(dst.GetMetric()))
	for _, m := range dst.GetMetric() {
		bySig[labelSignature(m)] = m
	}
	for _, m := range src.GetMetric() {
		d := bySig[labelSignature(m)]
		if d == nil {
			dst.Metric = append(dst.Metric, m)
			continue
		}
		if err := addMetric(d, m, maxGauge(dst.GetName())); err != nil {
			return fmt.Errorf("metric family %s: %w", dst.GetName(), err)
		}
	}
	return nil
}

// labelSignature is a metric's label pairs as one string.
func labelSignature(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.GetLabel() {
		b.WriteString(l.GetName())
		b.WriteByte(0)
		b.WriteString(l.GetValue())
		b.WriteByte(0xff)
	}
	return b.String()
}

// maxGauge reports whether the series of gauge family name combine by
// their maximum rather than their sum: an age (the oldest message of the
// queues folded into queue="other" on two shards is the older of the
// two) or a flag.
func maxGauge(name string) bool {
	return name == "sluice_queue_oldest_message_age_seconds" || name == "sluice_store_failed"
}

// addMetric adds src's value into dst (series of one family and labels);
// for gauges with max set, it keeps the larger value.
func addMetric(dst, src *dto.Metric, max bool) error {
	switch {
	case dst.Counter != nil && src.Counter != nil:
		dst.Counter.Value = ptr(dst.Counter.GetValue() + src.Counter.GetValue())
	case dst.Gauge != nil && src.Gauge != nil && max:
		dst.Gauge.Value = ptr(math.Max(dst.Gauge.GetValue(), src.Gauge.GetValue()))
	case dst.Gauge != nil && src.Gauge != nil:
		dst.Gauge.Value = ptr(dst.Gauge.GetValue() + src.Gauge.GetValue())
	case dst.Untyped != nil && src.Untyped != nil:
		dst.Untyped.Value = ptr(dst.Untyped.GetValue() + src.Untyped.GetValue())
	case dst.Histogram != nil && src.Histogram != nil:
		dh, sh := dst.Histogram, src.Histogram
		if len(dh.Bucket) != len(sh.Bucket) {
			return fmt.Errorf("histograms of %d and %d buckets", len(dh.Bucket), len(sh.Bucket))
		}
		for i, b := range sh.Bucket {
			if b.GetUpperBound() != dh.Bucket[i].GetUpperBound() {
				return fmt.Errorf("histogram buckets up to %v and %v", dh.Bucket[i].GetUpperBound(), b.GetUpperBound())
			}
			dh.Bucket[i].CumulativeCount = ptr(dh.Bucket[i].GetCumulativeCount() + b.GetCumulativeCount())
		}
		dh.SampleCount = ptr(dh.GetSampleCount() + sh.GetSampleCount())
		dh.SampleSum = ptr(dh.GetSampleSum() + sh.GetSampleSum())
	case dst.Summary != nil && src.Summary != nil:
		dst.Summary.SampleCount = ptr(dst.Summary.GetSampleCount() + src.Summary.GetSampleCount())
		dst.Summary.SampleSum = ptr(dst.Summary.GetSampleSum() + src.Summary.GetSampleSum())
	default:
		return errors.New("series of different kinds")
	}
	return nil
}

// ptr points to a copy of v (dto's optional fields).
func ptr[T any](v T) *T { return &v }
