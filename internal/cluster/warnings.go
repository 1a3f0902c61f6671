package cluster

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The warnings of GET /sluice/v1/cluster: what an operator should act on,
// found in the report the node answers with (the leader's view, the
// shards' memberships), computed here once for every reader — `sluice
// cluster status` prints them, the dashboard's Cluster page shows them,
// and a script polling the API gets the same list. The Prometheus rules
// (docs/prometheus/sluice-alerts.yml, group sluice-cluster) alert on the
// same conditions from the metrics.

// Kinds of Warning.
const (
	// WarnFactorDiffers: a member configured with another
	// replication_factor than the leader's.
	WarnFactorDiffers = "replication_factor_differs"
	// WarnStopped: a member whose Raft node stopped on a failed write.
	WarnStopped = "stopped"
	// WarnClockSkew: a member whose clock is more than clockSkewWarn off
	// the cluster's.
	WarnClockSkew = "clock_skew"
	// WarnTwoVoters: a group of exactly two voters (a majority of two is
	// two).
	WarnTwoVoters = "two_voters"
	// WarnOutOfSync: a bare majority or fewer of a group's three or more
	// voters in sync with its leader.
	WarnOutOfSync = "voters_out_of_sync"
)

// Warning is one warning of a Report. Message is a sentence without its
// full stop, starting in lower case ("node 3 is stopped: …"): the CLI
// prints it after "warning: ", the dashboard capitalises it.
type Warning struct {
	Kind string `json:"kind"`
	// Nodes and Shards name what the warning is about, when it is about
	// members or shards.
	Nodes   []uint64 `json:"nodes,omitempty"`
	Shards  []int    `json:"shards,omitempty"`
	Message string   `json:"message"`
}

// warnings returns rep's warnings (none without a leader's view, which
// most of them read): members configured with another factor, stopped,
// or with a skewed clock; groups of two voters (shard 0's from this
// node's membership, or each shard's with several), and a leader's view
// with a bare majority or fewer of its voters in sync. A factor of 1 is
// not warned of for two voters or voters out of sync: it tolerates no
// failure by choice, and two voters are then the middle of a move.
func (rep Report) warnings() []Warning {
	var out []Warning
	v := rep.View
	if v != nil {
		for _, m := range v.FactorMismatch() {
			out = append(out, Warning{Kind: WarnFactorDiffers, Nodes: []uint64{m.ID}, Message: fmt.Sprintf(
				"node %d is configured with replication_factor %d, the leader with %d: the leader's applies while it leads, so the voters change with the leader; set the same value on every node",
				m.ID, m.ReplicationFactor, v.ReplicationFactor)})
		}
		for _, m := range v.Members {
			if m.Stopped {
				out = append(out, Warning{Kind: WarnStopped, Nodes: []uint64{m.ID}, Message: fmt.Sprintf(
					"node %d is stopped: a write of its Raft log or state store failed, so it takes no part in the cluster (see its /health); after a full disk it restarts itself in place once space is back, after any other failure restart it by hand once the disk is sound", m.ID)})
			}
		}
		for _, m := range v.Members {
			if m.ClockOffsetMs != nil && math.Abs(*m.ClockOffsetMs) > float64(clockSkewWarn.Milliseconds()) {
				out = append(out, Warning{Kind: WarnClockSkew, Nodes: []uint64{m.ID}, Message: fmt.Sprintf(
					"node %d's clock is %+.0f ms off the cluster's (the leader's engine clock): fix its time sync; the leader steers the cluster's clock toward the median of the voters' clocks at 1 %% a second, so a skewed minority does not move visibility deadlines",
					m.ID, *m.ClockOffsetMs)})
			}
		}
	}
	if v != nil && v.ReplicationFactor == 1 {
		return out
	}
	if w, ok := rep.twoVoters(); ok {
		out = append(out, w)
	}
	if w, ok := rep.outOfSync(); ok {
		out = append(out, w)
	}
	return out
}

// twoVoters is the warning for groups of exactly two voters: shard 0's
// from this node's applied membership, or each shard's with several.
// The start-up warning (server.ClusterConfig.FactorWarning) sees only the
// configured factor; this one sees the members, so it also catches a
// cluster of two nodes under the default factor of 3.
func (rep Report) twoVoters() (Warning, bool) {
	if len(rep.Shards) == 0 {
		voters := 0
		for _, p := range rep.Peers {
			if p.Membership == "voter" {
				voters++
			}
		}
		if voters != 2 {
			return Warning{}, false
		}
		return Warning{Kind: WarnTwoVoters, Message: "the cluster has 2 voters: a majority of 2 is 2, so either node down stops every write and the repair of copies; add a third node (sluice cluster add) to stay writable with one down"}, true
	}
	var two []int
	for _, sh := range rep.Shards {
		if len(sh.Voters) == 2 {
			two = append(two, sh.Shard)
		}
	}
	switch len(two) {
	case 0:
		return Warning{}, false
	case 1:
		return Warning{Kind: WarnTwoVoters, Shards: two, Message: fmt.Sprintf(
			"shard %d has 2 voters: a majority of 2 is 2, so either of them down stops its writes and its repair; add a node (sluice cluster add) or set replication_factor 3 to stay writable with one down", two[0])}, true
	}
	names := make([]string, len(two))
	for i, k := range two {
		names[i] = strconv.Itoa(k)
	}
	return Warning{Kind: WarnTwoVoters, Shards: two, Message: fmt.Sprintf(
		"shards %s have 2 voters: a majority of 2 is 2, so either voter of one down stops its writes and its repair; add a node (sluice cluster add) or set replication_factor 3 to stay writable with one down", strings.Join(names, ", "))}, true
}

// outOfSync is the warning for a leader's view (shard 0's with several
// shards) of three or more voters of which a bare majority or fewer are
// in sync: one of three down, two of five. One more voter lost would stop
// the group's writes. The in-sync flags are the leader's
// (sluice_raft_peer_in_sync; the alert SluiceClusterNoFaultTolerance
// reads the same). Two voters are twoVoters'.
func (rep Report) outOfSync() (Warning, bool) {
	if rep.View == nil {
		return Warning{}, false
	}
	voters, inSync := 0, 0
	var behind []uint64
	var names []string
	for _, m := range rep.View.Members {
		if m.Membership != "voter" {
			continue
		}
		voters++
		if m.InSync {
			inSync++
		} else {
			behind = append(behind, m.ID)
			names = append(names, "node "+strconv.FormatUint(m.ID, 10))
		}
	}
	if voters < 3 || inSync > voters/2+1 {
		return Warning{}, false
	}
	group, stops := "the cluster's", "every write"
	var shards []int
	if len(rep.Shards) > 0 {
		group, stops, shards = "shard 0's", "shard 0's writes", []int{0}
	}
	it := "it"
	if len(behind) > 1 {
		it = "them"
	}
	return Warning{Kind: WarnOutOfSync, Nodes: behind, Shards: shards, Message: fmt.Sprintf(
		"%d of %s %d voters are in sync with the leader (not %s): one more voter lost stops %s; bring %s back (process, network, disk) or replace %s (sluice cluster add, then remove)",
		inSync, group, voters, strings.Join(names, ", "), stops, it, it)}, true
}
