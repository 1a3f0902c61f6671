package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestReportWarnings: the warnings of GET /sluice/v1/cluster, from the
// report's leader view, peers and shards: a member configured with
// another factor, stopped, or with its clock more than 500 ms off; a
// group of two voters (the cluster's from the peers, or each shard's);
// a bare majority or fewer of three or more voters in sync (one of
// three, two of five; shard 0's with shards). None for a healthy
// cluster, and under a factor of 1 none for two voters or voters out of
// sync (a move's middle; no tolerance by choice).
func TestReportWarnings(t *testing.T) {
	peers := func(ms ...string) string {
		var s []string
		for i, m := range ms {
			s = append(s, fmt.Sprintf(`{"id":%d,"raft":"127.0.0.1:1%d","membership":%q}`, i+1, i+1, m))
		}
		return `"peers":[` + strings.Join(s, ",") + `]`
	}
	// view's members: "voter", "learner", optionally followed by words:
	// "behind" (not in sync), "stopped", "rf=N", "clock=MS".
	view := func(factor int, ms ...string) string {
		var s []string
		for i, m := range ms {
			f := strings.Fields(m)
			extra := ""
			inSync := true
			for _, w := range f[1:] {
				switch {
				case w == "behind":
					inSync = false
				case w == "stopped":
					extra += `,"stopped":true`
				case strings.HasPrefix(w, "rf="):
					extra += `,"replication_factor":` + w[3:]
				case strings.HasPrefix(w, "clock="):
					extra += `,"clock_offset_ms":` + w[6:]
				}
			}
			s = append(s, fmt.Sprintf(`{"id":%d,"membership":%q,"in_sync":%t%s}`, i+1, f[0], inSync, extra))
		}
		return fmt.Sprintf(`"view":{"leader":1,"term":2,"replication_factor":%d,"members":[%s]}`, factor, strings.Join(s, ","))
	}
	const three = `"peers":[{"id":1,"membership":"voter"},{"id":2,"membership":"voter"},{"id":3,"membership":"voter"}]`
	for _, c := range []struct {
		name, report string
		want         []string // each warning's "kind: message", in order; the messages as prefixes
	}{
		{"healthy", three + "," + view(3, "voter", "voter", "voter"), nil},
		{"no view", three, nil},
		{"clock", three + "," + view(3, "voter clock=0", "voter clock=-0.4", "voter clock=3012.5"),
			[]string{"clock_skew: node 3's clock is +3012 ms off the cluster's (the leader's engine clock): fix its time sync"}},
		{"clock behind", three + "," + view(3, "voter", "voter clock=-640", "voter clock=499.9"),
			[]string{"clock_skew: node 2's clock is -640 ms off the cluster's"}},
		{"factor", three + "," + view(3, "voter rf=3", "voter", "voter rf=5"),
			[]string{"replication_factor_differs: node 3 is configured with replication_factor 5, the leader with 3: the leader's applies while it leads"}},
		{"stopped", three + "," + view(3, "voter", "voter", "voter behind stopped"),
			[]string{"stopped: node 3 is stopped: a write of its Raft log or state store failed",
				"voters_out_of_sync: 2 of the cluster's 3 voters are in sync with the leader (not node 3): one more voter lost stops every write; bring it back"}},

		{"two nodes", peers("voter", "voter"), []string{"two_voters: the cluster has 2 voters: a majority of 2 is 2"}},
		{"two voters and a learner", peers("voter", "voter", "learner"), []string{"two_voters: the cluster has 2 voters"}},
		{"one node", peers("voter"), nil},
		{"factor 1 moving", peers("voter", "voter") + "," + view(1), nil},
		{"one shard of two voters", three + `,"shards":[{"shard":0,"voters":[1,2,3]},{"shard":1,"voters":[1,2,3]},{"shard":2,"voters":[2,3],"learners":[1]}]`,
			[]string{"two_voters: shard 2 has 2 voters: a majority of 2 is 2"}},
		{"shards of two voters", peers("voter", "voter") + `,"shards":[{"shard":0,"voters":[1,2]},{"shard":1,"voters":[1,2]},{"shard":2,"voters":[2,3,4]}]`,
			[]string{"two_voters: shards 0, 1 have 2 voters: a majority of 2 is 2"}},
		{"shards of three", peers("voter", "voter") + `,"shards":[{"shard":0,"voters":[1,2,3]},{"shard":1,"voters":[2,3,4]}]`, nil},

		{"one of three behind", three + "," + view(3, "voter", "voter", "voter behind"),
			[]string{"voters_out_of_sync: 2 of the cluster's 3 voters are in sync with the leader (not node 3)"}},
		{"a learner behind", three + "," + view(3, "voter", "voter", "voter", "learner behind"), nil},
		{"one of five behind", three + "," + view(5, "voter", "voter behind", "voter", "voter", "voter"), nil},
		{"two of five behind", three + "," + view(5, "voter", "voter behind", "voter", "voter behind", "voter"),
			[]string{"voters_out_of_sync: 3 of the cluster's 5 voters are in sync with the leader (not node 2, node 4): one more voter lost stops every write; bring them back"}},
		{"shard 0 behind", three + "," + view(3, "voter", "voter behind", "voter") + `,"shards":[{"shard":0,"voters":[1,2,3]},{"shard":1,"voters":[1,2,3]}]`,
			[]string{"voters_out_of_sync: 2 of shard 0's 3 voters are in sync with the leader (not node 2): one more voter lost stops shard 0's writes"}},
		{"two voters in the view", peers("voter", "voter") + "," + view(3, "voter", "voter"), []string{"two_voters: the cluster has 2 voters"}},
		{"factor 1 behind", three + "," + view(1, "voter", "voter behind", "voter behind"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rep Report
			if err := json.Unmarshal([]byte(`{"node":{"id":1,"role":"leader","term":2,"leader":1},`+c.report+`}`), &rep); err != nil {
				t.Fatal(err)
			}
			got := rep.warnings()
			var lines []string
			for _, w := range got {
				lines = append(lines, w.Kind+": "+w.Message)
			}
			ok := len(got) == len(c.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.HasPrefix(lines[i], c.want[i])
			}
			if !ok {
				t.Errorf("warnings:\n  %s\nwant (prefixes):\n  %s", strings.Join(lines, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}
