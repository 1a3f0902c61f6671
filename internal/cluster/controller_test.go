package cluster

import (
	"fmt"
	"testing"
)

// TestPlanPlacement: the controller's moves for a round, from the
// shards' recorded members and the cluster's live nodes.
func TestPlanPlacement(t *testing.T) {
	rec := func(voters []uint64, learners ...uint64) shardRecord {
		return shardRecord{Voters: voters, Learners: learners}
	}
	nodes := func(ids ...uint64) []uint64 { return ids }
	all := func(ids ...uint64) map[uint64]bool {
		m := map[uint64]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	cases := []struct {
		name string
		v    placementView
		want string
	}{
		{"placed as it should be", placementView{factor: 2, nodes: nodes(1, 2, 3), live: all(1, 2, 3),
			shards: map[int]shardRecord{1: rec([]uint64{1, 2}), 2: rec([]uint64{2, 3})}}, "[]"},
		{"a node added takes a shard off the busiest", placementView{factor: 2, nodes: nodes(1, 2, 3, 4), live: all(1, 2, 3, 4),
			shards: map[int]shardRecord{1: rec([]uint64{1, 2}), 2: rec([]uint64{2, 3})}}, "[{1 4 []}]"},
		{"then the busiest leaves it", placementView{factor: 2, nodes: nodes(1, 2, 3, 4), live: all(1, 2, 3, 4),
			shards: map[int]shardRecord{1: rec([]uint64{1, 2}, 4), 2: rec([]uint64{2, 3})}}, "[{1 0 [2]}]"},
		{"spread within one: nothing moves", placementView{factor: 2, nodes: nodes(1, 2, 3, 4), live: all(1, 2, 3, 4),
			shards: map[int]shardRecord{1: rec([]uint64{1, 4}), 2: rec([]uint64{2, 3}), 3: rec([]uint64{1, 2})}}, "[]"},
		{"a silent node is replaced in each of its shards by the idlest", placementView{factor: 2, nodes: nodes(1, 2, 3, 4), live: all(1, 2, 4),
			shards: map[int]shardRecord{1: rec([]uint64{1, 3}), 2: rec([]uint64{2, 3})}}, "[{1 4 []} {2 1 []}]"},
		{"and moved out once the replacements are there", placementView{factor: 2, nodes: nodes(1, 2, 3, 4), live: all(1, 2, 4),
			shards: map[int]shardRecord{1: rec([]uint64{1, 3}, 4), 2: rec([]uint64{2, 3}, 1)}}, "[{1 0 [3]} {2 0 [3]}]"},
		{"a node removed from the cluster is moved out the same way", placementView{factor: 2, nodes: nodes(1, 2, 4), live: all(1, 2, 4),
			shards: map[int]shardRecord{1: rec([]uint64{1, 3})}}, "[{1 2 []}]"},
		{"no node to take a gone member's place: nothing moves", placementView{factor: 2, nodes: nodes(1, 2), live: all(1),
			shards: map[int]shardRecord{1: rec([]uint64{1, 2})}}, "[]"},
		{"a node the shard refused is not asked again", placementView{factor: 2, nodes: nodes(1, 2, 3), live: all(1, 2, 3),
			shards: map[int]shardRecord{1: rec([]uint64{1})}, refused: map[int]map[uint64]bool{1: {2: true}}}, "[{1 3 []}]"},
		{"no balance while a shard moves", placementView{factor: 2, nodes: nodes(1, 2, 3, 4, 5), live: all(1, 2, 3, 4, 5),
			shards: map[int]shardRecord{1: rec([]uint64{1, 2}, 3), 2: rec([]uint64{1, 2}), 3: rec([]uint64{1, 2})}}, "[{1 0 [2]}]"},
		{"a shard without a membership is left alone", placementView{factor: 2, nodes: nodes(1, 2, 3), live: all(1, 2, 3),
			shards: map[int]shardRecord{1: {}}}, "[]"},
	}
	for _, c := range cases {
		got := "["
		for i, m := range planPlacement(c.v) {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprint("{", m.shard, " ", m.add, " ", m.retire, "}")
		}
		got += "]"
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
