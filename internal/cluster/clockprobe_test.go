package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/testlog"
)

// TestProbedAdjustment: with any voter's estimate of the cluster's clock
// the earliest wins; without, the median of the wall clocks (this node's
// own as 0) when a majority answered, the earlier middle value for an even
// count; each erring late by its uncertainty; answers less certain than
// offsetMaxUncertainty left out unless there is no majority without them;
// fewer than a majority: no verdict.
func TestProbedAdjustment(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	for _, tc := range []struct {
		name    string
		answers []probed
		voters  int
		want    time.Duration
		ok      bool
	}{
		{"estimates: the earliest", []probed{{wall: 0, est: -20 * s, hasEst: true}, {wall: 5 * s, est: -20*s - 3*ms, hasEst: true}}, 3, -20*s - 3*ms, true},
		{"one estimate is enough", []probed{{wall: -20 * s, est: -20*s - ms, hasEst: true}}, 5, -20*s - ms, true},
		{"odd: the median", []probed{{wall: -20 * s}, {wall: -19 * s}}, 3, -19 * s, true},
		{"odd: this node in the middle", []probed{{wall: -20 * s}, {wall: 4 * s}}, 3, 0, true},
		{"even: the earlier middle value", []probed{{wall: -20 * s}}, 3, -20 * s, true},
		{"even, this node behind: its own", []probed{{wall: 20 * s}}, 3, 0, true},
		{"errs late by the uncertainty", []probed{{wall: -20 * s, uncertainty: 2 * ms}, {wall: -20 * s, uncertainty: 4 * ms}}, 3, -20*s - 2*ms, true},
		{"uncertain answers left out", []probed{{wall: -20 * s, est: -20 * s, hasEst: true, uncertainty: 50 * ms}, {wall: 1 * s}}, 3, 0, true},
		{"uncertain answers when there is no majority without them", []probed{{wall: -20 * s, uncertainty: 50 * ms}, {wall: -19 * s, uncertainty: 30 * ms}}, 3, -19*s - 30*ms, true},
		{"an uncertain estimate when there is no majority without it", []probed{{wall: -20 * s, est: -20*s - 50*ms, hasEst: true, uncertainty: 50 * ms}}, 3, -20*s - 50*ms, true},
		{"no majority", []probed{{wall: -20 * s}}, 5, 0, false},
		{"nobody answered", nil, 3, 0, false},
		{"alone", nil, 1, 0, true},
	} {
		got, _, ok := probedAdjustment(tc.answers, tc.voters)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRestartedLeaderStartsOnTheClusterClock: a node whose clock is 20 s
// ahead restarts and is handed the leadership at once, before its first
// status report could measure the cluster's clock. It asks the voters for
// theirs before it serves and leads on the old leader's time: a message
// received with a 15 s visibility timeout just before stays hidden (on
// the node's own clock its lease would have ended 5 s ago), and a message
// sent to it carries a SentTimestamp on the cluster's time, not 20 s
// ahead; it warns that its clock is the odd one out. (The other voter's estimate of the cluster's clock is what it
// starts on; TestProbedAdjustment covers the median of the wall clocks,
// for a whole cluster restarted.)
func TestRestartedLeaderStartsOnTheClusterClock(t *testing.T) {
	const ahead = 20 * time.Second
	skew := []time.Duration{0, 0, ahead}
	var mu sync.Mutex
	logs := make([]*testlog.Buffer, 3)
	opt := func(i int, o *Options) {
		o.Clock = clock.Offset{By: skew[i]}
		mu.Lock()
		o.Logger, logs[i] = testlog.New(slog.LevelInfo)
		mu.Unlock()
	}
	nodes, stop := startThreeWith(t, func(*server.Options) {}, opt, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if l := awaitLeader(t, nodes); l == nodes[2] {
		handOver(t, nodes, 0, 1) // away from the skewed node
	}
	leader := awaitLeader(t, nodes[:2])
	other := nodes[1]
	if leader == other {
		other = nodes[0]
	}
	poll.CheckFor(t, 30*time.Second, poll.True("the other voter measured the leader's clock", func() bool {
		other.mu.Lock()
		defer other.mu.Unlock()
		return other.clockGood.measured && other.clockGood.leader == leader.opts.Cluster.NodeID
	}))
	q, received := oneInFlight(ctx, t, directSQS(leader, 10*time.Second), "restart-clock", 15)
	if err := stop(2); err != nil {
		t.Fatalf("stop node 3: %v", err)
	}
	restarted := rerun(t, nodes[2], func(o *Options) { opt(2, o) })
	// The leadership as soon as it has caught up: its first status report
	// is a second after it starts.
	handOver(t, []*Node{nodes[0], nodes[1], restarted}, 0, 3)
	checkTakeover(ctx, t, directSQS(restarted, 10*time.Second), q, received, 15*time.Second, ahead)
	mu.Lock()
	log := logs[2]
	mu.Unlock()
	if strings.Contains(log.String(), "as this node measured it") {
		t.Skipf("the restarted node measured the cluster's clock before it led (slow machine): nothing to probe\n%s", log)
	}
	if !strings.Contains(log.String(), "as the voters measured it") {
		t.Fatalf("the restarted node did not lead on the clock its voters measured:\n%s", log)
	}
	// Once the followers report, it warns that its own clock is the odd
	// one out (it never measured as a follower, so this is its first
	// warning).
	poll.CheckFor(t, 10*time.Second, poll.True("the restarted leader warned of its clock", func() bool {
		return strings.Contains(log.String(), "this node's clock disagrees with the median of the voters' clocks")
	}))
}

// rerun starts old's node again on its data directory and Raft address
// (old stopped), its Options edited by opt; it stops with the test.
func rerun(t *testing.T, old *Node, opt func(*Options)) *Node {
	t.Helper()
	o := Options{Server: old.opts, TickInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	opt(&o)
	var n *Node
	poll.CheckFor(t, 10*time.Second, func() error { // the Raft port is free once the old listener closed
		var err error
		n, err = New(o)
		return err
	})
	runNode(t, n, fmt.Sprintf("node %d, restarted", o.Server.Cluster.NodeID))
	return n
}

// TestRestartedClusterProbesShardZeroOnce: after the whole cluster
// restarts, the first leader of shard 0 has measured no leader's clock
// and only loaded its predecessor's last stamp, so it asks shard 0's
// voters for their clocks. Their answers carry their bounds on that stamp
// too (clockAnswer), so it does not ask them again for those: a second
// probe cost up to another probeWait of the failover when a voter was
// down.
func TestRestartedClusterProbesShardZeroOnce(t *testing.T) {
	var mu sync.Mutex
	logs := make([]*testlog.Buffer, 3)
	nodes, stop := startThreeWith(t, func(*server.Options) {}, nil, nil, 3)
	// Every node has applied a stamp of shard 0's leader, and will load it.
	poll.CheckFor(t, 10*time.Second, poll.True("every node applied a stamp of shard 0", func() bool {
		for _, n := range nodes {
			if last, _, found := latestStamp(n.shards.Shard(0).AdvertisedSince()); !found || last.Clock == 0 {
				return false
			}
		}
		return true
	}))
	for i := range nodes {
		if err := stop(i); err != nil {
			t.Fatalf("stop node %d: %v", i+1, err)
		}
	}
	restarted := make([]*Node, 3)
	for i := range nodes {
		restarted[i] = rerun(t, nodes[i], func(o *Options) {
			mu.Lock()
			defer mu.Unlock()
			o.Logger, logs[i] = testlog.New(slog.LevelDebug)
		})
	}
	poll.CheckFor(t, 30*time.Second, routed(restarted))
	leader := awaitLeader(t, restarted)
	mu.Lock()
	log := logs[leader.opts.Cluster.NodeID-1].String()
	mu.Unlock()
	first, _, _ := strings.Cut(log, "serving as leader")
	if strings.Contains(first, "as this node measured it") {
		t.Skipf("the leader measured a clock before it led: nothing to probe\n%s", first)
	}
	if probes := strings.Count(first, `msg="probed the voters" shard=0`); probes != 1 {
		t.Fatalf("shard 0's first leader after the restart probed its voters %d times before it served, want 1:\n%s", probes, first)
	}
}
