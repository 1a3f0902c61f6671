package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/testlog"
)

// lonelyNode starts node 1 of a three-node group whose other members never
// start: it can never have a leader.
func lonelyNode(t *testing.T, hold time.Duration, mods ...func(*server.Options)) *Node {
	t.Helper()
	raft := brokertest.ReservePorts(t, 3)
	o := server.DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = "127.0.0.1:0"
	o.Cluster = server.ClusterConfig{NodeID: 1, Peers: []server.ClusterPeer{{ID: 1, Raft: raft[0]}, {ID: 2, Raft: raft[1]}, {ID: 3, Raft: raft[2]}}}
	for _, mod := range mods {
		mod(&o)
	}
	n, err := New(Options{Server: o, HoldTimeout: hold, TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, n, "node 1")
	return n
}

// runNode runs n until the returned stop is called or the test ends, and
// reports Run's error (named by who) at the end of the test. stop ends Run
// and returns its error; it may be called more than once.
func runNode(t *testing.T, n *Node, who string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%s: run: %v", who, err)
		}
	})
	return stop
}

// TestNoLeaderHoldsThenRefuses: without a leader, a request waits for one
// for the hold timeout, then gets 503 (which SDKs retry), and an AMQP
// connection is closed; the node's own status still answers.
func TestNoLeaderHoldsThenRefuses(t *testing.T) {
	const hold = 300 * time.Millisecond
	n := lonelyNode(t, hold)

	start := time.Now()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/sluice/v1/queues")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // only the status matters
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("without a leader: status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if waited := time.Since(start); waited < hold {
		t.Fatalf("refused after %v, before the hold of %v", waited, hold)
	}
	// The node's own /health is not held: it answers for this node.
	if code, h, err := getHealth(n); err != nil || code != http.StatusServiceUnavailable || !h.failed("no_leader") || h.Node.ID != 1 {
		t.Fatalf("/health without a leader: %d %+v %v; want 503 no_leader", code, h, err)
	}

	c, err := net.Dial("tcp", n.AMQPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }() // already closed by the node, if the test passes
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// Closed with the protocol header unread: EOF or a reset, either way
	// nothing sent and no read timeout.
	b, err := io.ReadAll(c)
	var ne net.Error
	if len(b) != 0 || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("AMQP without a leader: read %q, %v; want the connection closed with nothing sent", b, err)
	}

	resp, err = http.Get("http://" + n.HTTPAddr() + "/sluice/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	var rep Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status: %d %v", resp.StatusCode, err)
	}
	if rep.Node.ID != 1 || rep.Node.Leader != 0 || rep.Node.Role == "leader" || len(rep.Peers) != 3 || rep.Public.HTTP != n.HTTPAddr() {
		t.Fatalf("status of a node without a leader: %+v", rep)
	}
}

// TestNewNeedsCluster: New refuses options without a [cluster] section,
// and bad cluster settings, before binding anything.
func TestNewNeedsCluster(t *testing.T) {
	o := server.DefaultOptions()
	o.DataDir = t.TempDir()
	if _, err := New(Options{Server: o}); err == nil {
		t.Fatal("New without [cluster] succeeded")
	}
	o.Cluster = server.ClusterConfig{NodeID: 4, Peers: []server.ClusterPeer{{ID: 1, Raft: "127.0.0.1:7101"}}}
	if _, err := New(Options{Server: o}); err == nil {
		t.Fatal("New with a node id missing from peers succeeded")
	}
}

// TestEvenFactorWarnsAtStart: a node started with replication_factor 2
// logs, before it serves, that one node down stops its shards' writes
// (server.ClusterConfig.FactorWarning's text, tested there for each
// factor).
func TestEvenFactorWarnsAtStart(t *testing.T) {
	logs := &testlog.Buffer{}
	soloNode(t, logs, func(o *server.Options) { o.Cluster.ReplicationFactor = 2 })
	if !strings.Contains(logs.String(), "level=WARN msg=\"cluster.replication_factor 2: a shard needs both of its voters") {
		t.Fatalf("no warning for a factor of 2 in the start's log:\n%s", logs)
	}
}

// soloNode starts a one-member cluster (it leads at once) and waits until
// it serves; stop cancels Run and returns its error.
func soloNode(t *testing.T, logs io.Writer, edit ...func(*server.Options)) (n *Node, stop func() error) {
	t.Helper()
	raft := brokertest.ReservePorts(t, 1)
	o := server.DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = "127.0.0.1:0"
	o.Cluster = server.ClusterConfig{NodeID: 1, Peers: []server.ClusterPeer{{ID: 1, Raft: raft[0]}}}
	for _, e := range edit {
		e(&o)
	}
	n, err := New(Options{Server: o, TickInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() }) // a test that stops it itself checks the error
	poll.CheckFor(t, 20*time.Second, poll.True("the node serves", func() bool { _, _, ok := n.target(0); return ok }))
	return n, stop
}

// TestSoloNodeServesAndStops: a one-member cluster leads, serves SQS
// through its public listener on the replicated store, and Run returns
// when its context ends.
func TestSoloNodeServesAndStops(t *testing.T) {
	n, stop := soloNode(t, io.Discard)
	ctx := context.Background()
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("solo")})
	if err != nil {
		t.Fatal(err)
	}
	// Queue URLs name the address the client used: the Host header is
	// forwarded as it came.
	if want := "http://" + n.HTTPAddr() + "/000000000000/solo"; *q.QueueUrl != want {
		t.Fatalf("queue URL %s, want %s", *q.QueueUrl, want)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("one")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
	if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "one" {
		t.Fatalf("receive: %+v %v", out, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestLeadStopsWhenAsked: lead called with its context already ended
// starts no server. Before the fix, a retry timer that had fired raced the
// ended context in a select, and half the time a fresh server started
// after the node had been told to stop (seen as "serving as leader" after
// "sluice cluster node stopping", and a shutdown held up by Advertise
// waiting for a quorum that was gone).
func TestLeadStopsWhenAsked(t *testing.T) {
	logs := &testlog.Buffer{}
	n, _ := soloNode(t, logs)
	// soloNode returns once the node routes to its server, which is a
	// moment before that server's "serving as leader" line is written.
	poll.CheckFor(t, 10*time.Second, poll.True("the node's own server logged", func() bool {
		return strings.Contains(logs.String(), "serving as leader")
	}))
	before := strings.Count(logs.String(), "serving as leader")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 32 {
		n.lead(ctx, 0, n.raft.Status().Term)
	}
	if after := strings.Count(logs.String(), "serving as leader"); after != before {
		t.Fatalf("lead with an ended context started %d servers", after-before)
	}
}

// threeNodes starts a three-member cluster in this process (edit applies
// to every member's options) and returns its nodes once one of them
// leads and serves.
func threeNodes(t *testing.T, edit func(*server.Options)) []*Node {
	t.Helper()
	nodes, _ := threeStoppableNodesWith(t, edit, nil)
	return nodes
}

// threeNodesWith is threeNodes with prepare, when not nil, called on each
// node after New and before Run (tests install hooks there).
func threeNodesWith(t *testing.T, edit func(*server.Options), prepare func(*Node)) []*Node {
	t.Helper()
	nodes, _ := threeStoppableNodesWith(t, edit, prepare)
	return nodes
}

// threeStoppableNodes is threeNodes that also returns a function stopping
// member i gracefully (Run's context ends) and returning Run's error.
func threeStoppableNodes(t *testing.T, edit func(*server.Options)) ([]*Node, func(i int) error) {
	t.Helper()
	return threeStoppableNodesWith(t, edit, nil)
}

// threeStoppableNodesWith is threeStoppableNodes with threeNodesWith's
// prepare.
func threeStoppableNodesWith(t *testing.T, edit func(*server.Options), prepare func(*Node)) ([]*Node, func(i int) error) {
	t.Helper()
	return startThree(t, edit, prepare, 3)
}

// startThree is threeStoppableNodesWith that waits only for the first
// ready nodes to route to a serving leader (a test whose last node cannot
// join passes 2).
func startThree(t *testing.T, edit func(*server.Options), prepare func(*Node), ready int) ([]*Node, func(i int) error) {
	t.Helper()
	return startThreeWith(t, edit, nil, prepare, ready)
}

// startThreeWith is startThree with opt, when not nil, called on each
// node's Options before New (i: its index).
func startThreeWith(t *testing.T, edit func(*server.Options), opt func(i int, o *Options), prepare func(*Node), ready int) ([]*Node, func(i int) error) {
	t.Helper()
	return startThreeOn(t, brokertest.NewPorts(t), edit, opt, prepare, ready)
}

// startThreeOn is startThreeWith that reserves the Raft ports from ports:
// a test that reserved fixed ports of its own there, not yet bound, gets
// Raft ports clear of them.
func startThreeOn(t *testing.T, ports *brokertest.Ports, edit func(*server.Options), opt func(i int, o *Options), prepare func(*Node), ready int) ([]*Node, func(i int) error) {
	t.Helper()
	raft := ports.Reserve(3)
	peers := []server.ClusterPeer{{ID: 1, Raft: raft[0]}, {ID: 2, Raft: raft[1]}, {ID: 3, Raft: raft[2]}}
	nodes := make([]*Node, 3)
	stops := make([]func() error, 3)
	for i := range nodes {
		o := server.DefaultOptions()
		o.DataDir = t.TempDir()
		o.SQSListen = "127.0.0.1:0"
		o.AMQPListen = "127.0.0.1:0"
		o.Cluster = server.ClusterConfig{NodeID: uint64(i + 1), Peers: peers}
		edit(&o)
		no := Options{Server: o, TickInterval: 10 * time.Millisecond, Logger: brokertest.FailureLog(t, fmt.Sprintf("node %d", i+1))}
		if opt != nil {
			opt(i, &no)
		}
		n, err := New(no)
		if err != nil {
			t.Fatal(err)
		}
		if prepare != nil {
			prepare(n)
		}
		stops[i] = runNode(t, n, fmt.Sprintf("node %d", i+1))
		nodes[i] = n
	}
	poll.CheckFor(t, 30*time.Second, routed(nodes[:ready]))
	return nodes, func(i int) error { return stops[i]() }
}

// routed is the condition that every one of nodes routes to a serving
// leader.
func routed(nodes []*Node) func() error {
	return poll.True("every node routes to a serving leader", func() bool {
		for _, n := range nodes {
			if _, _, ok := n.target(0); !ok {
				return false
			}
		}
		return true
	})
}

// TestGracefulStopHandsLeadershipOver: a leader stopped gracefully (a
// rolling restart) hands its leadership to a follower before its Raft node
// closes, so when Run returns another member already leads — without it
// the others would only start an election after their timeout — and the
// cluster serves through a survivor.
func TestGracefulStopHandsLeadershipOver(t *testing.T) {
	nodes, stop := threeStoppableNodes(t, func(*server.Options) {})
	li := -1
	for i, n := range nodes {
		if st := n.raft.Status(); st.Role == "leader" {
			li = i
		}
	}
	if li < 0 {
		t.Fatal("no leader")
	}
	old := nodes[li].raft.Status()
	if err := stop(li); err != nil {
		t.Fatal(err)
	}
	// No polling: the hand-over completed before Run returned.
	led := false
	for i, n := range nodes {
		if i == li {
			continue
		}
		st := n.raft.Status()
		if st.Leader != 0 && st.Leader != old.ID && st.Term > old.Term {
			led = true
		}
	}
	if !led {
		t.Fatalf("when the old leader (node %d, term %d) stopped, no survivor led yet: %+v / %+v",
			old.ID, old.Term, nodes[(li+1)%3].raft.Status(), nodes[(li+2)%3].raft.Status())
	}
	s := nodes[(li+1)%3]
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + s.HTTPAddr()), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("after-handover")}); err != nil {
		t.Fatal(err)
	}
}

// TestSigV4ThroughTheNode: with SQS credentials configured, a request signed
// for the address the client used verifies at the leader's server, whether
// the node it reached leads (it serves the request itself) or follows (it
// forwards it, the Host header the client signed unchanged); one signed
// with a wrong secret is refused either way.
func TestSigV4ThroughTheNode(t *testing.T) {
	nodes := threeNodes(t, func(o *server.Options) {
		o.SQSCredentials = []server.SQSCredential{{AccessKeyID: "AKIDCLUSTER", SecretAccessKey: "cluster-secret-key"}}
	})
	ctx := context.Background()
	for _, n := range nodes {
		st := n.raft.Status()
		role := "follower"
		if st.Leader == st.ID {
			role = "leader"
		}
		client := func(secret string) *sqs.Client {
			return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 3,
				Credentials: credentials.NewStaticCredentialsProvider("AKIDCLUSTER", secret, "")})
		}
		name := fmt.Sprintf("signed-%d", st.ID)
		if _, err := client("cluster-secret-key").CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
			t.Fatalf("signed request through node %d (%s): %v", st.ID, role, err)
		}
		_, err := client("not-the-secret").CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("forged")})
		if err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
			t.Fatalf("wrongly signed request through node %d (%s): %v, want SignatureDoesNotMatch", st.ID, role, err)
		}
	}
}

// TestNoLeaderAnswersInTheRequestsShape: the 503 a node gives while there
// is no leader is an SQS error the client understands: aws-sdk-go-v2
// (JSON protocol) reports ServiceUnavailable, not an unknown error, and a
// Query request gets an ErrorResponse with that code.
func TestNoLeaderAnswersInTheRequestsShape(t *testing.T) {
	n := lonelyNode(t, 100*time.Millisecond)
	cli := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + n.HTTPAddr()),
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
		Retryer:      aws.NopRetryer{},
	})
	_, err := cli.ListQueues(context.Background(), &sqs.ListQueuesInput{})
	var ae interface{ ErrorCode() string }
	if !errors.As(err, &ae) || ae.ErrorCode() != "ServiceUnavailable" {
		t.Fatalf("SDK error %v; want the code ServiceUnavailable", err)
	}
	resp, err := http.Post("http://"+n.HTTPAddr()+"/", "application/x-www-form-urlencoded", strings.NewReader("Action=ListQueues&Version=2012-11-05"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body) // a short read shows in the check below
	_ = resp.Body.Close()            // only the body matters
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "<Code>ServiceUnavailable</Code>") {
		t.Fatalf("Query request: %d %s", resp.StatusCode, body)
	}
	// Both refusals are counted in the node's own metrics.
	resp, err = http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body) // a short read shows in the check below
	_ = resp.Body.Close()
	if !strings.Contains(string(body), "\nsluice_cluster_forward_errors_total 2\n") {
		t.Fatalf("/metrics does not count the two refused requests:\n%s", body)
	}
}

// TestRelayRefusesPastThePerIPCap: a node relays at most
// amqp_max_connections_per_ip AMQP connections from one address; the next
// one is closed at accept (docs/security.md), while those admitted wait for
// a leader.
func TestRelayRefusesPastThePerIPCap(t *testing.T) {
	n := lonelyNode(t, time.Minute, func(o *server.Options) { o.AMQPMaxConnectionsPerIP = 2 })
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close() // the test is over
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", n.AMQPAddr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The two admitted connections are counted before a third is accepted:
	// wait until the node holds both.
	poll.CheckFor(t, 10*time.Second, poll.True("two relayed connections held", func() bool {
		held, _ := relayCounts(n)
		return held == 2
	}))
	c, err := net.Dial("tcp", n.AMQPAddr())
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, c)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("third connection from one address: read %v, want it closed at accept", err)
	}
	if held, _ := relayCounts(n); held != 2 {
		t.Fatalf("relayed %d after the refusal, want 2", held)
	}
}
