package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestShardNotServingHealth: with several shards, /health fails a node
// that cannot route a shard other than 0 to a serving leader
// (shard_not_serving, one check per such shard).
func TestShardNotServingHealth(t *testing.T) {
	nodes, stop := shardedNodes(t)
	survivor := nodes[2]
	if h := survivor.health(); h.Status != "ok" {
		t.Fatalf("before: %+v", h)
	}
	// Two of three nodes stop: no shard has a quorum, so none elects a
	// leader, and the survivor cannot route shards 1 and 2.
	for i := range 2 {
		if err := stop(i); err != nil {
			t.Fatalf("stopping node %d: %v", i+1, err)
		}
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		h := survivor.health()
		var shards []string
		for _, c := range h.Checks {
			if c.Check == "shard_not_serving" {
				shards = append(shards, c.Detail)
			}
		}
		if h.Status == "ok" || !slices.Equal(shards, []string{
			"no serving leader of shard 1 is known yet", "no serving leader of shard 2 is known yet",
		}) {
			return fmt.Errorf("the survivor's health: %+v", h)
		}
		return nil
	})
}
