package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// Report is the answer of GET /sluice/v1/cluster on any node's public
// HTTP listener: that node's own view, not forwarded to the leader.
type Report struct {
	// Node is this node's Raft status.
	Node NodeStatus `json:"node"`
	// Public are this node's public listeners (what clients dial).
	Public Addresses `json:"public"`
	// Peers are every member of the replicated membership (as this node
	// has applied it: the configuration's peers until the first `sluice
	// cluster add/remove`), with its Raft address, whether it votes, and the internal
	// addresses it last advertised as leader (if ever).
	Peers []PeerReport `json:"peers"`
	// View is the leader's view of every member (clusterview.go): fetched
	// from the leader when this node follows; absent while no leader
	// serves it.
	View *ClusterView `json:"view,omitempty"`
	// Shards is, with [cluster] shards above 1, each shard's Raft status
	// on this node (Node is shard 0's), the first view of where every
	// shard's leader is.
	Shards []ShardStatus `json:"shards,omitempty"`
	// Placement is "subset" with [cluster] placement "subset" (ADR 0016):
	// each shard above 0 on some of the nodes; "" when every node holds
	// every shard.
	Placement string `json:"placement,omitempty"`
	// Warnings are what an operator should act on, found in the rest of
	// the report (warnings.go): members misconfigured, stopped or with a
	// skewed clock, groups of two voters, and too few voters in sync.
	Warnings []Warning `json:"warnings,omitempty"`
}

// ShardStatus is one shard's Raft status on a node.
type ShardStatus struct {
	Shard   int    `json:"shard"`
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Leader  uint64 `json:"leader"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// Voters and Learners are the shard's membership as this node has
	// applied it.
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
	// Stopped: this node's Raft node of the shard stopped on a failed
	// write of its Raft log or state store (raftstore Status.Stopped).
	Stopped bool `json:"stopped,omitempty"`
	// NotHeld: this node holds no copy of the shard ([cluster]
	// placement "subset"); Role is "not-held", Commit and Applied are 0,
	// and Term, Leader and the membership are those its leader last
	// recorded in shard 0 (follow.go), none if it recorded nothing.
	NotHeld bool `json:"not_held,omitempty"`
}

// NodeStatus is raftstore's Status in JSON.
type NodeStatus struct {
	ID      uint64 `json:"id"`
	Role    string `json:"role"` // leader, follower, candidate or removed
	Term    uint64 `json:"term"`
	Leader  uint64 `json:"leader"` // 0: none known
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// Match is, on the leader only, each peer's replicated log index.
	Match map[string]uint64 `json:"match,omitempty"`
	// Joining: started with join = true and not yet added by the leader
	// (`sluice cluster add`); it has no membership yet.
	Joining bool `json:"joining,omitempty"`
	// Stopped: this node's Raft node stopped on a failed write of its
	// Raft log or state store (of shard 0, or with shards of any shard:
	// Report.Shards says which); it takes no part in the group until it
	// is opened again, in place after a full disk (Supervise).
	Stopped bool `json:"stopped,omitempty"`
	// DiskLow: this node's free disk is below min_free_disk (health.go);
	// the leader counts it in its followers' reports.
	DiskLow bool `json:"disk_low,omitempty"`
	// ReplicationFactor is this node's own [cluster] replication_factor.
	// Only the leader's applies; a member configured otherwise would
	// apply its own once it leads, so the leader compares them (MemberView).
	ReplicationFactor int `json:"replication_factor,omitempty"`
	// Links is how this node's connections to the other nodes are
	// carried ([cluster] encrypt and encrypt_transition, nodeauth.Mode):
	// "plain", "tls", or during a switch-over "accept-both, dial plain" /
	// "accept-both, dial tls". The leader shows every member's, so an
	// operator sees which round of the rolling restarts each node is in.
	Links string `json:"links,omitempty"`
	// ClockOffsetMs is this node's wall clock minus the cluster's (the
	// leader's engine clock) in milliseconds (clockskew.go): on the
	// leader, its wall clock minus its engine's; absent before a first
	// measurement against the current leader.
	ClockOffsetMs *float64 `json:"clock_offset_ms,omitempty"`
	// ClockUncertaintyMs bounds ClockOffsetMs's error (half the round
	// trip that measured it); the leader uses only offsets known to
	// within 10 ms to steer the cluster's clock (timeline.go).
	ClockUncertaintyMs float64 `json:"clock_uncertainty_ms,omitempty"`
}

// Addresses are a node's HTTP and AMQP listeners.
type Addresses struct {
	HTTP string `json:"http"`
	AMQP string `json:"amqp,omitempty"`
	// AMQPS is the AMQP-over-TLS listener (amqps_listen), on public
	// addresses only.
	AMQPS string `json:"amqps,omitempty"`
	// TLS says the HTTP listener serves HTTPS ([tls]), on public
	// addresses only.
	TLS bool `json:"tls,omitempty"`
}

// PeerReport is one member as this node sees it.
type PeerReport struct {
	ID   uint64 `json:"id"`
	Raft string `json:"raft"`
	// Membership is "voter" or "learner" (added, not yet caught up: it
	// neither votes nor counts in the commit quorum until the leader
	// promotes it).
	Membership string         `json:"membership"`
	Advertised *Advertisement `json:"advertised,omitempty"`
}

// Status is this node's Report.
func (n *Node) Status() Report {
	st := n.raft.Status()
	rep := Report{
		Node:   NodeStatus{ID: st.ID, Role: st.Role, Term: st.Term, Leader: st.Leader, Commit: st.Commit, Applied: st.Applied, Joining: st.Joining, Stopped: st.Stopped},
		Public: Addresses{HTTP: n.HTTPAddr(), AMQP: n.AMQPAddr(), AMQPS: n.AMQPSAddr(), TLS: n.cert != nil},
	}
	n.mu.Lock()
	rep.Node.DiskLow = n.disk.low
	n.mu.Unlock()
	rep.Node.ReplicationFactor = n.opts.Cluster.Factor()
	rep.Node.Links = n.enc.Mode()
	rep.Node.ClockOffsetMs, rep.Node.ClockUncertaintyMs = n.clockOffsetMs(st.Role, st.Leader)
	if len(st.Match) > 0 {
		rep.Node.Match = make(map[string]uint64, len(st.Match))
		for id, m := range st.Match {
			rep.Node.Match[strconv.FormatUint(id, 10)] = m
		}
	}
	for _, p := range st.Members {
		pr := PeerReport{ID: p.ID, Raft: p.RaftAddr, Membership: p.Membership}
		if b := n.raft.Advertised(p.ID); b != nil {
			var ad Advertisement
			if json.Unmarshal(b, &ad) == nil {
				pr.Advertised = &ad
			}
		}
		rep.Peers = append(rep.Peers, pr)
	}
	if n.opts.Cluster.SubsetPlacement() {
		rep.Placement = server.PlacementSubset
	}
	if n.shards.Len() > 1 {
		for k := range n.shards.Len() {
			r := n.shards.Shard(k)
			if r == nil {
				// A shard this node does not hold (ADR 0016): as its
				// leader recorded it.
				ss := ShardStatus{Shard: k, Role: "not-held", NotHeld: true}
				if rec, leader, ok := n.shardRecordOf(k); ok {
					ss.Term, ss.Leader, ss.Voters, ss.Learners = rec.Term, leader, rec.Voters, rec.Learners
				}
				rep.Shards = append(rep.Shards, ss)
				continue
			}
			s := r.Status()
			ss := ShardStatus{Shard: k, Role: s.Role, Term: s.Term, Leader: s.Leader, Commit: s.Commit, Applied: s.Applied, Stopped: s.Stopped}
			rep.Node.Stopped = rep.Node.Stopped || s.Stopped
			for _, m := range s.Members {
				if m.Membership == raftstore.Learner {
					ss.Learners = append(ss.Learners, m.ID)
				} else {
					ss.Voters = append(ss.Voters, m.ID)
				}
			}
			rep.Shards = append(rep.Shards, ss)
		}
	}
	return rep
}

func (n *Node) serveStatus(w http.ResponseWriter, r *http.Request) {
	rep := n.Status()
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	if v, err := n.leaderView(ctx); err == nil {
		rep.View = &v
	}
	cancel()
	rep.Warnings = rep.warnings()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(rep) // a client gone cannot be told
}
