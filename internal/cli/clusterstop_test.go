package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// stopView is a leader's view (GET /sluice/v1/cluster's view, or a
// shard's) of members "id:voter" or "id:learner", "+" marking those in
// sync with the leader ("1:voter+").
func stopView(ms ...string) string {
	var s []string
	for _, m := range ms {
		inSync := strings.HasSuffix(m, "+")
		id, membership, _ := strings.Cut(strings.TrimSuffix(m, "+"), ":")
		s = append(s, fmt.Sprintf(`{"id":%s,"membership":%q,"in_sync":%t}`, id, membership, inSync))
	}
	return `{"leader":1,"term":2,"replication_factor":3,"members":[` + strings.Join(s, ",") + `]}`
}

// stopServer answers GET /sluice/v1/cluster with a report of view (none
// when ""), and with shards the shards' list too; GET
// /sluice/v1/cluster/shards/K with shards[K] (503 when "").
func stopServer(t *testing.T, view func() string, shards ...string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if k, ok := strings.CutPrefix(r.URL.Path, "/sluice/v1/cluster/shards/"); ok {
			var i int
			if _, err := fmt.Sscan(k, &i); err != nil || i >= len(shards) || shards[i] == "" {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"__type":"ServiceUnavailable","message":"no leader serves shard ` + k + `"}`))
				return
			}
			_, _ = w.Write([]byte(shards[i]))
			return
		}
		if r.URL.Path != "/sluice/v1/cluster" {
			http.NotFound(w, r)
			return
		}
		rep := `{"node":{"id":1,"role":"leader","term":2,"leader":1},"public":{"http":"127.0.0.1:1"},"peers":[]`
		if v := view(); v != "" {
			rep += `,"view":` + v
		}
		if len(shards) > 0 {
			var s []string
			for k := range shards {
				s = append(s, fmt.Sprintf(`{"shard":%d,"voters":[1,2,3]}`, k))
			}
			rep += `,"shards":[` + strings.Join(s, ",") + `]`
		}
		_, _ = w.Write([]byte(rep + "}"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// `sluice cluster check-stop N` exits 0 when every group N votes in keeps
// a majority of its voters in sync without N, 1 otherwise, naming the
// group that would stop; a group whose view cannot be read is not safe.
func TestClusterCheckStop(t *testing.T) {
	fixed := func(v string) func() string { return func() string { return v } }
	for _, c := range []struct {
		name   string
		view   string
		shards []string
		node   string
		code   int
		want   string
	}{
		{"all in sync", stopView("1:voter+", "2:voter+", "3:voter+"), nil, "2", ExitOK,
			"the cluster: ok: voters 1,2,3, in sync 1,2,3: 2 of its 3 voters would be left in sync, a majority of 2 needed\nsafe to stop node 2\n"},
		{"another voter down", stopView("1:voter+", "2:voter+", "3:voter"), nil, "1", ExitFail,
			"not safe to stop node 1 now: the cluster: 1 of its 3 voters would be left in sync, below the majority of 2"},
		{"the voter already down", stopView("1:voter+", "2:voter+", "3:voter"), nil, "3", ExitOK, "safe to stop node 3"},
		{"five, one down", stopView("1:voter+", "2:voter+", "3:voter", "4:voter+", "5:voter+"), nil, "5", ExitOK, "safe to stop node 5"},
		{"five, two down", stopView("1:voter+", "2:voter", "3:voter", "4:voter+", "5:voter+"), nil, "5", ExitFail, "2 of its 5 voters would be left in sync, below the majority of 3"},
		{"a learner", stopView("1:voter+", "2:voter+", "3:voter", "4:learner+"), nil, "4", ExitOK, "node 4 is not one of its voters"},
		{"the only voter", stopView("1:voter+"), nil, "1", ExitFail, "node 1 is its only voter"},
		{"no view", "", nil, "2", ExitFail, "the cluster: no leader serves its view"},
		{"shards", stopView("1:voter+", "2:voter+", "3:voter+"), []string{"", stopView("1:voter+", "2:voter+", "3:voter+"), stopView("2:voter+", "3:voter")}, "2", ExitFail,
			"shard 0: ok: voters 1,2,3"},
		{"shards, the one that would stop", stopView("1:voter+", "2:voter+", "3:voter+"), []string{"", stopView("1:voter+", "2:voter+", "3:voter+"), stopView("2:voter+", "3:voter")}, "2", ExitFail,
			"not safe to stop node 2 now: shard 2: 0 of its 2 voters would be left in sync, below the majority of 2"},
		{"shards, one without a leader", stopView("1:voter+", "2:voter+", "3:voter+"), []string{"", stopView("1:voter+", "2:voter+", "3:voter+"), ""}, "1", ExitFail,
			"shard 2: no leader serves its view"},
		{"shards, all well", stopView("1:voter+", "2:voter+", "3:voter+"), []string{"", stopView("1:voter+", "2:voter+", "3:voter+"), stopView("2:voter+", "3:voter+", "4:voter+")}, "1", ExitOK,
			"shard 2: ok: voters 2,3,4, in sync 2,3,4: node 1 is not one of its voters\nsafe to stop node 1\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fixture{t: t, url: stopServer(t, fixed(c.view), c.shards...)}
			r := f.run(Cluster, "", "check-stop", c.node)
			if r.code != c.code || !strings.Contains(r.stdout, c.want) {
				t.Errorf("exit %d (want %d), want %q in:\n%s%s", r.code, c.code, c.want, r.stdout, r.stderr)
			}
		})
	}

	// --json: the verdict and every group's.
	f := &fixture{t: t, url: stopServer(t, fixed(stopView("1:voter+", "2:voter+", "3:voter")))}
	r := f.run(Cluster, "", "check-stop", "--json", "1")
	var v struct {
		Node   uint64 `json:"node"`
		Safe   bool   `json:"safe"`
		Groups []struct {
			Shard    int      `json:"shard"`
			Voters   []uint64 `json:"voters"`
			InSync   []uint64 `json:"in_sync"`
			Majority int      `json:"majority"`
			Safe     bool     `json:"safe"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != ExitFail || v.Node != 1 || v.Safe || len(v.Groups) != 1 ||
		v.Groups[0].Majority != 2 || len(v.Groups[0].InSync) != 2 || v.Groups[0].Safe {
		t.Errorf("--json: exit %d, %+v (%v):\n%s", r.code, v, err, r.stdout)
	}

	// --wait: asks again until the node that was down is back in sync.
	var asked atomic.Int32
	f = &fixture{t: t, url: stopServer(t, func() string {
		if asked.Add(1) < 4 {
			return stopView("1:voter+", "2:voter+", "3:voter")
		}
		return stopView("1:voter+", "2:voter+", "3:voter+")
	})}
	r = f.run(Cluster, "", "check-stop", "--wait", "1m", "2")
	if r.code != ExitOK || !strings.Contains(r.stdout, "safe to stop node 2") || strings.Count(r.stderr, "waiting: the cluster: 1 of its 3 voters would be left in sync") != 1 || asked.Load() < 4 {
		t.Errorf("--wait: exit %d after %d asks:\n%s%s", r.code, asked.Load(), r.stdout, r.stderr)
	}
	// … and gives up after its time, with the last verdict.
	f = &fixture{t: t, url: stopServer(t, fixed(stopView("1:voter+", "2:voter+", "3:voter")))}
	r = f.run(Cluster, "", "check-stop", "--wait", "50ms", "2")
	if r.code != ExitFail || !strings.Contains(r.stdout, "not safe to stop node 2 now") {
		t.Errorf("--wait past its time: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}
