package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// TestShardClockFollowsTheCluster: with three shards, a node whose wall
// clock is 20 s behind the others' leads a shard above 0 on the cluster's
// clock and is steered to it (its timeline's target is the cluster's
// clock, not its own wall clock, toward which the shard used to slew at
// 1 %, handing its successor leases that ended early by 1 % of its term).
// A message received there with a 10 s visibility timeout is not
// redelivered early when that node stops and another takes the shard
// over, and is redelivered once its lease ends.
func TestShardClockFollowsTheCluster(t *testing.T) {
	const behind = 20 * time.Second
	skew := []time.Duration{0, 0, -behind}
	nodes, stop := startThreeWith(t, func(o *server.Options) { o.Cluster.Shards = 3 },
		func(i int, o *Options) {
			o.BalanceInterval = 100 * time.Millisecond
			o.Clock = clock.Offset{By: skew[i]}
		}, nil, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	skewed := nodes[2]

	// The balancer gives each node one shard; shard 0 is moved off the
	// skewed node should it hold that one.
	k := 0
	poll.CheckFor(t, 40*time.Second, func() error {
		skewed.mu.Lock()
		leadsZero := skewed.timeline != nil
		for s := 1; s < len(skewed.shardClocks); s++ {
			if skewed.shardClocks[s] != nil {
				k = s
			}
		}
		skewed.mu.Unlock()
		if k > 0 {
			return nil
		}
		if leadsZero {
			tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
			defer tcancel()
			_ = skewed.shards.Shard(0).TransferLeadershipTo(tctx, 1) // retried by the poll
		}
		return fmt.Errorf("the skewed node leads no shard above 0")
	})
	// Its shard's clock is the cluster's, 20 s ahead of its own, and is
	// steered there.
	poll.CheckFor(t, 20*time.Second, func() error {
		skewed.mu.Lock()
		tl := skewed.shardClocks[k]
		skewed.mu.Unlock()
		if tl == nil {
			return fmt.Errorf("the skewed node no longer leads shard %d", k)
		}
		if got := tl.seg.Load().target; (got - behind).Abs() > 200*time.Millisecond {
			return fmt.Errorf("shard %d's clock on the skewed node slews toward %v, want about %v (the cluster's clock)", k, got, behind)
		}
		if got := tl.Adjustment(); (got - behind).Abs() > 200*time.Millisecond {
			return fmt.Errorf("shard %d's clock on the skewed node is %v off its wall clock, want about %v", k, got, behind)
		}
		return nil
	})

	const vis = 10 * time.Second
	cli, q, begin := leaseOneOnShard(ctx, t, nodes, nodes[0], "shard-clock", k, vis)
	if _, l, ok := nodes[0].target(k); !ok || l != skewed.opts.Cluster.NodeID {
		t.Skipf("shard %d moved off the skewed node before the receive", k)
	}
	if err := stop(2); err != nil {
		t.Fatal(err)
	}
	// Until its lease ends, no receive through a survivor may see the
	// message; after that, one must.
	awaitNotEarly(ctx, t, cli, q, k, begin, vis)
}

// leaseOneOnShard creates a queue on shard k, sends it a message through
// node via and receives it with visibility timeout vis; it returns the
// client, the queue and when the receive began.
func leaseOneOnShard(ctx context.Context, t *testing.T, nodes []*Node, via *Node, prefix string, k int, vis time.Duration) (*sqs.Client, *string, time.Time) {
	t.Helper()
	_, q := queueOnShard(t, nodes, prefix, k)
	cli := shardClient(via)
	if _, err := cli.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("in flight")}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	got, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, VisibilityTimeout: int32(vis / time.Second)})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive on shard %d: %v, %d messages", k, err, len(got.Messages))
	}
	return cli, q, begin
}

// awaitNotEarly receives from q until the message leased at begin for vis
// comes back, and fails the test if it does more than 50 ms before its
// lease could end, or never.
func awaitNotEarly(ctx context.Context, t *testing.T, cli *sqs.Client, q *string, k int, begin time.Time, vis time.Duration) {
	t.Helper()
	for {
		r, err := cli.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 1})
		if ctx.Err() != nil {
			t.Fatalf("the message leased on shard %d never came back: %v", k, ctx.Err())
		}
		if err != nil || len(r.Messages) == 0 {
			continue // no leader yet, or nothing visible
		}
		if early := vis - time.Since(begin); early > 50*time.Millisecond {
			t.Fatalf("the message came back %v before its %v lease could end, from shard %d's new leader", early.Round(time.Millisecond), vis, k)
		}
		return
	}
}

// TestShardClocksSteered: the clocks of the shards above 0 that a node
// leads are steered to the cluster's clock as the node knows it — its
// measurement at a status report (erring late by the measurement's
// uncertainty, as a leadership's start does) or, while it leads shard 0,
// that shard's timeline — and never toward the node's own wall clock.
func TestShardClocksSteered(t *testing.T) {
	base := clock.NewFake(time.Unix(1_800_000_000, 0))
	n := &Node{clk: base, log: slog.New(slog.DiscardHandler), shardClocks: make([]*timeline, 3)}
	n.shardClocks[2] = newTimeline(base, 0, 0)
	ahead := 5 * time.Second
	sent := base.Now()
	base.Advance(2 * time.Millisecond)
	n.noteClock(1, sent, base.Now(), strconv.FormatInt(sent.Add(time.Millisecond+ahead).UnixNano(), 10))
	if got, want := n.shardClocks[2].seg.Load().target, ahead-time.Millisecond; got != want {
		t.Fatalf("after a measurement of the cluster's clock %v ahead (±1ms), shard 2 steers toward %v, want %v", ahead, got, want)
	}
	// An uncertain measurement steers nothing.
	sent = base.Now()
	base.Advance(30 * time.Millisecond)
	n.noteClock(1, sent, base.Now(), strconv.FormatInt(sent.UnixNano(), 10))
	if got, want := n.shardClocks[2].seg.Load().target, ahead-time.Millisecond; got != want {
		t.Fatalf("after a measurement with a 15 ms uncertainty, shard 2 steers toward %v, want %v as before", got, want)
	}

	// This node leads shard 0 now, 3 s ahead of its own clock; no follower
	// has reported yet, so shard 0 keeps its course and the other shards
	// follow where it is.
	n.timeline = newTimeline(base, 3*time.Second, 3*time.Second)
	st := raftstore.Status{ID: 1, Members: []raftstore.Member{{ID: 1, Membership: raftstore.Voter}, {ID: 2, Membership: raftstore.Voter}, {ID: 3, Membership: raftstore.Voter}}}
	n.retargetClockLocked(st, time.Now())
	if got := n.shardClocks[2].seg.Load().target; got != 3*time.Second {
		t.Fatalf("with shard 0's clock 3s ahead, shard 2 steers toward %v, want 3s", got)
	}
	// A leadership of another shard that starts now starts on shard 0's
	// clock and course.
	tl := n.leadershipClock(context.Background(), 1)
	if adj, target := tl.Adjustment(), tl.seg.Load().target; adj != 3*time.Second || target != 3*time.Second {
		t.Fatalf("a shard 1 leadership on shard 0's leader starts %v off its clock toward %v, want 3s toward 3s", adj, target)
	}
}
