package cluster

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// Each node answers for itself (issue #14): GET /health and GET /ready on
// a node's public listener are not forwarded, and each node watches the
// free space of its own data directory (the Raft log and the state store
// live there).
//
//   - /health is 200 when this node can serve clients: it is a member, it
//     knows a leader, that leader serves (it advertised its server for
//     this term, and a follower reached it within staleAfter with its
//     status reports, clusterview.go; the leader's own engine must not
//     have failed), it has applied the entries it knows committed but for
//     maxHealthApplyLag, and its disk is above min_free_disk. Otherwise
//     503, naming every failed check. /ready gives the same verdict in a
//     single node's /ready shape.
//   - The disk watch runs on every node once a second (with the status
//     reports): below min_free_disk a node is low, and it is low until its
//     free space is back above 125% of the watermark, as the single-node
//     watch (server/diskwatch.go). A follower's reports carry the state to
//     the leader. The leader refuses new messages (engine.ErrDiskFull, the
//     single node's refusal) while its own disk is low or while fewer than
//     a quorum of voters, itself included, are known to have room: then a
//     commit would have to land on a disk that is nearly full. A voter is
//     known to have room when its report, at most staleAfter old, says so.
//     One whose reports stopped but which Raft heard from within
//     staleAfter (Status.Heard: it takes part in commits, only the path to
//     the leader's internal HTTP listener is cut) keeps its last report's
//     verdict, room if it never reported. One silent in Raft too counts as
//     without room (it takes no part in commits anyway), except in the
//     first staleAfter of the leader's server (the reports go to it), when
//     none may have arrived yet.

const (
	// staleAfter is how long a follower's report stands for its disk at
	// the leader, and how long a follower may go without reaching the
	// leader's server before its /health fails.
	staleAfter = 5 * reportInterval
	// maxHealthApplyLag is how many committed entries a node may have left
	// to apply and still answer /health 200.
	maxHealthApplyLag = 1000
)

// diskState is this node's free-space watch, under Node.mu.
type diskState struct {
	// low: below min_free_disk (and not yet back above 125% of it).
	low bool
	// refusing: while this node leads, its server refuses new messages
	// for want of disk (its own, or a quorum's); quorumLow is the second
	// reason alone, kept to log its transitions once.
	refusing, quorumLow bool
	// votersLow counts, on the leader, the voters without room on disk at
	// the last check (its own disk included).
	votersLow int
}

// contact is when this follower last reached a leader's server (a status
// report it accepted), or first knew that leader; commit is that leader's
// commit index as its answer to the report gave it (0: none yet, or a
// leader of an older release).
type contact struct {
	leader uint64
	at     time.Time
	commit uint64
}

// checkDisk reads this node's free space and updates diskState, logging
// each transition once. With min_free_disk 0 the watch is off.
func (n *Node) checkDisk() {
	minFree := n.opts.MinFreeDisk
	if minFree <= 0 {
		return
	}
	free, err := n.freeBytes(n.opts.DataDir)
	if err != nil {
		n.log.Warn("cannot read free disk space", "dir", n.opts.DataDir, "err", err)
		return
	}
	low, high := uint64(minFree), uint64(minFree)+uint64(minFree)/4
	n.mu.Lock()
	was := n.disk.low
	switch {
	case !was && free < low:
		n.disk.low = true
	case was && free >= high:
		n.disk.low = false
	}
	now := n.disk.low
	n.mu.Unlock()
	switch {
	case now && !was:
		n.log.Error("this node's disk is nearly full: /health fails, and the leader refuses new messages while it leads or while too few voters have room",
			"free_bytes", free, "min_free_disk", minFree)
	case was && !now:
		n.log.Info("this node's disk has space again", "free_bytes", free)
	}
}

// diskVerdict counts, on the leader, the voters without room on disk
// (itself included), and says whether new messages must be refused: this
// node's disk is low, or the voters with room are fewer than a quorum.
// now and since (when this leader's server started: the reports go to
// it) decide which reports stand.
func (n *Node) diskVerdict(st raftstore.Status, now, since time.Time) (votersLow int, refuse bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	young := now.Sub(since) <= staleAfter
	voters := 0
	for _, m := range st.Members {
		if m.Membership == raftstore.Learner {
			continue // no part in the commit quorum (a learner's /health still watches its own disk)
		}
		voters++
		var room bool
		r, ok := n.reports[m.ID]
		switch {
		case m.ID == st.ID:
			room = !n.disk.low
		case ok && now.Sub(r.at) <= staleAfter:
			room = !r.st.DiskLow
		case now.Sub(st.Heard[m.ID]) <= staleAfter:
			// Its reports do not reach this server, yet it answers in
			// Raft and so takes part in commits: its last report, if
			// any, stands (a cut between the nodes' HTTP ports must not
			// pass for a full disk).
			room = !(ok && r.st.DiskLow)
		default:
			room = young
		}
		if !room {
			votersLow++
		}
	}
	return votersLow, n.disk.low || voters-votersLow < voters/2+1
}

// applyDiskVerdict sets, while this node leads and serves, its server's
// disk alarm from diskVerdict, and logs the quorum's transitions once.
// With this node's min_free_disk 0 (the watch off) it never refuses.
func (n *Node) applyDiskVerdict() {
	n.mu.Lock()
	srv, since := n.localServer, n.leadSince
	n.mu.Unlock()
	if srv == nil || n.opts.MinFreeDisk <= 0 {
		return
	}
	st := n.raft.Status()
	if st.Role != "leader" {
		return
	}
	low, refuse := n.diskVerdict(st, time.Now(), since)
	n.mu.Lock()
	quorumLow := refuse && !n.disk.low
	wasQuorumLow := n.disk.quorumLow
	n.disk.refusing, n.disk.quorumLow, n.disk.votersLow = refuse, quorumLow, low
	n.mu.Unlock()
	srv.SetDiskAlarm(refuse)
	switch {
	case quorumLow && !wasQuorumLow:
		n.log.Error("fewer than a quorum of voters have room on disk: refusing new messages until space returns",
			"members", len(st.Members), "voters_low_on_disk", low)
	case wasQuorumLow && !quorumLow:
		n.log.Info("a quorum of voters has room on disk again", "voters_low_on_disk", low)
	}
}

// noteLeader starts the grace of a follower that learns of a new leader:
// it has until staleAfter from now to reach that leader's server.
func (n *Node) noteLeader(leader uint64, now time.Time) {
	n.mu.Lock()
	if n.contact.leader != leader {
		n.contact = contact{leader: leader, at: now}
	}
	n.mu.Unlock()
}

// Health is the body of GET /health on a cluster node.
type Health struct {
	// Status is "ok" (200), "unavailable" (503), or "failed" (503: the
	// leader's store failed, as a single node's /health says).
	Status string `json:"status"`
	// Error joins the failed checks' details (single-node /health's
	// field); absent when ok.
	Error string `json:"error,omitempty"`
	// Checks are the failed checks; absent when ok.
	Checks []HealthCheck `json:"checks,omitempty"`
	// Node is this node's Raft status (without the leader's Match).
	Node NodeStatus `json:"node"`
}

// HealthCheck is one failed check: Check is one of no_leader, removed,
// not_serving (the leader's server is not serving yet), store_failed,
// leader_unreachable, apply_lag, disk_low and, with several shards,
// shard_not_serving (a shard other than 0 this node cannot route to a
// serving leader, or whose engine here failed); Detail says more.
type HealthCheck struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// health evaluates this node's checks.
func (n *Node) health() Health {
	rep := n.Status().Node
	rep.Match = nil
	h := Health{Status: "ok", Node: rep}
	fail := func(check, detail string) {
		h.Checks = append(h.Checks, HealthCheck{Check: check, Detail: detail})
	}
	now := time.Now()
	n.mu.Lock()
	srv, local, c, diskLow := n.localServer, n.serving[0], n.contact, n.disk.low
	n.mu.Unlock()
	switch {
	case rep.Role == "removed":
		fail("removed", "this node was removed from the cluster")
	case rep.Leader == 0:
		fail("no_leader", "no leader known: an election, a node still joining, or this node cut off from a majority")
	case rep.Leader == rep.ID:
		if srv == nil || local == nil || local.ad.Term != rep.Term {
			fail("not_serving", "this node leads but its server is not serving yet")
		} else if err := srv.Engine().Failed(); err != nil {
			fail("store_failed", err.Error())
			h.Status = "failed"
		}
	case !n.routable():
		fail("not_serving", "the leader has not advertised a serving server for this term yet")
	case c.leader == rep.Leader && now.Sub(c.at) > staleAfter:
		fail("leader_unreachable", "the leader's server has not been reached for "+now.Sub(c.at).Round(time.Second).String())
	}
	// A follower's own commit index goes no further than its log, so one
	// catching up (after a restart, or cut off for a while) is measured
	// against the leader's commit index as the leader's answer to its
	// last report gave it (at most staleAfter old).
	commit := rep.Commit
	if rep.Leader != rep.ID && c.leader == rep.Leader && now.Sub(c.at) <= staleAfter {
		commit = max(commit, c.commit)
	}
	if lag(commit, rep.Applied) > maxHealthApplyLag {
		fail("apply_lag", "committed entries not yet applied: "+strconv.FormatUint(lag(commit, rep.Applied), 10)+
			" (applied "+strconv.FormatUint(rep.Applied, 10)+", commit index "+strconv.FormatUint(commit, 10)+")")
	}
	// The other shards: a request for one of their queues waits, then
	// fails, while this node cannot route it (shard 0's checks are above).
	for k := 1; k < n.shards.Len(); k++ {
		if _, _, ok := n.target(k); !ok {
			fail("shard_not_serving", "no serving leader of shard "+strconv.Itoa(k)+" is known yet")
			continue
		}
		n.mu.Lock()
		s := n.serving[k]
		n.mu.Unlock()
		if s != nil {
			if err := s.srv.Engine().Failed(); err != nil {
				fail("shard_not_serving", "shard "+strconv.Itoa(k)+"'s engine here failed: "+err.Error())
			}
		}
		if r := n.shards.Shard(k); r == nil {
			continue // a shard this node does not hold (ADR 0016)
		} else if st := r.Status(); lag(st.Commit, st.Applied) > maxHealthApplyLag {
			fail("apply_lag", "shard "+strconv.Itoa(k)+": committed entries not yet applied: "+strconv.FormatUint(lag(st.Commit, st.Applied), 10))
		}
	}
	// A shard whose Raft node stopped (its log or state store failed)
	// takes no part in its group here until the node restarts (in place,
	// after a full disk: Supervise).
	for k := range n.shards.Len() {
		if r := n.shards.Shard(k); r == nil {
			continue
		} else if err := r.Failure(); err != nil {
			fail("store_failed", "shard "+strconv.Itoa(k)+"'s Raft log or state store here failed: "+err.Error())
			h.Status = "failed"
		}
	}
	if diskLow {
		fail("disk_low", "free space on the data directory is below min_free_disk")
	}
	if len(h.Checks) > 0 {
		if h.Status == "ok" {
			h.Status = "unavailable"
		}
		var msgs []string
		for _, c := range h.Checks {
			msgs = append(msgs, c.Check+": "+c.Detail)
		}
		h.Error = strings.Join(msgs, "; ")
	}
	return h
}

// routable reports whether this node knows where the leader serves now.
func (n *Node) routable() bool {
	_, _, ok := n.target(0)
	return ok
}

// serveHealth answers GET /health for this node (never forwarded): 200
// with {"status":"ok","node":…}, else 503 with the failed checks.
func (n *Node) serveHealth(w http.ResponseWriter, _ *http.Request) {
	h := n.health()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if h.Status != "ok" {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h) // a prober gone by now cannot be told
}

// serveReady answers GET /ready for this node (never forwarded), in a
// single node's /ready shape: 200 {"status":"ready","node":…} when
// /health would be 200, else 503 {"status":"not ready","checks":{check:
// detail},"node":…}.
func (n *Node) serveReady(w http.ResponseWriter, _ *http.Request) {
	h := n.health()
	body := struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks,omitempty"`
		Node   NodeStatus        `json:"node"`
	}{Status: "ready", Node: h.Node}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if len(h.Checks) > 0 {
		body.Status, body.Checks = "not ready", map[string]string{}
		for _, c := range h.Checks {
			body.Checks[c.Check] = c.Detail
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body) // a prober gone by now cannot be told
}

// diskCollector exports this node's disk watch on its own /metrics (a
// leader's server does not export sluice_disk_*: ExternalDiskWatch).
type diskCollector struct {
	n                   *Node
	free, minFree, low  *prometheus.Desc
	votersLow, refusing *prometheus.Desc
}

func newDiskCollector(n *Node) diskCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return diskCollector{n: n,
		free:      d("sluice_disk_free_bytes", "Free space on this node's data directory's filesystem (for unprivileged writers), read at each scrape."),
		minFree:   d("sluice_disk_min_free_bytes", "The min_free_disk watermark (0: the watch is off)."),
		low:       d("sluice_cluster_disk_low", "1 while this node's free disk is below min_free_disk (until it is back above 125% of it): its /health fails and its reports tell the leader."),
		votersLow: d("sluice_cluster_voters_low_on_disk", "On the leader only: voters (itself included) without room on disk (below min_free_disk as reported, or silent for 5 s both in its reports and in Raft) at the last check."),
		refusing:  d("sluice_cluster_disk_refusing", "On the leader only: 1 while it refuses new messages for want of disk (its own, or fewer than a quorum of voters with room)."),
	}
}

// Describe implements prometheus.Collector.
func (c diskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.free, c.minFree, c.low, c.votersLow, c.refusing} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c diskCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(c.minFree, float64(n.opts.MinFreeDisk))
	if free, err := n.freeBytes(n.opts.DataDir); err == nil {
		gauge(c.free, float64(free))
	}
	n.mu.Lock()
	d, leading := n.disk, n.localServer != nil
	n.mu.Unlock()
	gauge(c.low, b2f(d.low))
	if leading {
		gauge(c.votersLow, float64(d.votersLow))
		gauge(c.refusing, b2f(d.refusing))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// warnRestartReserve says, once at start, that min_free_disk is below what
// a restart may need (the single node's warning, server.New).
func (n *Node) warnRestartReserve() {
	if m := n.opts.MinFreeDisk; m > 0 && m < server.RestartReserve {
		n.log.Warn("min_free_disk is below what a restart may need to replay the store; a node stopped at the watermark may not start again",
			"min_free_disk", m, "restart_reserve", int64(server.RestartReserve))
	}
}

// promotable is raftstore's Config.Promotable: a learner whose latest
// report says its disk is below min_free_disk is not made a voter (its Raft
// node would soon stop on a full disk, and a voter short of room counts
// against the leader's disk verdict). Called on the Raft loop: it only
// reads lowDisk.
func (n *Node) promotable(id uint64) bool {
	low, _ := n.lowDisk.Load(id)
	return low != true
}
