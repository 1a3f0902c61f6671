package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/brokertest/promtool"
)

// The shipped Prometheus rules (docs/prometheus/sluice-alerts.yml) are
// checked here without promtool and without a YAML library (none is in
// go.mod): a small parser for the block-style subset the file uses, a
// structural check of every rule, and a check that every sluice_ metric an
// expression names is one this broker exports. The cluster group's metrics
// are exported by cluster nodes only (internal/cluster), whose test checks
// them against a real cluster's scrape (TestAlertRulesOnARealCluster).
// TestPrometheusRulesPromtool then has the real promtool check the file and
// run its unit tests (sluice-alerts.test.yml).

const rulesFile = "../../docs/prometheus/sluice-alerts.yml"

// clusterGroup is the rule group of cluster mode's metrics.
const clusterGroup = "sluice-cluster"

func TestPrometheusRules(t *testing.T) {
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parseYAML(string(src))
	if err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	exported := exportedNames(t)
	top, ok := doc.(map[string]any)
	if !ok || len(top) != 1 {
		t.Fatalf("top level must be a map with only groups, got %T %v", doc, keys(top))
	}
	groups, ok := top["groups"].([]any)
	if !ok || len(groups) == 0 {
		t.Fatal("groups must be a non-empty list")
	}
	groupNames, alertNames := map[string]bool{}, map[string]bool{}
	metricName := regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	alertName := regexp.MustCompile(`^Sluice[A-Z][A-Za-z0-9]*$`)
	duration := regexp.MustCompile(`^[0-9]+(ms|s|m|h|d|w|y)$`)
	rangeSel := regexp.MustCompile(`\[([^\]]*)\]`)
	nrules := 0
	for gi, g := range groups {
		group, ok := g.(map[string]any)
		if !ok {
			t.Fatalf("groups[%d] is not a map", gi)
		}
		checkKeys(t, fmt.Sprintf("groups[%d]", gi), group, []string{"name", "rules"}, []string{"interval"})
		name, _ := group["name"].(string)
		if name == "" || groupNames[name] {
			t.Errorf("groups[%d]: name %q empty or repeated", gi, name)
		}
		groupNames[name] = true
		rules, ok := group["rules"].([]any)
		if !ok || len(rules) == 0 {
			t.Fatalf("group %s: rules must be a non-empty list", name)
		}
		for ri, r := range rules {
			nrules++
			rule, ok := r.(map[string]any)
			where := fmt.Sprintf("group %s rule %d", name, ri)
			if !ok {
				t.Fatalf("%s is not a map", where)
			}
			checkKeys(t, where, rule, []string{"alert", "expr", "labels", "annotations"}, []string{"for", "keep_firing_for"})
			alert, _ := rule["alert"].(string)
			if !alertName.MatchString(alert) || alertNames[alert] {
				t.Errorf("%s: alert name %q is not SluiceCamelCase or is repeated", where, alert)
			}
			alertNames[alert] = true
			where = "alert " + alert
			if f, ok := rule["for"]; ok && !duration.MatchString(fmt.Sprint(f)) {
				t.Errorf("%s: for %q is not a duration", where, f)
			}
			labels, _ := rule["labels"].(map[string]any)
			switch labels["severity"] {
			case "page", "critical", "warning":
			default:
				t.Errorf("%s: severity %v, want page, critical or warning", where, labels["severity"])
			}
			ann, _ := rule["annotations"].(map[string]any)
			for _, k := range []string{"summary", "description"} {
				if s, _ := ann[k].(string); strings.TrimSpace(s) == "" {
					t.Errorf("%s: annotation %s missing", where, k)
				} else if strings.Count(s, "{{") != strings.Count(s, "}}") {
					t.Errorf("%s: unbalanced template in %s: %q", where, k, s)
				}
			}
			expr, _ := rule["expr"].(string)
			if err := balanced(expr); err != nil {
				t.Errorf("%s: expr %q: %v", where, expr, err)
			}
			for _, m := range rangeSel.FindAllStringSubmatch(expr, -1) {
				if !duration.MatchString(m[1]) {
					t.Errorf("%s: range [%s] is not a duration", where, m[1])
				}
			}
			names := metricName.FindAllString(expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: expr %q names no sluice_ metric", where, expr)
			}
			for _, n := range names {
				if name != clusterGroup && !exported[n] {
					t.Errorf("%s: expr names %s, which Sluice does not export", where, n)
				}
			}
		}
	}
	// The rules the brief and dlq-practice §8 call for, and cluster mode's
	// loss of fault tolerance.
	for _, want := range []string{"SluiceDLQGrowth", "SluiceDLQDepthWarning", "SluiceDLQDepthCritical", "SluiceOldestMessageAge", "SluiceRedeliverySpike", "SluiceStoreSyncSlow",
		"SluiceClusterNoLeader", "SluiceClusterNoFaultTolerance"} {
		if !alertNames[want] {
			t.Errorf("rule %s missing", want)
		}
	}
	if !groupNames[clusterGroup] {
		t.Errorf("group %s missing", clusterGroup)
	}
	t.Logf("%d groups, %d rules", len(groups), nrules)
}

// TestPrometheusRulesPromtool: Prometheus's own promtool accepts the rules
// file and passes its unit tests (docs/prometheus/sluice-alerts.test.yml:
// each cluster rule fires on the series it is meant for, and not on a
// healthy cluster's).
func TestPrometheusRulesPromtool(t *testing.T) {
	dir := filepath.Dir(rulesFile)
	if out, ok := promtool.Run(t, dir, "check", "rules", filepath.Base(rulesFile)); !ok {
		t.Fatalf("promtool check rules:\n%s", out)
	}
	if out, ok := promtool.Run(t, dir, "test", "rules", "sluice-alerts.test.yml"); !ok {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// exportedNames returns every sample name the broker exports: the metrics
// package's and the alert manager's, with the _bucket, _sum and _count
// series of histograms.
func exportedNames(t *testing.T) map[string]bool {
	m := New()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		m.QueueCollector(nil).Describe(ch) // Describe reads no engine
		m.walSync.Describe(ch)
		alerts.New(nil, nil, alerts.DefaultOptions(), nil, nil).Collector().Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		name := fq.FindStringSubmatch(d.String())
		if name == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		out[name[1]] = true
		if strings.HasSuffix(name[1], "_seconds") {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name[1]+s] = true
			}
		}
	}
	if !out["sluice_dead_lettered_total"] || !out["sluice_alert_firing"] {
		t.Fatalf("descriptions incomplete: %v", out)
	}
	return out
}

func checkKeys(t *testing.T, where string, m map[string]any, required, optional []string) {
	t.Helper()
	allowed := map[string]bool{}
	for _, k := range required {
		allowed[k] = true
		if _, ok := m[k]; !ok {
			t.Errorf("%s: %s missing", where, k)
		}
	}
	for _, k := range optional {
		allowed[k] = true
	}
	for k := range m {
		if !allowed[k] {
			t.Errorf("%s: unknown key %s", where, k)
		}
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// balanced checks (), [] and {} nesting and closed string literals.
func balanced(s string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	for i, c := range s {
		switch {
		case quote != 0:
			if c == quote && (i == 0 || s[i-1] != '\\') {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case pairs[c] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				return fmt.Errorf("unbalanced %q at %d", c, i)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", append(stack, quote))
	}
	return nil
}

// parseYAML parses the block-style YAML subset the rules file uses: maps,
// lists ("- "), plain, single- and double-quoted scalars, and full-line
// comments. Anything else (tabs, flow collections, anchors, block scalars,
// inline comments) is an error rather than a guess.
func parseYAML(src string) (any, error) {
	var lines []yline
	for i, raw := range strings.Split(src, "\n") {
		if strings.Contains(raw, "\t") {
			return nil, fmt.Errorf("line %d: tab", i+1)
		}
		text := strings.TrimRight(raw, " \r")
		trimmed := strings.TrimLeft(text, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		lines = append(lines, yline{no: i + 1, indent: len(text) - len(trimmed), text: trimmed})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("empty document")
	}
	p := &yparser{lines: lines}
	v, err := p.node(lines[0].indent)
	if err == nil && p.i < len(lines) {
		err = fmt.Errorf("line %d: unexpected indentation", lines[p.i].no)
	}
	return v, err
}

type yline struct {
	no, indent int
	text       string
}

type yparser struct {
	lines []yline
	i     int
}

var mapKey = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]*):(?: (.*))?$`)

// node parses the map, list or scalar whose lines start at indent.
func (p *yparser) node(indent int) (any, error) {
	l := p.lines[p.i]
	switch {
	case l.indent != indent:
		return nil, fmt.Errorf("line %d: indentation %d, want %d", l.no, l.indent, indent)
	case l.text == "-" || strings.HasPrefix(l.text, "- "):
		return p.list(indent)
	case mapKey.MatchString(l.text):
		return p.mapping(indent)
	}
	p.i++
	return scalar(l)
}

func (p *yparser) list(indent int) ([]any, error) {
	var out []any
	for p.i < len(p.lines) && p.lines[p.i].indent == indent && strings.HasPrefix(p.lines[p.i].text+" ", "- ") {
		l := p.lines[p.i]
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		var v any
		var err error
		if rest == "" {
			p.i++
			if p.i >= len(p.lines) || p.lines[p.i].indent <= indent {
				return nil, fmt.Errorf("line %d: empty list item", l.no)
			}
			v, err = p.node(p.lines[p.i].indent)
		} else {
			// "- key: value" opens a map whose keys are aligned with key.
			p.lines[p.i] = yline{no: l.no, indent: l.indent + len(l.text) - len(rest), text: rest}
			v, err = p.node(p.lines[p.i].indent)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (p *yparser) mapping(indent int) (map[string]any, error) {
	out := map[string]any{}
	for p.i < len(p.lines) && p.lines[p.i].indent == indent {
		l := p.lines[p.i]
		m := mapKey.FindStringSubmatch(l.text)
		if m == nil {
			return nil, fmt.Errorf("line %d: want key: value, got %q", l.no, l.text)
		}
		key, rest := m[1], m[2]
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %s", l.no, key)
		}
		p.i++
		if rest != "" {
			v, err := scalar(yline{no: l.no, text: rest})
			if err != nil {
				return nil, err
			}
			out[key] = v
			continue
		}
		if p.i >= len(p.lines) || p.lines[p.i].indent <= indent {
			return nil, fmt.Errorf("line %d: %s has no value", l.no, key)
		}
		v, err := p.node(p.lines[p.i].indent)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	return out, nil
}

func scalar(l yline) (any, error) {
	s := l.text
	switch {
	case strings.HasPrefix(s, `"`):
		v, err := strconv.Unquote(s)
		if err != nil {
			return nil, fmt.Errorf("line %d: bad double-quoted string %s", l.no, s)
		}
		return v, nil
	case strings.HasPrefix(s, "'"):
		if len(s) < 2 || !strings.HasSuffix(s, "'") {
			return nil, fmt.Errorf("line %d: unclosed single-quoted string", l.no)
		}
		inner := s[1 : len(s)-1]
		if strings.Contains(strings.ReplaceAll(inner, "''", ""), "'") {
			return nil, fmt.Errorf("line %d: bad single-quoted string", l.no)
		}
		return strings.ReplaceAll(inner, "''", "'"), nil
	case strings.ContainsAny(s[:1], "[{&*!|>%@`"):
		return nil, fmt.Errorf("line %d: unsupported YAML construct %q", l.no, s)
	case strings.Contains(s, " #"):
		return nil, fmt.Errorf("line %d: inline comment (not supported here)", l.no)
	case strings.Contains(s, ": "):
		return nil, fmt.Errorf("line %d: plain scalar with \": \" must be quoted", l.no)
	}
	return s, nil
}

func TestParseYAMLSubset(t *testing.T) {
	doc, err := parseYAML(`
# comment
a: 1
b:
  - x: "q\"uoted"
    y: 'it''s'
  - plain
c:
  d: e
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(doc); got != `map[a:1 b:[map[x:q"uoted y:it's] plain] c:map[d:e]]` {
		t.Fatalf("parsed %s", got)
	}
	for _, bad := range []string{"a: 1\na: 2", "a:\n\tb: 1", "a: [1, 2]", "a: x # c", "a:\n  b: 1\n c: 2", "a: b: c", "a:"} {
		if _, err := parseYAML(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
