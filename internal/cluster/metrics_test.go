package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// scrape GETs /metrics from n and returns each sample line's value by its
// series ("name{labels}"), and how many times each series appeared.
func scrape(t *testing.T, n *Node) (map[string]float64, map[string]int) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body) // for the message only
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	vals, seen := map[string]float64{}, map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		vals[line[:i]] = v
		seen[line[:i]]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vals, seen
}

// TestRaftMetrics: GET /metrics on each node answers for that node: its
// Raft term, role, leader, commit and applied index and the log's bounds;
// the leader adds each member's match index, lag and in-sync flag, the
// voters in sync, and the engine's metrics (a queue's series appear there
// only, once); a follower adds its own process's. No series appears twice
// in one scrape.
func TestRaftMetrics(t *testing.T) {
	nodes := threeNodes(t, func(*server.Options) {})
	var leader *Node
	for _, n := range nodes {
		if st := n.raft.Status(); st.Leader == st.ID {
			leader = n
		}
	}
	ctx := context.Background()
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + leader.HTTPAddr()), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("watched")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	lst := leader.raft.Status()
	// The send is committed: wait until every node has applied it, so
	// the figures below are settled.
	poll.CheckFor(t, 20*time.Second, poll.True("every node applied the send", func() bool {
		for _, n := range nodes {
			if n.raft.Status().Applied < lst.Commit {
				return false
			}
		}
		return true
	}))

	for _, n := range nodes {
		st := n.raft.Status()
		isLeader := n == leader
		vals, seen := scrape(t, n)
		for series, k := range seen {
			if k > 1 {
				t.Errorf("node %d: %s appears %d times", st.ID, series, k)
			}
		}
		want := map[string]float64{
			"sluice_raft_term":      float64(lst.Term),
			"sluice_raft_leader_id": float64(lst.ID),
			// Three boot members, all voters; no node was added.
			"sluice_raft_voters":             3,
			"sluice_raft_learners":           0,
			"sluice_raft_stopped":            0,
			"sluice_raft_replication_factor": 3,
			// Every node caught up from the log: no copy under way.
			`sluice_raft_snapshots_in_flight{direction="send"}`:    0,
			`sluice_raft_snapshots_in_flight{direction="receive"}`: 0,
			`sluice_raft_snapshots_total{direction="sent"}`:        0,
			`sluice_raft_snapshots_total{direction="installed"}`:   0,
		}
		role := "follower"
		if isLeader {
			role = "leader"
		}
		for _, r := range roles {
			want[fmt.Sprintf("sluice_raft_role{role=%q}", r)] = map[bool]float64{true: 1}[r == role]
		}
		for series, v := range want {
			if got, ok := vals[series]; !ok || got != v {
				t.Errorf("node %d (%s): %s = %v (present %t), want %v", st.ID, role, series, got, ok, v)
			}
		}
		commit, applied := vals["sluice_raft_commit_index"], vals["sluice_raft_applied_index"]
		if commit < float64(lst.Commit) || applied < float64(lst.Commit) || vals["sluice_raft_apply_lag_entries"] != commit-applied {
			t.Errorf("node %d: commit %v, applied %v, apply lag %v; want both at least %d and the lag their difference",
				st.ID, commit, applied, vals["sluice_raft_apply_lag_entries"], lst.Commit)
		}
		if vals["sluice_raft_log_last_index"] < commit || vals["sluice_raft_log_first_index"] < 1 {
			t.Errorf("node %d: log bounds %v..%v, commit %v", st.ID, vals["sluice_raft_log_first_index"], vals["sluice_raft_log_last_index"], commit)
		}
		if vals["sluice_raft_leader_changes_total"] < 1 {
			t.Errorf("node %d: sluice_raft_leader_changes_total %v, want at least the first leader", st.ID, vals["sluice_raft_leader_changes_total"])
		}
		if v, ok := vals["sluice_raft_proposals_failed_total"]; !ok || v != 0 {
			t.Errorf("node %d: sluice_raft_proposals_failed_total %v (present %t), want 0", st.ID, v, ok)
		}
		_, queue := vals[`sluice_queue_visible_messages{queue="watched"}`]
		_, goStats := vals["go_goroutines"]
		for _, id := range []int{1, 2, 3} {
			match, hasMatch := vals[fmt.Sprintf("sluice_raft_peer_match_index{peer=\"%d\"}", id)]
			lag, hasLag := vals[fmt.Sprintf("sluice_raft_peer_lag_entries{peer=\"%d\"}", id)]
			inSync, hasInSync := vals[fmt.Sprintf("sluice_raft_peer_in_sync{peer=\"%d\"}", id)]
			if hasMatch != isLeader || hasLag != isLeader || hasInSync != isLeader {
				t.Errorf("node %d (%s): peer %d match/lag/in-sync present %t/%t/%t", st.ID, role, id, hasMatch, hasLag, hasInSync)
			}
			if isLeader && inSync != 1 {
				t.Errorf("leader: peer %d in sync %v, want 1 (every node applied the send)", id, inSync)
			}
			if isLeader && lag != vals["sluice_raft_log_last_index"]-match {
				t.Errorf("leader: peer %d lag %v, match %v, last %v", id, lag, match, vals["sluice_raft_log_last_index"])
			}
		}
		if v, ok := vals["sluice_raft_voters_in_sync"]; ok != isLeader || (isLeader && v != 3) {
			t.Errorf("node %d (%s): sluice_raft_voters_in_sync %v (present %t), want 3 on the leader only", st.ID, role, v, ok)
		}
		if queue != isLeader || !goStats {
			t.Errorf("node %d (%s): the queue's series present %t, go_goroutines present %t", st.ID, role, queue, goStats)
		}
		builds := 0
		for series := range vals {
			if strings.HasPrefix(series, "sluice_build_info{") {
				builds++
			}
		}
		if builds != 1 {
			t.Errorf("node %d (%s): %d sluice_build_info series, want 1", st.ID, role, builds)
		}
	}
}

// TestRaftMetricsCountLearners: sluice_raft_voters and
// sluice_raft_learners count the applied membership by kind.
func TestRaftMetricsCountLearners(t *testing.T) {
	st := raftstore.Status{ID: 1, Role: "leader", Members: []raftstore.Member{
		{ID: 1, Membership: raftstore.Voter}, {ID: 2, Membership: raftstore.Voter},
		{ID: 3, Membership: raftstore.Voter}, {ID: 4, Membership: raftstore.Learner},
	}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newRaftCollector(func() []raftstore.Status { return []raftstore.Status{st} }, false))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if got["sluice_raft_voters"] != 3 || got["sluice_raft_learners"] != 1 {
		t.Fatalf("voters %v, learners %v; want 3 and 1", got["sluice_raft_voters"], got["sluice_raft_learners"])
	}
}

// TestRaftMetricsPerShard: with several shards every sluice_raft_* series
// carries its shard, each shard's status its own; a shard the node holds
// no copy of (placement "subset": a zero status) has none.
func TestRaftMetricsPerShard(t *testing.T) {
	sts := []raftstore.Status{{ID: 2, Role: "follower", Term: 4, Leader: 1}, {ID: 2, Role: "leader", Term: 9, Leader: 2, Match: map[uint64]uint64{1: 5, 2: 7}, LastIndex: 7}, {}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newRaftCollector(func() []raftstore.Status { return sts }, true))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() // labels come sorted by name
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"sluice_raft_term,shard=0": 4, "sluice_raft_term,shard=1": 9,
		"sluice_raft_leader_id,shard=0": 1, "sluice_raft_leader_id,shard=1": 2,
		"sluice_raft_role,role=leader,shard=1": 1, "sluice_raft_role,role=leader,shard=0": 0,
		"sluice_raft_peer_lag_entries,peer=1,shard=1": 2,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if _, ok := got["sluice_raft_term"]; ok {
		t.Error("an unlabelled sluice_raft_term next to the sharded ones")
	}
	for key := range got {
		if strings.Contains(key, "shard=2") {
			t.Errorf("%s: a series for a shard not held", key)
		}
	}
}
