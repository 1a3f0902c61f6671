package raftstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestByteRate: the bucket starts with its burst (an eighth of a second),
// a reservation beyond it goes into debt that the caller waits out, the
// next caller waits behind that debt, and the bucket refills with time up
// to the burst only.
func TestByteRate(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newByteRate(8000, func() time.Time { return now }) // burst 1,000 bytes
	for _, step := range []struct {
		advance time.Duration
		n       int
		want    time.Duration
	}{
		{0, 600, 0},                                      // 400 left
		{0, 400, 0},                                      // none left
		{0, 800, 100 * time.Millisecond},                 // 800 owed: 0.1 s at 8,000 B/s
		{0, 800, 200 * time.Millisecond},                 // queued behind it: 1,600 owed
		{200 * time.Millisecond, 0, 0},                   // paid
		{10 * time.Second, 2000, 125 * time.Millisecond}, // refilled to the burst only: 1,000 owed
	} {
		now = now.Add(step.advance)
		if got := b.reserve(step.n); got != step.want {
			t.Fatalf("after %v, reserve(%d) = %v, want %v", step.advance, step.n, got, step.want)
		}
	}
}

// TestSnapLimitsSlots: the send and receive slots are bounded, a free one
// is taken at once, a receive waits for one until its time is up, and the
// settings' zero and negative values mean the default and no bound.
func TestSnapLimitsSlots(t *testing.T) {
	l := newSnapLimits(&Config{SnapshotStreams: 1, SnapshotRate: -1})
	if l.rate != nil {
		t.Fatal("a negative rate must mean no limit")
	}
	if !l.sendFree() || !l.trySend() {
		t.Fatal("the first send slot is not free")
	}
	if l.sendFree() || l.trySend() {
		t.Fatal("a second send slot was given with a bound of one")
	}
	l.releaseSend()
	if !l.trySend() {
		t.Fatal("a released send slot is not free again")
	}
	stop := make(chan struct{})
	if !l.acquireRecv(time.Second, stop) {
		t.Fatal("the first receive slot is not free")
	}
	if l.acquireRecv(10*time.Millisecond, stop) {
		t.Fatal("a second receive slot was given with a bound of one")
	}
	got := make(chan bool)
	go func() { got <- l.acquireRecv(time.Minute, stop) }()
	l.releaseRecv()
	if !<-got {
		t.Fatal("a receive waiting for a slot did not get the one released")
	}
	go func() { got <- l.acquireRecv(time.Minute, stop) }()
	close(stop)
	if <-got {
		t.Fatal("a receive waiting for a slot got one after the transport closed")
	}
	if p := l.peakRecvs.Load(); p != 1 {
		t.Fatalf("peak receives %d, want 1", p)
	}

	d := newSnapLimits(&Config{})
	if cap(d.sends) != DefaultSnapshotStreams || cap(d.recvs) != DefaultSnapshotStreams || d.rate == nil || d.rate.rate != DefaultSnapshotRate {
		t.Fatalf("defaults: %d sends, %d receives, rate %v", cap(d.sends), cap(d.recvs), d.rate)
	}
	u := newSnapLimits(&Config{SnapshotStreams: -1})
	for range 10 {
		if !u.trySend() {
			t.Fatal("no bound refused a send")
		}
	}
	if err := (&Config{ID: 1, Dir: "d", Listener: &shardListener{}, SnapshotRate: MinSnapshotRate - 1}).validate(); err == nil {
		t.Fatal("a rate below MinSnapshotRate was accepted")
	}
}

// snapshotBacklog is how many 1 KiB writes each shard gets while a node
// is down: at the tests' rate of 1 MiB/s its copy streams for about half
// a second, so copies of two shards started together overlap.
const snapshotBacklog = 600

// slowSnapshots tunes a node for the snapshot bound tests: low log
// thresholds (a node behind gets a snapshot) and the slowest rate.
func slowSnapshots(streams int) func(int, *Config) {
	return func(i int, cfg *Config) {
		lowThresholds(i, cfg)
		cfg.SnapshotRate, cfg.SnapshotStreams = MinSnapshotRate, streams
	}
}

// catchUpBySnapshots stops node fi, writes values s<k>-0..s<k>-(n-1) to
// every shard k through its leader (leaders, by shard), restarts fi and
// waits until it has installed a snapshot of every shard and holds the
// leaders' state; it returns how long that took from the restart.
func catchUpBySnapshots(t *testing.T, c *shardCluster, fi int, leaders []uint64, n int) time.Duration {
	t.Helper()
	c.stop(fi)
	for k, l := range leaders {
		writeMany(t, c.nodes[l-1].Shard(k).Store(), fmt.Sprint("s", k, "-"), n)
	}
	start := time.Now()
	c.restart(fi)
	for k, l := range leaders {
		poll.CheckFor(t, 30*time.Second, func() error {
			if installed(c.nodes[fi].Shard(k)) == 0 {
				return fmt.Errorf("shard %d: no snapshot installed yet", k)
			}
			return sameState(c.nodes[l-1].Shard(k), c.nodes[fi].Shard(k))
		})
	}
	return time.Since(start)
}

// TestSnapshotReceivesBounded: a node that fell behind on two shards,
// led by two other nodes, receives one snapshot at a time with
// SnapshotStreams 1 — the other sender's stream waits for the slot or is
// refused and sent again — and ends with both shards' state.
func TestSnapshotReceivesBounded(t *testing.T) {
	c := newTunedShardCluster(t, 3, 2, func(i int, cfg *Config) {
		streams := -1 // the senders: no bound of their own
		if i == 2 {
			streams = 1
		}
		slowSnapshots(streams)(i, cfg)
	})
	leaders := c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	for _, s := range c.nodes {
		s.hold.Store(true)
	}
	for k, l := range leaders {
		if l != 3 {
			continue
		}
		// Node 3 must lead neither shard: its shard goes to the node that
		// leads none.
		to := uint64(3 - leaders[1-k])
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.nodes[2].Shard(k).TransferLeadershipTo(ctx, to)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		poll.CheckFor(t, 20*time.Second, func() error {
			l, err := c.leaders()
			if err == nil && l[k] != to {
				err = fmt.Errorf("leaders %v", l)
			}
			leaders = l
			return err
		})
	}
	catchUpBySnapshots(t, c, 2, leaders, snapshotBacklog)
	if p := c.nodes[2].cfg.snapLimits.peakRecvs.Load(); p != 1 {
		t.Fatalf("node 3 received %d snapshots at once, want 1", p)
	}
}

// TestSnapshotSendsBounded: a leader of two shards sends a node that fell
// behind on both one snapshot at a time with SnapshotStreams 1 (Raft
// asks for the second once the first is done), no faster than its
// SnapshotRate, and the node ends with both shards' state.
func TestSnapshotSendsBounded(t *testing.T) {
	c := newTunedShardCluster(t, 3, 2, func(i int, cfg *Config) {
		streams := -1
		if i == 0 {
			streams = 1
		}
		slowSnapshots(streams)(i, cfg)
	})
	c.spreadOver([]uint64{1, 2, 3}, 20*time.Second)
	for _, s := range c.nodes {
		s.hold.Store(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := range 2 {
		poll.CheckFor(t, 20*time.Second, func() error {
			l, err := c.leaders()
			if err != nil || l[k] == 1 {
				return err
			}
			// A short wait each: Raft may abandon a transfer, which
			// then waits out its context; the poll asks again.
			tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
			err = c.nodes[l[k]-1].Shard(k).TransferLeadershipTo(tctx, 1)
			tcancel()
			return fmt.Errorf("shard %d: moving the leadership from node %d to node 1 (%v)", k, l[k], err)
		})
	}
	took := catchUpBySnapshots(t, c, 2, []uint64{1, 1}, snapshotBacklog)
	if p := c.nodes[0].cfg.snapLimits.peakSends.Load(); p != 1 {
		t.Fatalf("node 1 sent %d snapshots at once, want 1", p)
	}
	// The rate paced them: two copies of over 600 KB at 1 MiB/s, less the
	// bucket's burst of 128 KiB, take over a second. (A lower bound: the
	// pace cannot be beaten, however fast the machine.)
	if floor := 900 * time.Millisecond; took < floor {
		t.Fatalf("node 3 caught up in %v: faster than node 1's rate allows (at least %v)", took, floor)
	}
}

// TestCompactionWaitsForASnapshotInFlight: a leader that goes on taking
// writes while a slow snapshot streams to a follower keeps its log after
// the snapshot's index until the follower has taken it, so the follower
// catches up with that one snapshot. Without the hold the leader's log
// was cut past the copy's index while it streamed, and the follower
// needed another copy, and another: under a steady load it never caught
// up (bench-repair, 2026-12-06).
func TestCompactionWaitsForASnapshotInFlight(t *testing.T) {
	c := newTunedCluster(t, 3, false, slowSnapshots(-1))
	li := c.leader(-1)
	fi := (li + 1) % 3
	c.stop(fi)
	writeMany(t, c.nodes[li].Store(), "a", snapshotBacklog)
	c.restart(fi)
	// Writes go on while the copy streams (about half a second at 1 MiB/s),
	// each a log entry: many times CompactEntries.
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := writeKV(c.nodes[li].Store(), fmt.Sprint("w", i), "x"); err != nil {
				done <- err
				return
			}
		}
	}()
	poll.CheckFor(t, 30*time.Second, func() error {
		if installed(c.nodes[fi]) == 0 {
			return errors.New("no snapshot installed yet")
		}
		return nil
	})
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, func() error { return sameState(c.nodes[li], c.nodes[fi]) })
	if n := installed(c.nodes[fi]); n != 1 {
		t.Fatalf("the follower installed %d snapshots, want 1: the leader cut its log past the copy in flight", n)
	}
	// The hold ends once the follower has the copy: the log is cut past it
	// again.
	past := c.nodes[li].Status().LastIndex
	writeMany(t, c.nodes[li].Store(), "b", 3*testCompactEntries)
	poll.CheckFor(t, 10*time.Second, func() error {
		if first := c.nodes[li].Status().FirstIndex; first <= past {
			return fmt.Errorf("the leader's log still starts at %d, not past %d", first, past)
		}
		return nil
	})
}
