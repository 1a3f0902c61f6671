package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
	"github.com/sluicemq/sluice/internal/testlog"
)

// supervised is one member started with Supervise: the node it runs now
// and how many it has started.
type supervised struct {
	logs   *testlog.Buffer
	cur    atomic.Pointer[Node]
	starts atomic.Int32
	fs     *pebblestore.FaultFS
	// ended holds Supervise's error once it returned.
	ended atomic.Pointer[error]
}

// superviseThree starts a three-member cluster in this process, each
// member under Supervise with its Raft log and state store on the real
// disk through a FaultFS that faults only WAL files (a MANIFEST fault
// would make pebble stop the test process), and waits until every member
// routes to a serving leader. edit, when not nil, applies to every
// member's options.
func superviseThree(t *testing.T, edit func(*server.Options)) []*supervised {
	t.Helper()
	raft := brokertest.ReservePorts(t, 3)
	peers := []server.ClusterPeer{{ID: 1, Raft: raft[0]}, {ID: 2, Raft: raft[1]}, {ID: 3, Raft: raft[2]}}
	members := make([]*supervised, 3)
	for i := range members {
		log, logs := testlog.New(slog.LevelInfo)
		m := &supervised{fs: pebblestore.NewFaultFS(vfs.Default), logs: logs}
		m.fs.OnlyWAL(true)
		o := server.DefaultOptions()
		o.DataDir, o.StoreFS = t.TempDir(), m.fs
		o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
		o.Cluster = server.ClusterConfig{NodeID: uint64(i + 1), Peers: peers}
		if edit != nil {
			edit(&o)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			err := Supervise(ctx, Options{Server: o, TickInterval: 10 * time.Millisecond, Logger: log},
				func(n *Node) { m.cur.Store(n); m.starts.Add(1) })
			m.ended.Store(&err)
			done <- err
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node %d: Supervise: %v", i+1, err)
			}
		})

		members[i] = m
	}
	poll.CheckFor(t, 30*time.Second, poll.True("every member routes to a serving leader", func() bool {
		for i, m := range members {
			if err := m.ended.Load(); err != nil {
				t.Fatalf("node %d: Supervise returned: %v", i+1, *err)
			}
			n := m.cur.Load()
			if n == nil {
				return false
			}
			if _, _, ok := n.target(0); !ok {
				return false
			}
		}
		return true
	}))
	return members
}

// TestSuperviseRestartsNodeAfterFullDisk (docs/reliability.md, gap 1c):
// a member's Raft log write finds the disk full; its Raft node stops, its
// /health says store_failed and sluice_raft_stopped is 1, and the others
// go on acknowledging sends (electing a leader when the member led). Once
// space is back, Supervise restarts it in place on the same addresses: it
// rejoins, catches up (from the log, or from a snapshot when the leader
// cut its log meanwhile), answers /health 200, serves a send, and every
// message acknowledged before, during and after the fault is received
// through it. With three shards (every shard's Raft log in the node's one
// log store, so the full disk stops them all) the same.
func TestSuperviseRestartsNodeAfterFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name     string
		leader   bool // fault the leader, else a follower
		during   int  // sends acknowledged while the disk is full
		snapshot bool // the leader cuts its log meanwhile: the member catches up by a snapshot
		shards   int  // [cluster] shards: above 1, every shard's log in one store per node
	}{
		{"leader", true, 20, false, 1},
		{"follower-by-snapshot", false, 200, true, 1},
		{"leader-of-three-shards", true, 20, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.snapshot || tc.shards > 1) && testing.Short() {
				t.Skip("runs without -short (make test); the race run keeps the leader's case")
			}
			edit := func(o *server.Options) {
				o.Cluster.Shards = tc.shards
				if tc.snapshot {
					o.Cluster.LogCompactEntries, o.Cluster.LogKeepEntries = 50, 10
				}
			}
			fullDiskRestart(t, superviseThree(t, edit), tc.leader, tc.during, tc.snapshot)
		})
	}
}

// fullDiskRestart is TestSuperviseRestartsNodeAfterFullDisk's body for one
// case.
func fullDiskRestart(t *testing.T, members []*supervised, faultLeader bool, during int, snapshot bool) {
	lead := -1
	for i, m := range members {
		if st := m.cur.Load().raft.Status(); st.Role == "leader" {
			lead = i
		}
	}
	if lead < 0 {
		t.Fatal("no member leads")
	}
	victim := lead
	if !faultLeader {
		victim = (lead + 1) % 3
	}
	failed := members[victim]
	first := failed.cur.Load()
	addr, amqpAddr := first.HTTPAddr(), first.AMQPAddr()
	via := members[(victim+1)%3].cur.Load()
	ctx := context.Background()
	c := retryingClient(via.HTTPAddr())
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("full")})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	send := func(c *sqs.Client, body string) error {
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)})
		if err == nil {
			acked[body] = true
		}
		return err
	}
	for i := range 20 {
		if err := send(c, fmt.Sprint("before-", i)); err != nil {
			t.Fatal(err)
		}
	}

	failed.fs.FailWrites(syscall.ENOSPC)
	// The next write the member's log takes fails; sends go on (through a
	// new leader if it led; a send refused on the way is not acknowledged).
	for i := 0; len(acked) < 20+during; i++ {
		_ = send(c, fmt.Sprint("during-", i))
		if i > 10*during {
			t.Fatalf("only %d sends acknowledged with one member's disk full", len(acked))
		}
	}
	poll.CheckFor(t, 10*time.Second, poll.True("the member's Raft node stopped on the full disk", func() bool {
		return first.shards.Shard(0).Failure() != nil
	}))
	health := func(addr string) (int, string) {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := health(addr); code != http.StatusServiceUnavailable || !strings.Contains(body, "store_failed") {
		t.Fatalf("/health of the node whose disk is full: %d %s, want 503 with store_failed", code, body)
	}
	// shard 0's series (labelled by shard with several)
	stoppedSeries := "sluice_raft_stopped"
	if first.shards.Len() > 1 {
		stoppedSeries += `{shard="0"}`
	}
	if vals, _ := scrape(t, first); vals[stoppedSeries] != 1 {
		t.Fatalf("%s %v on the node whose disk is full, want 1", stoppedSeries, vals[stoppedSeries])
	}
	if rep := first.Status(); !rep.Node.Stopped {
		t.Fatalf("GET /sluice/v1/cluster of the node whose disk is full: %+v, want stopped", rep.Node)
	}
	// The leader's view (the dashboard's Cluster page) says so too,
	// though the member, its shard 0 stopped, knows no leader to report
	// to: the leader probes it (silent.go).
	memberStopped := func(n *Node) (bool, error) {
		v, err := n.leaderView(ctx)
		if err != nil {
			return false, err
		}
		for _, m := range v.Members {
			if m.ID == first.opts.Cluster.NodeID {
				return m.Stopped, nil
			}
		}
		return false, fmt.Errorf("member %d not in the view", first.opts.Cluster.NodeID)
	}
	poll.CheckFor(t, 15*time.Second, poll.True("the leader's view shows the member stopped", func() bool {
		stopped, err := memberStopped(via)
		return err == nil && stopped
	}))
	if failed.starts.Load() != 1 {
		t.Fatal("the node restarted while its disk was still full")
	}

	failed.fs.Heal()
	poll.CheckFor(t, 30*time.Second, poll.True("the node restarted in place", func() bool { return failed.starts.Load() == 2 }))
	again := failed.cur.Load()
	if again.HTTPAddr() != addr || again.AMQPAddr() != amqpAddr || again.raftAddr != first.raftAddr {
		t.Fatalf("restarted on %s, %s and %s; want %s, %s and %s", again.HTTPAddr(), again.AMQPAddr(), again.raftAddr, addr, amqpAddr, first.raftAddr)
	}
	poll.CheckFor(t, 30*time.Second, poll.True("/health 200 on the restarted node", func() bool {
		code, _ := health(addr)
		return code == http.StatusOK
	}))
	poll.CheckFor(t, 15*time.Second, poll.True("the leader's view no longer shows the member stopped", func() bool {
		stopped, err := memberStopped(via)
		return err == nil && !stopped
	}))
	if vals, _ := scrape(t, again); vals[stoppedSeries] != 0 {
		t.Fatalf("%s %v after the restart in place, want 0", stoppedSeries, vals[stoppedSeries])
	} else if _, ok := vals[stoppedSeries]; !ok {
		t.Fatalf("no %s in the restarted node's /metrics", stoppedSeries)
	}
	// It catches up: its state store applies what the leader has
	// committed. (Its /health may say 200 a moment before: it counts its
	// lag against the leader's commit index only from its first report,
	// and it allows 1,000 entries.)
	leader := via
	for _, m := range members {
		if n := m.cur.Load(); n.raft.Status().Role == "leader" {
			leader = n
		}
	}
	commit := leader.raft.Status().Commit
	poll.CheckFor(t, 10*time.Second, poll.True("the restarted node applied the leader's commit index", func() bool {
		return again.raft.Status().Applied >= commit
	}))
	if snapshot && !strings.Contains(failed.logs.String(), "raftstore: installed a snapshot") {
		t.Fatal("the restarted member caught up without a snapshot; the case meant to cut the leader's log past it")
	}
	c2 := retryingClient(addr)
	if err := send(c2, "after"); err != nil {
		t.Fatalf("send through the restarted node: %v", err)
	}
	got := receiveAll(t, c2, *q.QueueUrl)
	for b := range acked {
		if !got[b] {
			t.Errorf("acknowledged %q lost across the full disk and the restart in place (received %d of %d)", b, len(got), len(acked))
		}
	}
}

// TestFullDiskClassification: a shard stopped by a write that found the
// disk full is restarted in place once space is back; one stopped by a
// failed sync is not (the kernel may have dropped what it wrote), however
// long Supervise waits.
func TestFullDiskClassification(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arm     func(*pebblestore.FaultFS)
		restart bool
	}{
		{"write-ENOSPC", func(fs *pebblestore.FaultFS) { fs.FailWrites(syscall.ENOSPC) }, true},
		{"sync-ENOSPC", func(fs *pebblestore.FaultFS) { fs.FailSyncs(syscall.ENOSPC) }, false},
		{"write-EIO", func(fs *pebblestore.FaultFS) { fs.FailWrites(syscall.EIO) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pebblestore.NewFaultFS(vfs.Default)
			fs.OnlyWAL(true)
			n, _ := soloNode(t, io.Discard, func(o *server.Options) { o.StoreFS = fs })
			c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
			q, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("q")})
			if err != nil {
				t.Fatal(err)
			}
			tc.arm(fs)
			if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x")}); err == nil {
				t.Fatal("a send was acknowledged although its Raft log write failed")
			}
			poll.CheckFor(t, 10*time.Second, poll.True("the Raft node stopped", func() bool { return n.raft.Failure() != nil }))
			if got := n.failedOnFullDisk(); got != tc.restart {
				t.Fatalf("failedOnFullDisk %v after %s (%v), want %v", got, tc.name, n.raft.Failure(), tc.restart)
			}
			fs.Heal()
			ctx, cancel := context.WithTimeout(context.Background(), 3*fullDiskPoll)
			defer cancel()
			if back := n.AwaitSpaceAfterFullDisk(ctx); back != tc.restart {
				t.Fatalf("AwaitSpaceAfterFullDisk %v, want %v", back, tc.restart)
			}
		})
	}
}

// retryingClient is an SQS client of the node at addr whose SDK retries
// up to 10 times (a 503 while a leader is elected).
func retryingClient(addr string) *sqs.Client {
	return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + addr), Region: "us-east-1", RetryMaxAttempts: 10,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
}

// receiveAll receives (without deleting) until two receives of a second
// come back empty, and returns the bodies seen.
func receiveAll(t *testing.T, c *sqs.Client, url string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for empty := 0; empty < 2; {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range out.Messages {
			got[*m.Body] = true
		}
	}
	return got
}

// TestSuperviseRestartsEveryNodeAfterFullDisk: every member's disk fills
// at once (another process filled a disk they share, say); the cluster
// stops acknowledging, every member's Raft node stops (the leader's on
// its next append, the others' on their votes), and none restarts while
// the disks stay full. Once space is back every member restarts in
// place, they elect a leader among themselves, and every send
// acknowledged before is there.
func TestSuperviseRestartsEveryNodeAfterFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("three restarts in place; runs without -short (make test)")
	}
	members := superviseThree(t, nil)
	first := make([]*Node, len(members))
	for i, m := range members {
		first[i] = m.cur.Load()
	}
	c := retryingClient(first[0].HTTPAddr())
	ctx := context.Background()
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("all-full")})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for i := range 30 {
		b := fmt.Sprint("before-", i)
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
		acked[b] = true
	}
	for _, m := range members {
		m.fs.FailWrites(syscall.ENOSPC)
	}
	once := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + first[1].HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	for i := 0; ; i++ {
		// Sends fail once the leader's log write fails; one that was
		// acknowledged first counts.
		b := fmt.Sprint("during-", i)
		_, err := once.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(b)})
		if err != nil {
			break
		}
		acked[b] = true
		if i > 1000 {
			t.Fatal("sends still acknowledged with every member's disk full")
		}
	}
	// A member stops once a write of its log fails: the leader at once,
	// the others when they campaign (a vote is written before it is
	// cast) or append a new leader's entries.
	poll.CheckFor(t, 20*time.Second, poll.True("every member's Raft node stopped", func() bool {
		for _, n := range first {
			if n.raft.Failure() == nil {
				return false
			}
		}
		return true
	}))
	for i, m := range members {
		if m.starts.Load() != 1 {
			t.Fatalf("node %d restarted while its disk was still full", i+1)
		}
	}
	for _, m := range members {
		m.fs.Heal()
	}
	poll.CheckFor(t, 30*time.Second, poll.True("every member restarted in place", func() bool {
		for _, m := range members {
			if m.starts.Load() < 2 {
				return false
			}
		}
		return true
	}))
	poll.CheckFor(t, 60*time.Second, poll.True("a serving leader after space came back", func() bool {
		for _, m := range members {
			if _, _, ok := m.cur.Load().target(0); !ok {
				return false
			}
		}
		return true
	}))
	c2 := retryingClient(members[2].cur.Load().HTTPAddr())
	if _, err := c2.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("after")}); err != nil {
		t.Fatalf("send after space came back: %v", err)
	}
	acked["after"] = true
	got := receiveAll(t, c2, *q.QueueUrl)
	for b := range acked {
		if !got[b] {
			t.Errorf("acknowledged %q lost (received %d of %d)", b, len(got), len(acked))
		}
	}
}
