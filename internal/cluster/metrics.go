package cluster

import (
	"net/http"
	"slices"
	"strconv"

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
	peerMatch, peerLag                                         *prometheus.Desc
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
	}
}

// Describe implements prometheus.Collector.
func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.term, c.commit, c.applied, c.applyLag, c.first, c.last, c.leader, c.role,
		c.leaderChanges, c.failedProposals, c.voters, c.learners, c.peerMatch, c.peerLag} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	for k, st := range c.statuses() {
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
	var voters, learners uint64
	for _, m := range st.Members {
		if m.Membership == raftstore.Learner {
			learners++
		} else {
			voters++
		}
	}
	gauge(c.voters, voters)
	gauge(c.learners, learners)
	for id, m := range st.Match {
		peer := strconv.FormatUint(id, 10)
		gauge(c.peerMatch, m, peer)
		gauge(c.peerLag, lag(st.LastIndex, m), peer)
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
// with several shards, also the per-queue series of the other shards'
// engines this node leads (queueSeries).
func (n *Node) serveMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(n.gatherers(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// gatherers are what serveMetrics exports now.
func (n *Node) gatherers() prometheus.Gatherers {
	gs := prometheus.Gatherers{n.metrics.raft}
	n.mu.Lock()
	engine := n.localMetrics
	for _, s := range n.serving[1:] {
		if s != nil {
			gs = append(gs, queueSeries{s.srv.MetricsGatherer()})
		}
	}
	n.mu.Unlock()
	if engine != nil {
		gs = append(gs, engine)
	} else {
		gs = append(gs, n.metrics.process)
	}
	return gs
}

// queueSeries gathers, of a shard's server other than shard 0's, the
// metric families whose every series names a queue (label "queue"): its
// queues' series, which no other engine on this node exports. Its other
// families (the process, the APIs, the store) would repeat shard 0's
// server's series, or describe a server clients do not see.
type queueSeries struct{ g prometheus.Gatherer }

// Gather implements prometheus.Gatherer.
func (q queueSeries) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := q.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if len(mf.GetMetric()) > 0 && !slices.ContainsFunc(mf.GetMetric(), func(m *dto.Metric) bool {
			return !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "queue" })
		}) {
			out = append(out, mf)
		}
	}
	return out, err
}
