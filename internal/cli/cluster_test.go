package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The membership commands refuse bad invocations before calling anything,
// and report the broker's refusal (a single node has no membership
// endpoints) with a failure exit.
func TestClusterMembershipArgumentErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{nil, "missing command (status, add, remove or check-stop)"},
		{[]string{"grow"}, `unknown command "grow"`},
		{[]string{"add"}, "missing argument"},
		{[]string{"add", "4"}, "missing argument"},
		{[]string{"add", "4", "127.0.0.1:7104", "extra"}, `unexpected argument "extra"`},
		{[]string{"add", "four", "127.0.0.1:7104"}, `node id "four" is not a number of 1 or more`},
		{[]string{"add", "0", "127.0.0.1:7104"}, `node id "0" is not a number of 1 or more`},
		{[]string{"add", "4", "127.0.0.1:7104", "--wait", "--wait-timeout", "0s"}, "--wait-timeout must be positive"},
		{[]string{"add", "4", "127.0.0.1:7104", "--wait-timeout", "soon"}, `invalid value "soon"`},
		{[]string{"remove"}, "missing argument"},
		{[]string{"remove", "-1"}, "flag provided but not defined"},
		{[]string{"remove", "x"}, `node id "x" is not a number of 1 or more`},
		{[]string{"remove", "2", "3"}, `unexpected argument "3"`},
		{[]string{"status", "extra"}, `unexpected argument "extra"`},
	} {
		wantExit(t, f.run(Cluster, "", tc.args...), ExitUsage, tc.stderr)
	}
	r := f.run(Cluster, "", "remove", "2")
	if r.code != ExitFail || r.stderr == "" {
		t.Fatalf("remove on a single node: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestStandbyFactor: `cluster add --wait` accepts a learner as done only
// when the leader's view shows it in sync and the voters already number
// the replication factor.
func TestStandbyFactor(t *testing.T) {
	view := func(rf int, members ...viewMember) clusterReport {
		return clusterReport{View: &viewReport{ReplicationFactor: rf, Members: members}}
	}
	v := func(id uint64) viewMember { return viewMember{ID: id, Membership: "voter", InSync: true} }
	l := func(id uint64, sync bool) viewMember { return viewMember{ID: id, Membership: "learner", InSync: sync} }
	for _, c := range []struct {
		name string
		rep  clusterReport
		want int
	}{
		{"no view (a follower that cannot reach the leader)", clusterReport{}, 0},
		{"standby in sync", view(3, v(1), v(2), v(3), l(4, true)), 3},
		{"learner not in sync yet", view(3, v(1), v(2), v(3), l(4, false)), 0},
		{"fewer voters than the factor: it will be promoted", view(3, v(1), v(2), l(4, true)), 0},
		{"the node is a voter (waitVoter's other case)", view(3, v(1), v(2), v(3), v(4)), 0},
		{"no factor reported (an older leader)", view(0, v(1), v(2), v(3), l(4, true)), 0},
	} {
		if got := standbyFactor(c.rep, 4); got != c.want {
			t.Errorf("%s: standbyFactor = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestWaitProgress: while `cluster add --wait` waits, it tells a node the
// leader never heard from (not running, or unreachable: the usual mistake)
// from one catching up and one in sync.
func TestWaitProgress(t *testing.T) {
	ago := int64(300)
	for _, c := range []struct {
		name  string
		rep   clusterReport
		phase string
		line  string
	}{
		{"no view", clusterReport{}, "", ""},
		{"not in the view", clusterReport{View: &viewReport{Members: []viewMember{{ID: 1, ReportedMsAgo: &ago}}}}, "", ""},
		{"never reported", clusterReport{View: &viewReport{Members: []viewMember{{ID: 4, Membership: "learner"}}}},
			"unheard", "has not reported to the leader yet: is it running with join = true"},
		{"catching up", clusterReport{View: &viewReport{Members: []viewMember{{ID: 4, Membership: "learner", Lag: 1200, ReportedMsAgo: &ago}}}},
			"behind", "is a learner, 1200 log entries behind the leader"},
		{"in sync", clusterReport{View: &viewReport{Members: []viewMember{{ID: 4, Membership: "learner", InSync: true, ReportedMsAgo: &ago}}}},
			"in sync", "is a learner in sync with the leader"},
	} {
		phase, line := waitProgress(c.rep, 4)
		if phase != c.phase || !strings.HasPrefix(line, c.line) {
			t.Errorf("%s: %q %q, want %q and a line starting %q", c.name, phase, line, c.phase, c.line)
		}
	}
}

// TestWaitProgressRepeats: `cluster add --wait` prints where the node
// stands when that changes and again once waitProgressEvery has passed on
// its clock, not at every poll.
func TestWaitProgressRepeats(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /sluice/v1/cluster/members":
			_, _ = w.Write([]byte(`{"members":[{"id":1,"raft":"127.0.0.1:11","membership":"voter"},{"id":4,"raft":"127.0.0.1:14","membership":"learner"}]}`))
		case "GET /sluice/v1/cluster":
			_, _ = w.Write([]byte(`{"node":{"id":1,"role":"leader","term":2,"leader":1},
				"peers":[{"id":1,"raft":"127.0.0.1:11","membership":"voter"},{"id":4,"raft":"127.0.0.1:14","membership":"learner"}],
				"view":{"leader":1,"term":2,"replication_factor":3,"members":[
					{"id":1,"membership":"voter","in_sync":true,"reported_ms_ago":0},
					{"id":4,"membership":"learner","lag":9}]}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	lines := func(now func() time.Time) int {
		f := &fixture{t: t, url: srv.URL, now: now}
		r := f.run(Cluster, "", "add", "4", "127.0.0.1:14", "--wait", "--wait-timeout", "300ms")
		if r.code != ExitFail || !strings.Contains(r.stderr, "node 4 is still a learner after waiting 300ms: it has not reported to the leader yet") {
			t.Fatalf("exit %d:\n%s", r.code, r.stderr)
		}
		return len(regexp.MustCompile(`(?m)^node 4 has not reported to the leader yet`).FindAllString(r.stderr, -1))
	}
	fixed := time.Unix(1e9, 0)
	if n := lines(func() time.Time { return fixed }); n != 1 {
		t.Errorf("a clock that stands still: the line printed %d times, want once", n)
	}
	var mu sync.Mutex
	clock := fixed
	if n := lines(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(waitProgressEvery / 2)
		return clock
	}); n < 2 {
		t.Errorf("a clock that moves %v a poll: the line printed %d times, want it repeated", waitProgressEvery/2, n)
	}
}

// TestShardsLag: with several shards, `cluster add --wait` is done only
// once the node is a voter of every shard (a standby: a member of every
// shard), and says which shard it waits for; with placement "subset",
// of shard 0 (the controller places it in the others).
func TestShardsLag(t *testing.T) {
	rep := func(shards ...[2][]uint64) clusterReport {
		var r clusterReport
		for k, sh := range shards {
			r.Shards = append(r.Shards, shardReport{Shard: k, Voters: sh[0], Learners: sh[1]})
		}
		return r
	}
	subset := func(r clusterReport) clusterReport { r.Placement = "subset"; return r }
	vv := [2][]uint64{{1, 2, 4}, nil}
	vl := [2][]uint64{{1, 2, 3}, {4}}
	none := [2][]uint64{{1, 2, 3}, nil}
	for _, c := range []struct {
		name    string
		rep     clusterReport
		standby bool
		want    string
	}{
		{"one shard (no list)", clusterReport{}, false, ""},
		{"a voter everywhere", rep(vv, vv, vv), false, ""},
		{"still a learner in shard 2", rep(vv, vv, vl), false, "a learner in shard 2"},
		{"not yet added to shard 1", rep(vv, none, vv), false, "not a member of shard 1"},
		{"a standby: a learner everywhere", rep(vl, vl, vl), true, ""},
		{"a standby not yet added to shard 2", rep(vl, vl, none), true, "not a member of shard 2"},
		{"placement subset: shard 0 alone counts", subset(rep(vv, none, vl)), false, ""},
		{"placement subset: still a learner in shard 0", subset(rep(vl, vv, vv)), false, "a learner in shard 0"},
	} {
		if got := shardsLag(c.rep, 4, c.standby); got != c.want {
			t.Errorf("%s: shardsLag = %q, want %q", c.name, got, c.want)
		}
	}
}

// `cluster status` shows each member's clock offset from the cluster's
// clock (the leader's view) in a CLOCK column, "-" for a member that has
// not measured yet.
func TestClusterStatusClock(t *testing.T) {
	const report = `{"node":{"id":1,"role":"leader","term":3,"leader":1,"commit":9,"applied":9,"clock_offset_ms":0},
		"public":{"http":"127.0.0.1:1"},
		"peers":[{"id":1,"raft":"127.0.0.1:11","membership":"voter"},{"id":2,"raft":"127.0.0.1:12","membership":"voter"},{"id":3,"raft":"127.0.0.1:13","membership":"voter"}],
		"view":{"leader":1,"term":3,"last_index":9,"replication_factor":3,"members":[
			{"id":1,"membership":"voter","match":9,"in_sync":true,"clock_offset_ms":0},
			{"id":2,"membership":"voter","match":9,"in_sync":true,"clock_offset_ms":-0.4},
			{"id":3,"membership":"voter","match":9,"in_sync":true,"clock_offset_ms":3012.5},
			{"id":4,"membership":"learner","match":0}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sluice/v1/cluster" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(report))
	}))
	defer srv.Close()
	f := &fixture{t: t, url: srv.URL}
	r := f.run(Cluster, "", "status")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for id, clk := range map[string]string{"1": "0.0ms", "2": "-0.4ms", "3": "3012.5ms"} {
		if !regexp.MustCompile(`(?m)^` + id + ` +\S+ +voter +\S+ +9 +0 +yes +` + regexp.QuoteMeta(clk) + ` `).MatchString(r.stdout) {
			t.Errorf("member %s: want CLOCK %s after IN-SYNC:\n%s", id, clk, r.stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^ID +RAFT +MEMBERSHIP +LEADER +MATCH +LAG +IN-SYNC +CLOCK `).MatchString(r.stdout) {
		t.Errorf("want a CLOCK column after IN-SYNC:\n%s", r.stdout)
	}
}

// `cluster status` of a node with several shards lists each shard's
// leader after the members, "stopped" for a shard whose Raft node here
// stopped on a failed write, "not-held" for one this node holds no copy
// of (placement "subset": as its leader recorded it), and says the node
// is stopped.
func TestClusterStatusShards(t *testing.T) {
	const report = `{"node":{"id":2,"role":"follower","term":3,"leader":1,"commit":9,"applied":9,"stopped":true},
		"public":{"http":"127.0.0.1:1"},
		"peers":[{"id":1,"raft":"127.0.0.1:11","membership":"voter"},{"id":2,"raft":"127.0.0.1:12","membership":"voter"}],
		"shards":[{"shard":0,"role":"follower","term":3,"leader":1,"commit":9,"applied":9,"voters":[1,2]},
			{"shard":1,"role":"leader","term":5,"leader":2,"commit":40,"applied":40,"voters":[1,2],"learners":[4]},
			{"shard":2,"role":"candidate","term":7,"leader":0,"commit":12,"applied":11,"voters":[1,2]},
			{"shard":3,"role":"follower","term":2,"leader":0,"commit":5,"applied":5,"voters":[1,2],"stopped":true},
			{"shard":4,"role":"not-held","term":6,"leader":3,"commit":0,"applied":0,"voters":[1,3],"learners":[5],"not_held":true}]}`
	r := statusOf(t, report)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, re := range []string{`(?m)^SHARD +LEADER +TERM +THIS-NODE +COMMIT +APPLIED +VOTERS +LEARNERS$`, `(?m)^0 +1 +3 +follower +9 +9 +1,2 +-$`, `(?m)^1 +2 +5 +leader +40 +40 +1,2 +4$`, `(?m)^2 +none +7 +candidate +12 +11 +1,2 +-$`, `(?m)^3 +none +2 +stopped +5 +5 +1,2 +-$`, `(?m)^4 +3 +6 +not-held +- +- +1,3 +5$`, `(?m)^stopped: a write of this node's Raft log`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("want %s in:\n%s", re, r.stdout)
		}
	}
}

// `cluster status --shard K` prints shard K's view: its leader and each
// member's replication progress, read from /sluice/v1/cluster/shards/K.
func TestClusterStatusOneShard(t *testing.T) {
	const view = `{"leader":3,"term":6,"last_index":120,"replication_factor":3,"members":[
		{"id":1,"raft":"127.0.0.1:11","membership":"voter","match":120,"lag":0,"in_sync":true},
		{"id":3,"raft":"127.0.0.1:13","membership":"voter","match":120,"lag":0,"in_sync":true,"role":"leader"},
		{"id":5,"raft":"127.0.0.1:15","membership":"learner","match":40,"lag":80,"in_sync":false}]}`
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(view))
	}))
	defer srv.Close()
	f := &fixture{t: t, url: srv.URL}
	r := f.run(Cluster, "", "status", "--shard", "4")
	if r.code != ExitOK || asked != "/sluice/v1/cluster/shards/4" {
		t.Fatalf("exit %d, asked %q: %s", r.code, asked, r.stderr)
	}
	for _, re := range []string{`(?m)^shard 4: leader 3, term 6, last index 120, replication factor 3$`, `(?m)^ID +RAFT +MEMBERSHIP +LEADER +MATCH +LAG +IN-SYNC$`,
		`(?m)^1 +127.0.0.1:11 +voter +- +120 +0 +yes$`, `(?m)^3 +127.0.0.1:13 +voter +yes +120 +0 +yes$`, `(?m)^5 +127.0.0.1:15 +learner +- +40 +80 +no$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("want %s in:\n%s", re, r.stdout)
		}
	}
}

// `cluster status` says how the members carry their links: one word when
// they agree, each member's during a switch-over of [cluster] encrypt.
func TestClusterStatusLinks(t *testing.T) {
	for _, c := range []struct {
		links [3]string
		want  string
	}{
		{[3]string{"tls", "tls", "tls"}, "links between nodes: tls\n"},
		{[3]string{"plain", "accept-both, dial plain", ""}, "links between nodes: node 1 plain; node 2 accept-both, dial plain (a switch-over of [cluster] encrypt"},
		{[3]string{"accept-both, dial tls", "accept-both, dial tls", "accept-both, dial tls"}, "links between nodes: node 1 accept-both, dial tls; node 2 accept-both, dial tls; node 3 accept-both, dial tls (a switch-over"},
	} {
		report := fmt.Sprintf(`{"node":{"id":1,"role":"leader","term":3,"leader":1,"commit":9,"applied":9},
			"public":{"http":"127.0.0.1:1"},
			"peers":[{"id":1,"raft":"127.0.0.1:11","membership":"voter"},{"id":2,"raft":"127.0.0.1:12","membership":"voter"},{"id":3,"raft":"127.0.0.1:13","membership":"voter"}],
			"view":{"leader":1,"term":3,"last_index":9,"replication_factor":3,"members":[
				{"id":1,"membership":"voter","match":9,"in_sync":true,"links":%q},
				{"id":2,"membership":"voter","match":9,"in_sync":true,"links":%q},
				{"id":3,"membership":"voter","match":9,"in_sync":true,"links":%q}]}}`, c.links[0], c.links[1], c.links[2])
		r := statusOf(t, report)
		if r.code != ExitOK || !strings.Contains(r.stdout, c.want) {
			t.Errorf("links %q: exit %d, want %q in:\n%s%s", c.links, r.code, c.want, r.stdout, r.stderr)
		}
	}
}

// statusOf runs `cluster status` against a server that answers report
// (JSON) to every request.
func statusOf(t *testing.T, report string) result {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(report))
	}))
	defer srv.Close()
	f := &fixture{t: t, url: srv.URL}
	return f.run(Cluster, "", "status")
}

// `cluster status` prints the warnings of the node's report
// (internal/cluster TestReportWarnings says which it finds), each after
// "warning: ", except one that this node is stopped, which it says on its
// own line first.
func TestClusterStatusWarnings(t *testing.T) {
	const report = `{"node":{"id":2,"role":"follower","term":3,"leader":1,"stopped":true},"public":{"http":"127.0.0.1:1"},
		"peers":[{"id":1,"raft":"127.0.0.1:11","membership":"voter"},{"id":2,"raft":"127.0.0.1:12","membership":"voter"}],
		"warnings":[{"kind":"clock_skew","nodes":[3],"message":"node 3's clock is +3012 ms off the cluster's"},
			{"kind":"stopped","nodes":[2],"message":"node 2 is stopped: a write failed"},
			{"kind":"stopped","nodes":[1],"message":"node 1 is stopped: a write failed"},
			{"kind":"two_voters","message":"the cluster has 2 voters"}]}`
	r := statusOf(t, report)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"\nwarning: node 3's clock is +3012 ms off the cluster's\n", "\nwarning: node 1 is stopped: a write failed\n",
		"\nwarning: the cluster has 2 voters\n", "\nstopped: a write of this node's Raft log"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q in:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "node 2 is stopped") {
		t.Errorf("this node's stop said twice:\n%s", r.stdout)
	}
}
