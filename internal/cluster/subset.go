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
