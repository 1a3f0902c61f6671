package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// getHealth GETs /health from n and returns its status code and body.
func getHealth(n *Node) (int, Health, error) {
	resp, err := http.Get("http://" + n.HTTPAddr() + "/health")
	if err != nil {
		return 0, Health{}, err
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	var h Health
	err = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode, h, err
}

// getReady GETs /ready from n and returns its status code, after
// checking the body names the node and, on 503, the failed checks.
func getReady(t *testing.T, n *Node) int {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
		Node   NodeStatus        `json:"node"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	ok := resp.StatusCode == http.StatusOK && body.Status == "ready" && len(body.Checks) == 0 ||
		resp.StatusCode == http.StatusServiceUnavailable && body.Status == "not ready" && len(body.Checks) > 0
	if !ok || body.Node.ID != n.opts.Cluster.NodeID {
		t.Fatalf("/ready of node %d: %d %+v", n.opts.Cluster.NodeID, resp.StatusCode, body)
	}
	return resp.StatusCode
}

// failed reports whether h names check among its failed checks.
func (h Health) failed(check string) bool {
	for _, c := range h.Checks {
		if c.Check == check {
			return true
		}
	}
	return false
}

// cuttableLink is a one-way TCP proxy to a node's listener (its Raft or
// internal listener): the node that dials it sends through it. sever
// closes its connections and every later one (a partition); silent keeps
// them open and forwards nothing either way, not even a close (a frozen or
// silently cut-off peer).
type cuttableLink struct {
	ln     net.Listener
	target string
	silent atomic.Bool
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCuttableLink(t *testing.T, target string) *cuttableLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cuttableLink{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close(); l.sever() }) // test teardown: nothing to report
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.pass(c)
		}
	}()
	return l
}

func (l *cuttableLink) pass(c net.Conn) {
	s, err := net.Dial("tcp", l.target)
	l.mu.Lock()
	if err != nil || l.cut {
		l.mu.Unlock()
		_ = c.Close() // refused: the sender redials
		if s != nil {
			_ = s.Close()
		}
		return
	}
	l.conns = append(l.conns, c, s)
	l.mu.Unlock()
	go l.copy(s, c) // ends when either side closes
	l.copy(c, s)
}

// copy forwards src to dst until either ends, then closes dst, dropping
// what arrives (and the end) while the link is silent.
func (l *cuttableLink) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = dst.Close() // the other side is gone: the connection is over
				return
			}
		}
		if err != nil {
			if !l.silent.Load() {
				_ = dst.Close() // the other side ended: so does this one
			}
			return
		}
	}
}

// sever cuts the link for good.
func (l *cuttableLink) sever() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	l.dropLocked()
}

// drop closes the connections passing now; new ones still pass.
func (l *cuttableLink) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked()
}

func (l *cuttableLink) dropLocked() {
	for _, c := range l.conns {
		_ = c.Close() // cutting: errors do not matter
	}
	l.conns = nil
}

// TestHealthIsEachNodes: GET /health on a node answers for that node. A
// follower cut off from the others (both directions of its Raft links)
// answers 503 naming the failed check, while the leader, which keeps a
// majority with the third node, and that node answer 200; the body keeps
// single-node /health's "status" and adds the node's Raft status. Before
// the fix every node forwarded /health to the leader, so the cut-off node
// answered the leader's 200 (or, once it knew no leader, a 503 only after
// the hold).
func TestHealthIsEachNodes(t *testing.T) {
	nodes, links := threeLinkedNodes(t, 10*time.Millisecond)
	var leader *Node
	poll.CheckFor(t, 30*time.Second, func() error {
		leader = nil
		for _, n := range nodes {
			code, h, err := getHealth(n)
			if err != nil || code != http.StatusOK || h.Status != "ok" {
				return fmt.Errorf("node %d: %d %+v %v", n.opts.Cluster.NodeID, code, h, err)
			}
			if h.Node.ID != n.opts.Cluster.NodeID || h.Node.Leader == 0 || h.Node.Term == 0 || h.Node.Applied == 0 || h.Node.Commit < h.Node.Applied {
				return fmt.Errorf("node %d: health's node fields %+v", n.opts.Cluster.NodeID, h.Node)
			}
			if h.Node.Role == "leader" {
				leader = n
			}
		}
		if leader == nil {
			return errors.New("no leader yet")
		}
		return nil
	})
	fi := 0
	for nodes[fi] == leader {
		fi++
	}
	follower := nodes[fi]
	isolate(&links, fi)
	poll.CheckFor(t, 30*time.Second, func() error {
		if code := getReady(t, follower); code != http.StatusServiceUnavailable {
			return fmt.Errorf("the cut-off follower's /ready: %d", code)
		}
		code, h, err := getHealth(follower)
		if err != nil || code != http.StatusServiceUnavailable || h.Status != "unavailable" || h.Error == "" ||
			!(h.failed("no_leader") || h.failed("leader_unreachable")) || h.Node.ID != follower.opts.Cluster.NodeID {
			return fmt.Errorf("the cut-off follower: %d %+v %v", code, h, err)
		}
		return nil
	})
	for _, n := range nodes {
		if n == follower {
			continue
		}
		poll.CheckFor(t, 30*time.Second, func() error {
			if code, h, err := getHealth(n); err != nil || code != http.StatusOK || len(h.Checks) != 0 {
				return fmt.Errorf("node %d beside the cut-off follower: %d %+v %v", n.opts.Cluster.NodeID, code, h, err)
			}
			if code := getReady(t, n); code != http.StatusOK {
				return fmt.Errorf("node %d's /ready beside the cut-off follower: %d", n.opts.Cluster.NodeID, code)
			}
			return nil
		})
	}
}

// TestDiskWatchEveryNode: every node watches its own disk. A follower
// below min_free_disk answers /health 503 (disk_low) and says so on its
// /metrics and in its reports; the leader keeps accepting sends while a
// quorum of voters has room, refuses them with the single node's low-disk
// error (503 ServiceUnavailable) once a majority is low, while receives and
// deletes work, and accepts again when space returns. The leader's own
// low disk refuses too. Before, only the leader's server watched its own
// disk: followers filled up unnoticed and the leader went on accepting.
func TestDiskWatchEveryNode(t *testing.T) {
	const minFree = 1 << 30
	var free [4]atomic.Uint64 // by node id
	for i := range free {
		free[i].Store(10 << 30)
	}
	nodes := threeNodesWith(t, func(o *server.Options) { o.MinFreeDisk = minFree }, func(n *Node) {
		id := n.opts.Cluster.NodeID
		n.freeBytes = func(string) (uint64, error) { return free[id].Load(), nil }
	})
	leader, followers := leaderAndFollowers(t, nodes)
	id := func(n *Node) uint64 { return n.opts.Cluster.NodeID }
	ctx := context.Background()
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + followers[0].HTTPAddr()), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), RetryMaxAttempts: 1})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("disk")})
	if err != nil {
		t.Fatal(err)
	}
	send := func(body string) error {
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)})
		return err
	}
	refused := func(err error) bool {
		var ae smithy.APIError
		return errors.As(err, &ae) && ae.ErrorCode() == "ServiceUnavailable" && strings.Contains(ae.ErrorMessage(), "disk is nearly full")
	}
	leaderGauges := func(low, refusing float64) func() error {
		return func() error {
			vals, _ := scrape(t, leader)
			if vals["sluice_cluster_voters_low_on_disk"] != low || vals["sluice_cluster_disk_refusing"] != refusing {
				return fmt.Errorf("leader: voters low %v refusing %v; want %v %v", vals["sluice_cluster_voters_low_on_disk"], vals["sluice_cluster_disk_refusing"], low, refusing)
			}
			return nil
		}
	}
	poll.CheckFor(t, 20*time.Second, leaderGauges(0, 0)) // every follower has reported room
	if err := send("before"); err != nil {
		t.Fatal(err)
	}

	// One follower low: its /health fails, the leader counts it, and two
	// voters of three still have room.
	f0 := followers[0]
	free[id(f0)].Store(100 << 20)
	poll.CheckFor(t, 20*time.Second, func() error {
		code, h, err := getHealth(f0)
		if err != nil || code != http.StatusServiceUnavailable || !h.failed("disk_low") || !h.Node.DiskLow {
			return fmt.Errorf("the low follower's health: %d %+v %v", code, h, err)
		}
		if vals, _ := scrape(t, f0); vals["sluice_cluster_disk_low"] != 1 || vals["sluice_disk_free_bytes"] != 100<<20 || vals["sluice_disk_min_free_bytes"] != minFree {
			return fmt.Errorf("the low follower's metrics: %v", vals)
		}
		return nil
	})
	poll.CheckFor(t, 20*time.Second, leaderGauges(1, 0))
	if code, h, err := getHealth(leader); err != nil || code != http.StatusOK {
		t.Fatalf("the leader beside one low follower: %d %+v %v", code, h, err)
	}
	if err := send("one low"); err != nil {
		t.Fatalf("send with one follower of three low: %v", err)
	}

	// Both followers low: only the leader has room, fewer than a quorum.
	f1 := followers[1]
	free[id(f1)].Store(100 << 20)
	poll.CheckFor(t, 20*time.Second, leaderGauges(2, 1))
	if err := send("majority low"); !refused(err) {
		t.Fatalf("send with a majority low: %v, want ServiceUnavailable (disk nearly full)", err)
	}
	// Receives and deletes go on: they free space.
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) == 0 {
		t.Fatalf("receive with a majority low: %+v %v", out, err)
	}
	for _, m := range out.Messages {
		if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatalf("delete with a majority low: %v", err)
		}
	}

	// Space back on one follower (above 125% of the watermark): a quorum
	// has room again.
	free[id(f1)].Store(10 << 30)
	poll.CheckFor(t, 20*time.Second, func() error { return send("space back") })
	poll.CheckFor(t, 20*time.Second, leaderGauges(1, 0))

	// The leader's own disk low: it refuses even with a quorum of room.
	free[id(f0)].Store(10 << 30)
	free[id(leader)].Store(100 << 20)
	poll.CheckFor(t, 20*time.Second, func() error {
		if err := send("leader low"); !refused(err) {
			return fmt.Errorf("send with the leader low: %v", err)
		}
		return nil
	})
	free[id(leader)].Store(10 << 30)
	poll.CheckFor(t, 20*time.Second, func() error { return send("all back") })
	poll.CheckFor(t, 20*time.Second, leaderGauges(0, 0))
}

// TestDiskVerdict: the leader's rule. A voter has room when its report
// (at most staleAfter old) says so; one whose reports stopped but which
// Raft heard from within staleAfter keeps its last report's verdict (room
// if none); one silent in Raft too has none, except in the first
// staleAfter of the leader's server, when reports have not arrived yet.
// New messages are refused when the leader's own disk is low or the voters
// with room are fewer than a quorum.
func TestDiskVerdict(t *testing.T) {
	now := time.Now()
	members := func(k int) raftstore.Status {
		st := raftstore.Status{ID: 1, Role: "leader"}
		for i := range k {
			st.Members = append(st.Members, raftstore.Member{ID: uint64(i + 1), Membership: raftstore.Voter})
		}
		return st
	}
	fresh := func(low bool) reported { return reported{st: NodeStatus{DiskLow: low}, at: now.Add(-time.Second)} }
	stale := reported{st: NodeStatus{}, at: now.Add(-staleAfter - time.Second)}
	old := now.Add(-time.Hour)
	staleLow := reported{st: NodeStatus{DiskLow: true}, at: now.Add(-staleAfter - time.Second)}
	for _, tc := range []struct {
		name       string
		voters     int
		selfLow    bool
		reports    map[uint64]reported
		since      time.Time
		wantLow    int
		wantRefuse bool
		heard      map[uint64]time.Time // Status.Heard
	}{
		{"one node, room", 1, false, nil, old, 0, false, nil},
		{"one node, low", 1, true, nil, old, 1, true, nil},
		{"three, all room", 3, false, map[uint64]reported{2: fresh(false), 3: fresh(false)}, old, 0, false, nil},
		{"three, one follower low", 3, false, map[uint64]reported{2: fresh(true), 3: fresh(false)}, old, 1, false, nil},
		{"three, both followers low", 3, false, map[uint64]reported{2: fresh(true), 3: fresh(true)}, old, 2, true, nil},
		{"three, the leader low", 3, true, map[uint64]reported{2: fresh(false), 3: fresh(false)}, old, 1, true, nil},
		{"three, one silent", 3, false, map[uint64]reported{2: stale, 3: fresh(false)}, old, 1, false, nil},
		{"three, one silent one low", 3, false, map[uint64]reported{2: stale, 3: fresh(true)}, old, 2, true, nil},
		{"three, never reported, old leadership", 3, false, nil, old, 2, true, nil},
		{"three, never reported, young leadership", 3, false, nil, now.Add(-time.Second), 0, false, nil},
		{"three, young leadership, one low", 3, false, map[uint64]reported{3: fresh(true)}, now.Add(-time.Second), 1, false, nil},
		// Reports cut, Raft alive: the last report stands.
		{"three, both silent over HTTP, heard in Raft", 3, false, map[uint64]reported{2: stale, 3: stale}, old, 0, false,
			map[uint64]time.Time{2: now.Add(-time.Second), 3: now}},
		{"three, never reported, heard in Raft", 3, false, nil, old, 0, false,
			map[uint64]time.Time{2: now, 3: now}},
		{"three, heard in Raft, last report low", 3, false, map[uint64]reported{2: staleLow, 3: stale}, old, 1, false,
			map[uint64]time.Time{2: now, 3: now}},
		{"three, heard in Raft, last reports low", 3, false, map[uint64]reported{2: staleLow, 3: staleLow}, old, 2, true,
			map[uint64]time.Time{2: now, 3: now}},
		{"three, heard in Raft too long ago", 3, false, map[uint64]reported{2: stale, 3: stale}, old, 2, true,
			map[uint64]time.Time{2: now.Add(-staleAfter - time.Second), 3: now.Add(-time.Hour)}},
		{"five, two low", 5, false, map[uint64]reported{2: fresh(true), 3: fresh(true), 4: fresh(false), 5: fresh(false)}, old, 2, false, nil},
		{"five, three low", 5, false, map[uint64]reported{2: fresh(true), 3: fresh(true), 4: fresh(true), 5: fresh(false)}, old, 3, true, nil},
		// A learner (id 4 here) takes no part in the quorum: silent or
		// low, it counts for nothing.
		{"three and a silent learner, one low", 3, false, map[uint64]reported{2: fresh(true), 3: fresh(false)}, old, 1, false, nil},
		{"three and a low learner, one low", 3, false, map[uint64]reported{2: fresh(true), 3: fresh(false), 4: fresh(true)}, old, 1, false, nil},
	} {
		n := &Node{reports: tc.reports}
		n.disk.low = tc.selfLow
		st := members(tc.voters)
		st.Heard = tc.heard
		if strings.Contains(tc.name, "learner") {
			st.Members = append(st.Members, raftstore.Member{ID: 4, Membership: raftstore.Learner})
		}
		low, refuse := n.diskVerdict(st, now, tc.since)
		if low != tc.wantLow || refuse != tc.wantRefuse {
			t.Errorf("%s: %d low, refuse %v; want %d, %v", tc.name, low, refuse, tc.wantLow, tc.wantRefuse)
		}
	}
}

// TestLeaderUnreachable: a follower whose Raft traffic flows but which
// cannot reach the leader's server (its status reports, and so its
// forwarded requests, fail) answers /health 503 leader_unreachable after
// staleAfter. At the leader it keeps its last report's verdict while Raft
// hears from it (it takes part in commits), so one more follower low on
// disk still leaves a quorum with room; once it is down too, the leader
// refuses new messages.
func TestLeaderUnreachable(t *testing.T) {
	var blocked [4]atomic.Bool // by node id
	var free [4]atomic.Uint64
	for i := range free {
		free[i].Store(10 << 30)
	}
	nodes, stop := threeStoppableNodesWith(t, func(o *server.Options) { o.MinFreeDisk = 1 << 30 }, func(n *Node) {
		id := n.opts.Cluster.NodeID
		n.freeBytes = func(string) (uint64, error) { return free[id].Load(), nil }
		dial := n.transport.DialContext
		n.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if blocked[id].Load() {
				return nil, errors.New("blocked by the test")
			}
			return dial(ctx, network, addr)
		}
	})
	leader, followers := leaderAndFollowers(t, nodes)
	cut, other := followers[0], followers[1]
	blocked[cut.opts.Cluster.NodeID].Store(true)
	cut.transport.CloseIdleConnections()
	poll.CheckFor(t, 30*time.Second, func() error {
		code, h, err := getHealth(cut)
		if err != nil || code != http.StatusServiceUnavailable || !h.failed("leader_unreachable") || h.Node.Leader != leader.opts.Cluster.NodeID {
			return fmt.Errorf("the follower cut from the leader's server: %d %+v %v", code, h, err)
		}
		return nil
	})
	if code, h, err := getHealth(other); err != nil || code != http.StatusOK {
		t.Fatalf("the other follower: %d %+v %v", code, h, err)
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		v, _ := leader.view()
		for _, m := range v.Members {
			if m.ID == cut.opts.Cluster.NodeID && m.ReportedMsAgo != nil && *m.ReportedMsAgo <= staleAfter.Milliseconds() {
				return fmt.Errorf("the cut follower's last report is not stale yet: %v ms", *m.ReportedMsAgo)
			}
		}
		return nil
	})
	// Its Raft traffic flows, so it takes part in commits: its last
	// report (room) stands, and one more follower low on disk leaves a
	// quorum with room. Until 2026-11-29 a follower silent over HTTP
	// counted as without room, and this refused every send with the
	// disk-full error while every disk had room.
	free[other.opts.Cluster.NodeID].Store(100 << 20)
	poll.CheckFor(t, 20*time.Second, func() error {
		if vals, _ := scrape(t, leader); vals["sluice_cluster_voters_low_on_disk"] != 1 {
			return fmt.Errorf("leader with one follower cut from its server and one low: %v low", vals["sluice_cluster_voters_low_on_disk"])
		}
		return nil
	})
	if vals, _ := scrape(t, leader); vals["sluice_cluster_disk_refusing"] != 0 {
		t.Fatalf("the leader refuses for disk with a quorum that has room: %v", vals)
	}
	// Raft silent too (the follower stopped): then it counts as without
	// room, and the leader refuses.
	if err := stop(int(cut.opts.Cluster.NodeID - 1)); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 30*time.Second, func() error {
		if vals, _ := scrape(t, leader); vals["sluice_cluster_voters_low_on_disk"] != 2 || vals["sluice_cluster_disk_refusing"] != 1 {
			return fmt.Errorf("leader with one follower down and one low: %v %v", vals["sluice_cluster_voters_low_on_disk"], vals["sluice_cluster_disk_refusing"])
		}
		return nil
	})
	free[other.opts.Cluster.NodeID].Store(10 << 30)
	poll.CheckFor(t, 20*time.Second, func() error {
		if vals, _ := scrape(t, leader); vals["sluice_cluster_disk_refusing"] != 0 {
			return errors.New("the leader still refuses with the other follower's room back")
		}
		return nil
	})
}

// leaderAndFollowers returns the node that leads now and the others.
func leaderAndFollowers(t *testing.T, nodes []*Node) (leader *Node, followers []*Node) {
	t.Helper()
	for _, n := range nodes {
		if st := n.raft.Status(); st.Leader == st.ID {
			leader = n
		} else {
			followers = append(followers, n)
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	return leader, followers
}

// threeLinkedNodes starts three nodes whose Raft links (each direction of
// each pair) pass through a cuttableLink, links[from][to]; public HTTP
// only, no disk watch, Raft ticks of tick.
func threeLinkedNodes(t *testing.T, tick time.Duration) ([]*Node, [3][3]*cuttableLink) {
	t.Helper()
	raft := brokertest.ReservePorts(t, 3)
	links := [3][3]*cuttableLink{}
	for i := range 3 {
		for j := range 3 {
			if i != j {
				links[i][j] = newCuttableLink(t, raft[j])
			}
		}
	}
	nodes := make([]*Node, 3)
	for i := range nodes {
		var peers []server.ClusterPeer
		for j := range 3 {
			addr := raft[j]
			if i != j {
				addr = links[i][j].ln.Addr().String()
			}
			peers = append(peers, server.ClusterPeer{ID: uint64(j + 1), Raft: addr})
		}
		o := server.DefaultOptions()
		o.DataDir = t.TempDir()
		o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
		o.MinFreeDisk = 0
		o.Cluster = server.ClusterConfig{NodeID: uint64(i + 1), Peers: peers}
		n, err := New(Options{Server: o, TickInterval: tick, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done }) // the cut-off node may not stop cleanly; the test is decided
		nodes[i] = n
	}
	return nodes, links
}

// isolate severs node i's Raft links, both directions, to every other node.
func isolate(links *[3][3]*cuttableLink, i int) {
	for j := range 3 {
		if j != i {
			links[i][j].sever()
			links[j][i].sever()
		}
	}
}

// TestHealthApplyLagAgainstTheLeadersCommit: a follower's own commit index
// goes no further than its log, so its /health measures its apply lag
// against the leader's commit index, which the leader's answer to each
// status report carries: the follower learns it within a report or two,
// and while it has applied more than maxHealthApplyLag entries less than
// that, /health answers 503 apply_lag (a follower catching up); a
// leader's index older than staleAfter counts no more.
func TestHealthApplyLagAgainstTheLeadersCommit(t *testing.T) {
	nodes := threeNodes(t, func(*server.Options) {})
	leader, followers := leaderAndFollowers(t, nodes)
	f := followers[0]
	want := leader.raft.Status().Commit
	poll.CheckFor(t, 10*time.Second, poll.True("the follower knows the leader's commit index", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.contact.commit >= want
	}))
	if code, h, err := getHealth(f); err != nil || code != http.StatusOK {
		t.Fatalf("the follower, caught up: %d %+v %v", code, h, err)
	}
	// The leader's commit index far ahead of what the follower applied
	// (as after a restart behind a busy leader): apply_lag, whatever its
	// own commit index says.
	behind := func(at time.Time) (int, Health) {
		t.Helper()
		var code int
		var h Health
		poll.CheckFor(t, 10*time.Second, func() error {
			st := f.raft.Status()
			f.mu.Lock()
			f.contact = contact{leader: st.Leader, at: at, commit: st.Applied + 5*maxHealthApplyLag}
			f.mu.Unlock()
			var err error
			if code, h, err = getHealth(f); err != nil {
				return err
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.contact.at != at {
				return errors.New("a report replaced the contact meanwhile")
			}
			return nil
		})
		return code, h
	}
	if code, h := behind(time.Now()); code != http.StatusServiceUnavailable || !h.failed("apply_lag") {
		t.Fatalf("a follower %d entries behind the leader's commit index: %d %+v", 5*maxHealthApplyLag, code, h)
	}
	if code, h := behind(time.Now().Add(-2 * staleAfter)); h.failed("apply_lag") {
		t.Fatalf("a leader's commit index older than staleAfter still counted: %d %+v", code, h)
	}
}
