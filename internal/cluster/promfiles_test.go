package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/brokertest/promtool"
)

// rulesFile holds the alerting rules Sluice ships; its group
// "sluice-cluster" reads the metrics of this package.
const rulesFile = "../../docs/prometheus/sluice-alerts.yml"

// clusterRuleMetrics returns the sluice_ metric names the rules of the
// "sluice-cluster" group name (the group is the file's last).
func clusterRuleMetrics(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	_, group, ok := strings.Cut(string(src), "- name: sluice-cluster\n")
	if !ok {
		t.Fatalf("%s has no group sluice-cluster", rulesFile)
	}
	var names []string
	for _, line := range strings.Split(group, "\n") {
		if expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr: "); ok {
			names = append(names, regexp.MustCompile(`\bsluice_[a-z0-9_]+`).FindAllString(expr, -1)...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestAlertRulesOnARealCluster feeds the shipped cluster rules what the
// nodes of a real cluster (three nodes, three shards) answer on /metrics,
// and has promtool evaluate them: every metric the rules name is exported
// under the labels they match on; a healthy cluster fires none of them;
// with one node stopped, each shard's leader reports it out of sync and
// each shard has lost its fault tolerance — exactly those alerts fire,
// once per shard (the leader's series, not the followers').
func TestAlertRulesOnARealCluster(t *testing.T) {
	promtool.Path(t) // skip (or fail in CI) before starting a cluster
	nodes, stop := shardedNodes(t)
	want := clusterRuleMetrics(t)
	if len(want) < 10 {
		t.Fatalf("the cluster rules name %d metrics: %v", len(want), want)
	}
	var healthy map[int]map[string]float64
	poll.CheckFor(t, 20*time.Second, func() error {
		healthy = clusterSamples(t, nodes)
		var missing []string
		for _, name := range want {
			if !exportedBy(healthy, name) {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no node exports %v", missing)
		}
		return nil
	})
	evaluate(t, healthy, "healthy", nil)

	if err := stop(2); err != nil {
		t.Fatalf("stopping node 3: %v", err)
	}
	live := nodes[:2]
	var down map[int]map[string]float64
	poll.CheckFor(t, 20*time.Second, func() error {
		down = clusterSamples(t, live)
		for k := range 3 {
			key := fmt.Sprintf(`sluice_raft_peer_in_sync{peer="3",shard="%d"}`, k)
			seen := false
			for _, vals := range down {
				if v, ok := vals[key]; ok {
					if v != 0 {
						return fmt.Errorf("shard %d's leader still has node 3 in sync", k)
					}
					seen = true
				}
			}
			if !seen {
				return fmt.Errorf("no leader of shard %d among the nodes left", k)
			}
		}
		return nil
	})
	var fire []string
	for k := range 3 {
		fire = append(fire, fmt.Sprintf(`{alertname="SluiceClusterNoFaultTolerance",shard="%d"}`, k),
			fmt.Sprintf(`{alertname="SluiceRaftMemberNotInSync",shard="%d"}`, k))
	}
	evaluate(t, down, "node3down", fire)
}

// clusterSamples scrapes each of nodes (node i+1 at index i) and returns
// its samples of the cluster's own metrics (sluice_raft_*,
// sluice_cluster_*, sluice_disk_*), by series.
func clusterSamples(t *testing.T, nodes []*Node) map[int]map[string]float64 {
	t.Helper()
	out := map[int]map[string]float64{}
	for i, n := range nodes {
		vals, _ := scrape(t, n)
		out[i+1] = map[string]float64{}
		for series, v := range vals {
			if strings.HasPrefix(series, "sluice_raft_") || strings.HasPrefix(series, "sluice_cluster_") || strings.HasPrefix(series, "sluice_disk_") {
				out[i+1][series] = v
			}
		}
	}
	return out
}

// exportedBy reports whether any node's samples include metric name.
func exportedBy(byNode map[int]map[string]float64, name string) bool {
	for _, vals := range byNode {
		for s := range vals {
			if s == name || strings.HasPrefix(s, name+"{") {
				return true
			}
		}
	}
	return false
}

// TestGrafanaClusterPanels: every metric the shipped Grafana dashboard's
// cluster panels (titled "Cluster: ") query is exported by the nodes of a
// real cluster (internal/server TestGrafanaDashboard checks the other
// panels against a single broker).
func TestGrafanaClusterPanels(t *testing.T) {
	data, err := os.ReadFile("../../docs/prometheus/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{} // metric -> the panels that query it
	for _, p := range dash.Panels {
		if !strings.HasPrefix(p.Title, "Cluster: ") {
			continue
		}
		for _, tg := range p.Targets {
			for _, n := range regexp.MustCompile(`\bsluice_[a-z0-9_]+`).FindAllString(tg.Expr, -1) {
				names[n] = append(names[n], p.Title)
			}
		}
	}
	if len(names) < 8 {
		t.Fatalf("the cluster panels query %d metrics: %v", len(names), names)
	}
	nodes, _ := shardedNodes(t)
	poll.CheckFor(t, 20*time.Second, func() error {
		got := clusterSamples(t, nodes)
		for n, panels := range names {
			if !exportedBy(got, n) {
				return fmt.Errorf("no node exports %s (panels %q)", n, panels)
			}
		}
		return nil
	})
}

// evaluate has promtool hold each node's samples (instance "nodeN", job
// "sluice") for 40 minutes of evaluations, and checks that at minute 30
// the cluster rules firing, counted by alert and shard, are exactly fire
// (each once).
func evaluate(t *testing.T, byNode map[int]map[string]float64, name string, fire []string) {
	t.Helper()
	var b strings.Builder
	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "rule_files:\n  - %q\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n", abs)
	for i := 1; i <= 3; i++ {
		vals, ok := byNode[i]
		if !ok {
			continue // a stopped node: no scrape
		}
		series := make([]string, 0, len(vals))
		for s := range vals {
			series = append(series, s)
		}
		slices.Sort(series)
		target := fmt.Sprintf(`instance="node%d",job="sluice"`, i)
		for _, s := range series {
			labelled := s + "{" + target + "}"
			if name, labels, ok := strings.Cut(s, "{"); ok {
				labelled = name + "{" + target + "," + labels
			}
			fmt.Fprintf(&b, "      - series: %q\n        values: '%sx40'\n", labelled, strconv.FormatFloat(vals[s], 'f', -1, 64))
		}
	}
	fmt.Fprintf(&b, "    promql_expr_test:\n      - expr: count by (alertname, shard) (ALERTS{alertstate=\"firing\",alertname=~\"SluiceCluster.*|SluiceRaft.*\"})\n        eval_time: 30m\n        exp_samples:")
	if len(fire) == 0 {
		b.WriteString(" []\n")
	} else {
		b.WriteString("\n")
		for _, f := range fire {
			fmt.Fprintf(&b, "          - labels: %q\n            value: 1\n", f)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name+".yml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := promtool.Run(t, dir, "test", "rules", name+".yml"); !ok {
		t.Fatalf("%s: the cluster rules on the nodes' /metrics:\n%s", name, out)
	}
}
