package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// The cluster view (the dashboard's cluster page, GET /sluice/v1/cluster's
// "view"): every member with its membership (voter or learner), role,
// term, commit and applied index,
// and, from the leader's Raft progress, how far its log is behind.
//
// Only a node knows its own applied index, so each follower reports its
// status to the leader once every reportInterval, on the leader's
// internal listener (POST /sluice/internal/v1/status, without
// [http_auth]: like every connection to the leader's internal listeners
// it passes the node handshake (package nodeauth) first; the values are
// shown, never acted on). The leader assembles the view (GET /sluice/internal/v1/members); a
// follower asked for its status fetches the view from the leader. A
// node's public listeners answer 404 under /sluice/internal/.

const (
	internalPrefix  = "/sluice/internal/"
	internalStatus  = "/sluice/internal/v1/status"
	internalMembers = "/sluice/internal/v1/members"
	// reportInterval is how often a follower reports to the leader.
	reportInterval = time.Second
	// maxStatusBody bounds a reported status.
	maxStatusBody = 64 << 10
	// commitHeader carries the leader's commit index (shard 0's) on the
	// answer to a status report: a follower's own goes no further than its
	// log, so its /health measures its apply lag against this (health.go).
	commitHeader = "Sluice-Commit"
)

// ClusterView is the leader's view of every member.
type ClusterView struct {
	Leader    uint64 `json:"leader"`
	Term      uint64 `json:"term"`
	LastIndex uint64 `json:"last_index"` // the leader's last log index
	// ReplicationFactor is the number of voters the leader keeps
	// ([cluster] replication_factor, the leader's own setting).
	ReplicationFactor int          `json:"replication_factor"`
	Members           []MemberView `json:"members"`
}

// MemberView is one member in ClusterView.
type MemberView struct {
	ID   uint64 `json:"id"`
	Raft string `json:"raft"`
	// Membership is "voter" or "learner" (added, not promoted yet), from
	// the leader's applied membership.
	Membership string `json:"membership"`
	// Role, Term, Commit and Applied are what the member last reported
	// (the leader's own, for the leader); Role is "" when it never did.
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// ReportedMsAgo is the age of that report in milliseconds (0 for the
	// leader), absent when the member never reported to this leader.
	ReportedMsAgo *int64 `json:"reported_ms_ago,omitempty"`
	// Match is the highest log index the leader knows on the member; Lag
	// is the leader's last index minus Match (entries not yet on it).
	Match uint64 `json:"match"`
	Lag   uint64 `json:"lag"`
	// InSync: the leader replicates to the member normally, heard from it
	// within an election timeout, and its log is within
	// promote_lag_entries of the commit index (a learner so marked can
	// replace a voter at once).
	InSync bool `json:"in_sync"`
	// DiskLow: the member's free disk is below min_free_disk, as it last
	// reported (its own watch, for the leader).
	DiskLow bool `json:"disk_low,omitempty"`
	// ReplicationFactor is the member's own [cluster] replication_factor,
	// as it last reported (absent when it never did, or runs a release
	// that does not report it). One that differs from the view's is a
	// misconfiguration: the voters would change with the leader.
	ReplicationFactor int `json:"replication_factor,omitempty"`
	// Links is how the member carries its links to the other nodes
	// (NodeStatus.Links), as it last reported (absent when it never did).
	Links string `json:"links,omitempty"`
	// ClockOffsetMs is the member's wall clock minus the cluster's (the
	// leader's engine clock) in milliseconds, as it last measured and
	// reported it (for the leader, its wall clock minus its engine's;
	// absent when the member has not measured against this leader). See
	// clockskew.go.
	ClockOffsetMs *float64 `json:"clock_offset_ms,omitempty"`
	// Stopped: one of the member's Raft nodes stopped on a failed write
	// of its Raft log or state store (raftstore Node.Failure), as its last
	// report said or, when it stopped reporting (its shard 0 stopped: it
	// knows no leader to report to), as it answered the leader's probe
	// (silent.go). Its other fields are then its last report's.
	Stopped bool `json:"stopped,omitempty"`
}

// FactorMismatch returns the members whose own replication factor, as
// reported, differs from the leader's.
func (v ClusterView) FactorMismatch() []MemberView {
	var out []MemberView
	for _, m := range v.Members {
		if m.ReplicationFactor != 0 && m.ReplicationFactor != v.ReplicationFactor {
			out = append(out, m)
		}
	}
	return out
}

// reported is a follower's last status as the leader received it.
type reported struct {
	st NodeStatus
	at time.Time
}

// progressView is the view of a group this node leads from its Raft
// status st alone: each member's membership, match, lag and in-sync,
// and the leader's own role, term and indexes.
func progressView(st raftstore.Status, factor int) ClusterView {
	v := ClusterView{Leader: st.ID, Term: st.Term, LastIndex: st.LastIndex, ReplicationFactor: factor}
	for _, p := range st.Members {
		m := MemberView{ID: p.ID, Raft: p.RaftAddr, Membership: p.Membership, Match: st.Match[p.ID], InSync: st.InSync[p.ID]}
		m.Lag = lag(st.LastIndex, m.Match)
		if p.ID == st.ID {
			m.Role, m.Term, m.Commit, m.Applied = st.Role, st.Term, st.Commit, st.Applied
			m.ReportedMsAgo = new(int64)
		}
		v.Members = append(v.Members, m)
	}
	return v
}

// view assembles the ClusterView; ok is false unless this node leads.
func (n *Node) view() (ClusterView, bool) {
	st := n.raft.Status()
	if st.Role != "leader" {
		return ClusterView{}, false
	}
	v := progressView(st, n.opts.Cluster.Factor())
	selfStopped := n.statusFlags()&statusStopped != 0
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range v.Members {
		m := &v.Members[i]
		switch r, ok := n.reports[m.ID]; {
		case m.ID == st.ID:
			m.DiskLow = n.disk.low
			m.ReplicationFactor = v.ReplicationFactor
			m.Links = n.enc.Mode()
			m.ClockOffsetMs = new(leaderOffset(n.timeline).Seconds() * 1000)
			m.Stopped = selfStopped
		case ok:
			m.Role, m.Term, m.Commit, m.Applied = r.st.Role, r.st.Term, r.st.Commit, r.st.Applied
			m.DiskLow = r.st.DiskLow
			m.ReplicationFactor = r.st.ReplicationFactor
			m.Links = r.st.Links
			if r.st.Leader == st.ID {
				m.ClockOffsetMs = r.st.ClockOffsetMs
			}
			m.ReportedMsAgo = new(now.Sub(r.at).Milliseconds())
		}
		if m.ID != st.ID {
			m.Stopped = n.memberStoppedLocked(m.ID, now)
		}
	}
	// Forget the reports of members removed since.
	for id := range n.reports {
		if !slices.ContainsFunc(st.Members, func(p raftstore.Member) bool { return p.ID == id }) {
			delete(n.reports, id)
		}
	}
	for id := range n.probed {
		if !slices.ContainsFunc(st.Members, func(p raftstore.Member) bool { return p.ID == id }) {
			delete(n.probed, id)
		}
	}
	return v, true
}

// internalHandler serves /sluice/internal/ on shard 0's leader's server:
// the followers' reports, the view for followers asked for it, and the
// membership changes they forward (memberInternalRoutes).
func (n *Node) internalHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+internalStatus, func(w http.ResponseWriter, r *http.Request) {
		var st NodeStatus
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxStatusBody)).Decode(&st); err != nil {
			http.Error(w, "bad status: "+err.Error(), http.StatusBadRequest)
			return
		}
		rs := n.raft.Status()
		member := slices.ContainsFunc(rs.Members, func(p raftstore.Member) bool { return p.ID == st.ID })
		if !member || st.ID == n.opts.Cluster.NodeID {
			http.Error(w, "not another member of this cluster: "+strconv.FormatUint(st.ID, 10), http.StatusBadRequest)
			return
		}
		n.mu.Lock()
		prev, seen := n.reports[st.ID]
		n.reports[st.ID] = reported{st: st, at: time.Now()}
		n.retargetClockLocked(rs, time.Now())
		n.mu.Unlock()
		if own := n.opts.Cluster.Factor(); st.ReplicationFactor != 0 && st.ReplicationFactor != own && (!seen || prev.st.ReplicationFactor != st.ReplicationFactor) {
			n.log.Warn("a member is configured with another replication_factor: this leader's applies while it leads, the member's would once it leads, and the voters would change with the leader; set the same value on every node",
				"member", st.ID, "member_replication_factor", st.ReplicationFactor, "replication_factor", own)
		}
		n.lowDisk.Store(st.ID, st.DiskLow)
		n.stampClock(w)
		if rs.Role == "leader" {
			w.Header().Set(commitHeader, strconv.FormatUint(rs.Commit, 10))
		}
		w.WriteHeader(http.StatusNoContent)
	})
	n.memberInternalRoutes(mux, 0)
	mux.HandleFunc("GET "+internalMembers, func(w http.ResponseWriter, _ *http.Request) {
		v, ok := n.view()
		if !ok {
			http.Error(w, "this node does not lead", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v) // a client gone cannot be told
	})
	return mux
}

// errNotServing: no leader serves a view yet.
var errNotServing = errors.New("cluster: no leader serves the cluster view")

// leaderView returns the ClusterView: this node's when it leads, else the
// leader's, fetched from its internal listener.
func (n *Node) leaderView(ctx context.Context) (ClusterView, error) {
	if v, ok := n.view(); ok {
		return v, nil
	}
	ad, leader, ok := n.target(0)
	if !ok || leader == n.opts.Cluster.NodeID {
		return ClusterView{}, errNotServing
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ad.SQS+internalMembers, nil)
	if err != nil {
		return ClusterView{}, err
	}
	resp, err := n.transport.RoundTrip(req)
	if err != nil {
		return ClusterView{}, err
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	if resp.StatusCode != http.StatusOK {
		return ClusterView{}, fmt.Errorf("cluster: the leader answered %d", resp.StatusCode)
	}
	var v ClusterView
	err = json.NewDecoder(io.LimitReader(resp.Body, maxStatusBody)).Decode(&v)
	return v, err
}

// report sends this node's status to the leader, when another node leads.
func (n *Node) report(ctx context.Context) error {
	ad, leader, ok := n.target(0)
	if !ok || leader == n.opts.Cluster.NodeID {
		return nil
	}
	b, _ := json.Marshal(n.Status().Node) // numbers and strings always encode
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ad.SQS+internalStatus, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	sent := n.clk.Now()
	resp, err := n.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	got := n.clk.Now()
	_, _ = io.Copy(io.Discard, resp.Body) // for the connection's reuse
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("cluster: the leader answered %d to a status report", resp.StatusCode)
	}
	n.noteClock(leader, sent, got, resp.Header.Get(clockHeader))
	commit, _ := strconv.ParseUint(resp.Header.Get(commitHeader), 10, 64) // absent (an older leader): 0
	n.mu.Lock()
	n.contact = contact{leader: leader, at: time.Now(), commit: commit}
	n.mu.Unlock()
	return nil
}

// reportLoop, every reportInterval until ctx ends, checks this node's
// disk, and then reports its status to the leader or, while it leads, sets
// its server's disk alarm (health.go) and probes the members that stopped
// reporting (silent.go).
func (n *Node) reportLoop(ctx context.Context) {
	tick := time.NewTicker(reportInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n.checkDisk()
		n.noteLeader(n.raft.Status().Leader, time.Now())
		n.applyDiskVerdict()
		rctx, cancel := context.WithTimeout(ctx, reportInterval)
		if err := n.report(rctx); err != nil && ctx.Err() == nil {
			n.log.Debug("cannot report this node's status to the leader", "err", err)
		}
		cancel()
		n.probeSilent(ctx)
	}
}
