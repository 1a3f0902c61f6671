package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// placementFile records, in a node's data directory, that the cluster was
// first started with [cluster] placement = "subset" (ADR 0016). A data
// directory without it holds every shard.
const placementFile = "placement"

// checkPlacement refuses to start a node on a data directory written with
// the other placement: it is fixed when a cluster is first started, as
// the shard count is. A data directory without the record is stamped
// with subset only when it is empty (a new node); one that holds a node's
// state is taken as written with every shard on every node.
func checkPlacement(dir string, subset bool) error {
	path := filepath.Join(dir, placementFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if had := strings.TrimSpace(string(b)); had != "subset" {
			return fmt.Errorf("cluster: %s holds %q, not a placement", path, b)
		}
		if !subset {
			return errors.New(`cluster.placement: this node's data_dir was started with placement "subset"; the placement is fixed when the cluster is first started`)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("cluster: %w", err)
	}
	if !subset {
		return nil
	}
	full, err := holdsState(dir)
	if err != nil {
		return err
	}
	if full {
		return errors.New(`cluster.placement: this node's data_dir holds a node started with every shard on every node, not "subset"; the placement is fixed when the cluster is first started`)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	return writeStamp(path, "subset")
}

// subsetPlan is the shard plan of node self with [cluster] placement = "subset"
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

// openPlan is the shard plan node self opens its groups with, with
// [cluster] placement = "subset": at the first start of a boot member,
// subsetPlan's; at the first start of a node joining a running cluster
// (join), shard 0 alone (the placement controller adds it to others);
// at any later start, the groups whose directories are there, since the
// controller may have moved this node into or out of others meanwhile
// (follow.go). A group that is not one of subsetPlan's is opened as
// joined (ShardPlan.Joined).
func openPlan(dir string, self uint64, peers []raftstore.Peer, factor, count int, join bool) (raftstore.ShardPlan, error) {
	plan := subsetPlan(self, peers, factor)
	started, err := holdsState(dir)
	if err != nil {
		return raftstore.ShardPlan{}, err
	}
	boot := plan.Held
	switch {
	case started:
		held := make([]bool, count)
		for k := 1; k < count; k++ {
			_, err := os.Stat(raftstore.ShardDir(dir, k))
			switch {
			case err == nil:
				held[k] = true
			case !errors.Is(err, os.ErrNotExist):
				return raftstore.ShardPlan{}, fmt.Errorf("data_dir: %w", err)
			}
		}
		plan.Held = func(k int) bool { return k == 0 || k < len(held) && held[k] }
	case join:
		plan.Held = func(k int) bool { return k == 0 }
	}
	plan.Joined = func(k int) bool { return !boot(k) }
	bootPeers := plan.Peers
	plan.Peers = func(k int, all []raftstore.Peer) []raftstore.Peer {
		if !boot(k) {
			return all // addresses only: a joined group's members are in its state
		}
		return bootPeers(k, all)
	}
	return plan, nil
}
