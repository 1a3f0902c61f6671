package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// TestBeaconBound: the bound comes from the latest leadership's stamp
// only, advanced by the time since this node applied it at 99 % of its
// rate, and from nothing when that stamp is missing or was only loaded.
func TestBeaconBound(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	stamp := func(term uint64, clock time.Time) []byte {
		b, err := json.Marshal(advertisement{Advertisement: Advertisement{Term: term, SQS: "127.0.0.1:1"}, Clock: clock.UnixNano()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	old, _ := json.Marshal(Advertisement{Term: 9, SQS: "127.0.0.1:1"}) // an older release's: no stamp
	for _, c := range []struct {
		name  string
		ads   map[uint64]raftstore.Advertised
		want  time.Time
		term  uint64
		bound bool
	}{
		{name: "none", ads: nil},
		{name: "latest term, advanced 99 % of 10 s", ads: map[uint64]raftstore.Advertised{
			1: {Info: stamp(3, now.Add(time.Hour)), AppliedAt: now.Add(-time.Minute)},
			2: {Info: stamp(5, now.Add(-3*time.Second)), AppliedAt: now.Add(-10 * time.Second)},
			3: {Info: []byte("not json"), AppliedAt: now},
		}, want: now.Add(-3*time.Second + 9900*time.Millisecond), term: 5, bound: true},
		{name: "the latest has no stamp: an older one bounds nothing", ads: map[uint64]raftstore.Advertised{
			1: {Info: stamp(3, now), AppliedAt: now},
			2: {Info: old, AppliedAt: now},
		}, term: 9},
		{name: "the latest was loaded, not applied", ads: map[uint64]raftstore.Advertised{
			1: {Info: stamp(3, now), AppliedAt: now},
			2: {Info: stamp(4, now)},
		}, term: 4},
		{name: "applied in the future (a clock step back): no advance", ads: map[uint64]raftstore.Advertised{
			1: {Info: stamp(3, now.Add(-time.Second)), AppliedAt: now.Add(time.Minute)},
		}, want: now.Add(-time.Second), term: 3, bound: true},
	} {
		got, term, ok := beaconBound(c.ads, now)
		if ok != c.bound || term != c.term || !got.Equal(c.want) {
			t.Errorf("%s: beaconBound = %v, term %d, %v; want %v, term %d, %v", c.name, got, term, ok, c.want, c.term, c.bound)
		}
	}
}

// TestShardTakeoverBoundByBeacon: a node that leads shard 0 and takes
// over shard 1 starts shard 1 on shard 0's clock — unless shard 1's
// leader ran behind that clock, as a leader does after a late start
// until its slew catches up. Here shard 1's leader runs 3 s behind; a
// message received there with a 10 s visibility timeout is not
// redelivered early by the node that takes shard 1 over (on shard 0's
// clock alone it came back 3 s early), and it does come back.
func TestShardTakeoverBoundByBeacon(t *testing.T) {
	const lag = 3 * time.Second
	nodes, _ := startThreeWith(t, func(o *server.Options) { o.Cluster.Shards = 3 },
		func(i int, o *Options) { o.BalanceInterval = time.Hour }, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	taker, giver := nodes[0], nodes[1]
	// Node 1 leads shard 0, node 2 shard 1.
	lead := func(n *Node, k int) {
		t.Helper()
		poll.CheckFor(t, 30*time.Second, func() error {
			r := n.shards.Shard(k)
			st := r.Status()
			if st.Leader == n.opts.Cluster.NodeID {
				n.mu.Lock()
				defer n.mu.Unlock()
				if n.serving[k] == nil {
					return fmt.Errorf("node %d leads shard %d but does not serve it yet", st.Leader, k)
				}
				return nil
			}
			for _, o := range nodes {
				if o.opts.Cluster.NodeID == st.Leader {
					tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
					defer tcancel()
					_ = o.shards.Shard(k).TransferLeadershipTo(tctx, n.opts.Cluster.NodeID) // retried by the poll
				}
			}
			return fmt.Errorf("node %d does not lead shard %d yet", n.opts.Cluster.NodeID, k)
		})
	}
	lead(taker, 0)
	lead(giver, 1)
	// Shard 1's clock falls 3 s behind the cluster's: it slews back at 1 %
	// from there, as after a late start.
	giver.mu.Lock()
	tl := giver.shardClocks[1]
	giver.mu.Unlock()
	tl.mu.Lock()
	now := tl.base.Now()
	tl.seg.Store(&segment{from: now, adj: tl.seg.Load().at(now) - lag, target: tl.seg.Load().target})
	tl.mu.Unlock()
	// The taker has applied a stamp of the lagging clock.
	poll.CheckFor(t, 10*time.Second, func() error {
		a := taker.shards.Shard(1).AdvertisedSince()[giver.opts.Cluster.NodeID]
		var ad advertisement
		if err := json.Unmarshal(a.Info, &ad); err != nil {
			return err
		}
		if behind := time.Since(time.Unix(0, ad.Clock)); behind < lag*9/10 {
			return fmt.Errorf("node 2's last stamp of shard 1 is %v behind, want about %v", behind, lag)
		}
		return nil
	})

	const vis = 10 * time.Second
	cli, q, begin := leaseOneOnShard(ctx, t, nodes, nodes[2], "beacon-bound", 1, vis)
	if _, l, ok := taker.target(1); !ok || l != giver.opts.Cluster.NodeID {
		t.Skipf("shard 1 moved off node 2 before the receive")
	}
	lead(taker, 1)
	if _, l, ok := taker.target(0); !ok || l != taker.opts.Cluster.NodeID {
		t.Skipf("shard 0 moved off node 1 before it took shard 1 over")
	}
	awaitNotEarly(ctx, t, cli, q, 1, begin, vis)
}

// TestProbeBeacon: a node that only loaded its predecessor's stamp asks
// the other voters of the shard for their bound on that leadership's
// clock (clockAnswer on the shard's own connections): the answer is
// never ahead of the leader's clock and close behind it, here a leader of
// shard 1 running 3 s behind the cluster's clock; a term other than the
// latest stamp's gets no bound.
func TestProbeBeacon(t *testing.T) {
	nodes, _ := startThreeWith(t, func(o *server.Options) { o.Cluster.Shards = 3 },
		func(i int, o *Options) { o.BalanceInterval = time.Hour }, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var leader, asker *Node
	var tl *timeline
	poll.CheckFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			n.mu.Lock()
			if n.shardClocks[1] != nil {
				leader, tl = n, n.shardClocks[1]
			}
			n.mu.Unlock()
		}
		if leader == nil {
			return fmt.Errorf("no node serves shard 1 yet")
		}
		return nil
	})
	for _, n := range nodes {
		if n != leader {
			asker = n
		}
	}
	tl.mu.Lock()
	now := tl.base.Now()
	tl.seg.Store(&segment{from: now, adj: tl.seg.Load().at(now) - 3*time.Second, target: tl.seg.Load().target})
	tl.mu.Unlock()
	term := leader.shards.Shard(1).Status().Term
	// Every node has applied a stamp of the lagging clock (the test stepped
	// the clock back, which a timeline never does: stamps from before
	// would be ahead of it).
	poll.CheckFor(t, 10*time.Second, func() error {
		for _, n := range nodes {
			var ad advertisement
			if err := json.Unmarshal(n.shards.Shard(1).AdvertisedSince()[leader.opts.Cluster.NodeID].Info, &ad); err != nil {
				return err
			}
			if behind := time.Since(time.Unix(0, ad.Clock)); behind < 2700*time.Millisecond {
				return fmt.Errorf("node %d's last stamp of shard 1 is %v behind, want about 3s", n.opts.Cluster.NodeID, behind)
			}
		}
		return nil
	})
	poll.CheckFor(t, 20*time.Second, func() error {
		before := tl.Now()
		bound, ok := asker.probeBeacon(ctx, 1, term, time.Time{})
		after := tl.Now()
		switch {
		case !ok:
			return fmt.Errorf("no voter answered with a bound for term %d", term)
		case bound.After(after):
			t.Fatalf("the voters' bound %v is ahead of the leader's clock %v", bound, after)
		case bound.Before(before.Add(-200 * time.Millisecond)):
			return fmt.Errorf("the voters' bound is %v behind the leader's clock (a stamp before the lag?)", before.Sub(bound))
		}
		return nil
	})
	if _, ok := asker.probeBeacon(ctx, 1, term+1, time.Time{}); ok {
		t.Fatalf("a bound for term %d, which no leader stamped", term+1)
	}
}

// TestStartLimit: a leadership starts no later than the greater of the
// certain bound and its candidate less the stamped lag and the margin.
func TestStartLimit(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := time.Second
	for _, c := range []struct {
		name     string
		adj      time.Duration
		behind   time.Duration
		certain  time.Duration // the certain bound, as an adjustment
		ok       bool
		want     time.Duration
		wantFrom string
	}{
		{"certain and close: it", 20 * s, 3 * s, 17 * s, true, 17 * s, "its last stamp"},
		{"certain ahead of the candidate: not below it", 0, 0, 1 * s, true, 1 * s, "its last stamp"},
		{"certain but loose (a restart): the stamped lag", 0, 0, -4 * s, true, -beaconMargin, "its stamped lag"},
		{"loose, the predecessor 3 s behind", 0, 3 * s, -10 * s, true, -3*s - beaconMargin, "its stamped lag"},
		{"none: the stamped lag", 5 * s, 200 * time.Millisecond, 0, false, 5*s - 200*time.Millisecond - beaconMargin, "its stamped lag"},
	} {
		got, from := startLimit(c.adj, c.behind, now.Add(c.certain), c.ok, now)
		if got != c.want || from != c.wantFrom {
			t.Errorf("%s: startLimit = %v (%s), want %v (%s)", c.name, got, from, c.want, c.wantFrom)
		}
	}
}

// TestUntilNextBeat: every leader stamps at the wall clock's whole
// multiples of beaconInterval, so that several shards' stamps arrive at a
// node together; on a beat the next is a full interval away.
func TestUntilNextBeat(t *testing.T) {
	base := time.Date(2026, 12, 4, 12, 0, 7, 0, time.UTC)
	for _, c := range []struct{ at, want time.Duration }{
		{0, beaconInterval},
		{300 * time.Millisecond, beaconInterval - 300*time.Millisecond},
		{beaconInterval - time.Nanosecond, time.Nanosecond},
	} {
		now := base.Add(c.at)
		got := untilNextBeat(now)
		if got != c.want || now.Add(got).Sub(base)%beaconInterval != 0 {
			t.Errorf("untilNextBeat(%v) = %v, want %v (to a whole beat)", now.Format("15:04:05.000000000"), got, c.want)
		}
	}
}
