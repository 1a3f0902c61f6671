package cluster

import (
	"cmp"
	"slices"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// subsetPlan is the shard plan of node self with Options.SubsetShards
// (ADR 0016 decision 3): shard k ≥ 1 lives on factor of the peers, sorted
// by id, from the (k−1)-th on, wrapping around (every peer when there are
// no more than factor); shard 0 on every peer. Every node computes the
// same plan from the same peers.
func subsetPlan(self uint64, peers []raftstore.Peer, factor int) raftstore.ShardPlan {
	sorted := slices.Clone(peers)
	slices.SortFunc(sorted, func(a, b raftstore.Peer) int { return cmp.Compare(a.ID, b.ID) })
	members := func(k int, all []raftstore.Peer) []raftstore.Peer {
		if k == 0 || factor <= 0 || factor >= len(all) {
			return all
		}
		var out []raftstore.Peer
		for i := range factor {
			id := sorted[(k-1+i)%len(sorted)].ID
			if j := slices.IndexFunc(all, func(p raftstore.Peer) bool { return p.ID == id }); j >= 0 {
				out = append(out, all[j])
			}
		}
		return out
	}
	return raftstore.ShardPlan{
		Held: func(k int) bool {
			return slices.ContainsFunc(members(k, peers), func(p raftstore.Peer) bool { return p.ID == self })
		},
		Peers: members,
	}
}
