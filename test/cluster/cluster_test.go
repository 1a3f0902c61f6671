// Package cluster runs three real `sluice server` processes as one Raft
// group on 127.0.0.1 and drives them with aws-sdk-go-v2 and amqp091-go
// through every node: any node serves, and killing the leader with SIGKILL
// loses no acknowledged message.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cli"
	"github.com/sluicemq/sluice/internal/cluster"
	"github.com/sluicemq/sluice/test/crash"
)

// TestMain builds the server once unless -short or SLUICE_BIN is set.
func TestMain(m *testing.M) { os.Exit(crash.Main(m, "sluice-cluster-bin-")) }

// node is one member process.
type node struct {
	id     uint64
	dir    string
	srv    *crash.Server
	amqp   string   // public AMQP address
	secret string   // the cluster secret file every node of the test shares
	args   []string // the flags it was started with (restart)
}

// writeSecret writes a fresh cluster secret file (32 random bytes,
// base64) into a temporary directory.
func writeSecret(t *testing.T) string {
	t.Helper()
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	path := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (n *node) sqs() *sqs.Client {
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String(n.srv.URL()),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		// A failover answers 503 (or drops a forwarded request) for a
		// moment; the SDK retries as it would against AWS.
		RetryMaxAttempts: 20,
	})
}

// status reads the node's own GET /sluice/v1/cluster.
func (n *node) status(ctx context.Context) (cluster.Report, error) {
	var rep cluster.Report
	err := crash.GetJSON(ctx, http.DefaultClient, n.srv.URL()+"/sluice/v1/cluster", &rep)
	return rep, err
}

// startCluster starts a three-node cluster, each node
// with its own temp data directory and public listeners on port 0, all
// sharing one cluster secret file.
func startCluster(t *testing.T, ctx context.Context, size int) []*node {
	t.Helper()
	return startClusterWith(t, ctx, size)
}

// startClusterWith is startCluster with extra flags for every node.
func startClusterWith(t *testing.T, ctx context.Context, size int, extra ...string) []*node {
	t.Helper()
	bin := crash.Binary(t)
	// Peers must know each other's Raft addresses before any of them
	// starts: the one place a port is reserved rather than passed as 0.
	raft := brokertest.ReservePorts(t, size)
	var peers []string
	for i, a := range raft {
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
	}
	nodes := make([]*node, size)
	errs := make([]error, size)
	secret := writeSecret(t)
	var wg sync.WaitGroup
	for i := range nodes {
		nodes[i] = &node{id: uint64(i + 1), dir: t.TempDir(), secret: secret}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Start returns once /health answers 200, which a node does
			// only once it knows a leader that serves: every node must be
			// starting.
			nodes[i].args = append([]string{
				"--node-id", strconv.Itoa(i + 1), "--peers", strings.Join(peers, ","), "--cluster-secret-file", secret, "--log-level", "debug"}, extra...)
			nodes[i].srv, errs[i] = crash.Start(ctx, bin, nodes[i].dir, 30*time.Second, nodes[i].args...)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.srv != nil {
				_ = n.srv.Kill() // the test is over; its outcome is already decided
			}
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node %d log:\n%s", n.id, crash.Tail(n.dir))
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	for _, n := range nodes {
		n.readAMQP(t)
	}
	return nodes
}

// readAMQP reads n's public AMQP address from its ready file.
func (n *node) readAMQP(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "ready.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		AMQP string `json:"amqp"`
	}
	if err := json.Unmarshal(b, &rf); err != nil || rf.AMQP == "" {
		t.Fatalf("node %d ready file %s: %v", n.id, b, err)
	}
	n.amqp = rf.AMQP
}

// restart starts n's process again on its data directory with the flags
// it was first started with (its public listeners on new ports), once
// the previous one has exited.
func (n *node) restart(t *testing.T, ctx context.Context) {
	t.Helper()
	srv, err := crash.Start(ctx, crash.Binary(t), n.dir, 30*time.Second, n.args...)
	if err != nil {
		t.Fatalf("restarting node %d: %v", n.id, err)
	}
	n.srv = srv
	n.readAMQP(t)
}

// awaitLeader polls the nodes' /sluice/v1/cluster until they all name the
// same leader for the same term, and that leader has advertised where it
// serves for that term; it returns the leader's id.
func awaitLeader(t *testing.T, ctx context.Context, nodes []*node, not uint64) uint64 {
	t.Helper()
	var leader uint64
	poll.CheckFor(t, 30*time.Second, func() error {
		leader = 0
		var term uint64
		for _, n := range nodes {
			rep, err := n.status(ctx)
			if err != nil {
				return fmt.Errorf("node %d: %v", n.id, err)
			}
			l := rep.Node.Leader
			switch {
			case l == 0 || l == not:
				return fmt.Errorf("node %d: leader %d", n.id, l)
			case leader != 0 && (l != leader || rep.Node.Term != term):
				return fmt.Errorf("node %d: leader %d term %d, others say %d term %d", n.id, l, rep.Node.Term, leader, term)
			}
			leader, term = l, rep.Node.Term
			for _, p := range rep.Peers {
				if p.ID == l && (p.Advertised == nil || p.Advertised.Term != term) {
					return fmt.Errorf("node %d: leader %d has not advertised for term %d", n.id, l, term)
				}
			}
		}
		return nil
	})
	return leader
}

// splitLeader returns the node with id leader and the others, in order.
func splitLeader(nodes []*node, leader uint64) (led *node, others []*node) {
	for _, n := range nodes {
		if n.id == leader {
			led = n
		} else {
			others = append(others, n)
		}
	}
	return led, others
}

// TestKillTheLeader sends through every node of a three-node cluster,
// kills the leader with SIGKILL, and receives through the survivors: every
// acknowledged message comes back, and nothing that was never sent.
func TestKillTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := startCluster(t, ctx, 3)
	leader := awaitLeader(t, ctx, nodes, 0)
	t.Logf("leader: node %d", leader)
	checkStatusCommand(t, ctx, nodes[0], leader)

	// Any node creates and serves the queue; each node's client asks for
	// the URL on its own node (it names the node it was asked through).
	const name = "cluster-orders"
	if _, err := nodes[0].sqs().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"VisibilityTimeout": "5"}}); err != nil {
		t.Fatal(err)
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		out, err := n.sqs().GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		urls[i] = *out.QueueUrl
	}

	const perNode = 30
	sent := map[string]bool{} // bodies acknowledged
	for k := range perNode {
		for i, n := range nodes {
			body := fmt.Sprintf("m-%d-via-%d", k, n.id)
			if _, err := n.sqs().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls[i]), MessageBody: aws.String(body)}); err != nil {
				t.Fatalf("send %s: %v", body, err)
			}
			sent[body] = true
		}
	}

	var survivors []*node
	var survivorURLs []string
	var victim *node
	for i, n := range nodes {
		if n.id == leader {
			victim = n
			continue
		}
		survivors = append(survivors, n)
		survivorURLs = append(survivorURLs, urls[i])
	}

	// Senders through the survivors keep going across the kill: each send
	// is acknowledged before, during (the SDK retries the 503s and dropped
	// connections of the election) or after it, or fails, and only the
	// acknowledged ones are owed.
	var (
		mu        sync.Mutex
		stop      = make(chan struct{})
		sendersWG sync.WaitGroup
		afterKill int
		killed    bool
	)
	for i, n := range survivors {
		sendersWG.Add(1)
		go func() {
			defer sendersWG.Done()
			c := n.sqs()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("live-%d-via-%d", k, n.id)
				sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				_, err := c.SendMessage(sctx, &sqs.SendMessageInput{QueueUrl: aws.String(survivorURLs[i]), MessageBody: aws.String(body)})
				cancel()
				mu.Lock()
				if err == nil {
					sent[body] = true
					if killed {
						afterKill++
					}
				}
				mu.Unlock()
			}
		}()
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(sent) < len(nodes)*perNode+20 {
			return fmt.Errorf("%d sent", len(sent))
		}
		return nil
	})
	mu.Lock()
	killed = true
	mu.Unlock()
	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	newLeader := awaitLeader(t, ctx, survivors, leader)
	t.Logf("killed node %d; new leader: node %d", leader, newLeader)
	// The new leader takes writes: wait for acknowledged sends after the
	// kill before stopping the senders.
	poll.CheckFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if afterKill < 20 {
			return fmt.Errorf("%d sends acknowledged since the kill", afterKill)
		}
		return nil
	})
	close(stop)
	sendersWG.Wait()

	got := map[string]bool{}
	unknown := []string{}
	poll.CheckFor(t, 40*time.Second, func() error {
		for i, n := range survivors {
			out, err := n.sqs().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(survivorURLs[i]), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				return fmt.Errorf("receive via node %d: %v", n.id, err)
			}
			for _, m := range out.Messages {
				if !sent[*m.Body] {
					unknown = append(unknown, *m.Body)
				}
				got[*m.Body] = true
				if _, err := n.sqs().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(survivorURLs[i]), ReceiptHandle: m.ReceiptHandle}); err != nil {
					return fmt.Errorf("delete via node %d: %v", n.id, err)
				}
			}
		}
		if missing := len(sent) - countIn(sent, got); missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not received yet", missing, len(sent))
		}
		return nil
	})
	if len(unknown) > 0 {
		t.Fatalf("received %d messages that were never sent: %q", len(unknown), unknown)
	}
	t.Logf("%d acknowledged sends (through 3 nodes, then through the 2 survivors across the kill); every one received through the survivors", len(sent))
}

func countIn(want, got map[string]bool) int {
	n := 0
	for k := range want {
		if got[k] {
			n++
		}
	}
	return n
}

// TestAMQPThroughFollowers publishes with confirms through one follower
// and consumes through another: both connections are relayed to the
// leader. Then it publishes more, kills the leader, sees both relayed
// connections closed, and consumes every confirmed message through a
// survivor from the new leader.
func TestAMQPThroughFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := startCluster(t, ctx, 3)
	leader := awaitLeader(t, ctx, nodes, 0)
	victim, followers := splitLeader(nodes, leader)
	pub, con := followers[0], followers[1]
	const q = "cluster-amqp"

	pc, pch := amqpChannel(t, pub)
	if _, err := pch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ctx, pch, q, "a", 50)
	cc, cch := amqpChannel(t, con)
	consumeAll(t, ctx, cch, q, "a", 50)
	t.Logf("published 50 with confirms through node %d, consumed them through node %d (leader: node %d)", pub.id, con.id, leader)

	// Confirmed but not yet consumed when the leader dies.
	publishConfirmed(t, ctx, pch, q, "b", 30)
	if err := cch.Cancel("", false); err != nil && !errors.Is(err, amqp.ErrClosed) {
		t.Fatal(err)
	}
	pClosed, cClosed := pc.NotifyClose(make(chan *amqp.Error, 1)), cc.NotifyClose(make(chan *amqp.Error, 1))
	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]chan *amqp.Error{"publisher": pClosed, "consumer": cClosed} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("the %s's connection relayed to the killed leader was not closed", what)
		}
	}
	newLeader := awaitLeader(t, ctx, followers, leader)
	_, cch2 := amqpChannel(t, con)
	consumeAll(t, ctx, cch2, q, "b", 30)
	t.Logf("killed node %d: both relayed connections closed; the 30 confirmed-but-unconsumed messages consumed through node %d from new leader node %d", leader, con.id, newLeader)
}

// amqpChannel connects to n's public AMQP listener (relayed to the
// leader) and opens a channel.
func amqpChannel(t *testing.T, n *node) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	c, err := amqp.Dial("amqp://guest:guest@" + n.amqp + "/")
	if err != nil {
		t.Fatalf("node %d: %v", n.id, err)
	}
	t.Cleanup(func() { _ = c.Close() }) // may be closed already; the outcome is decided
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

// publishConfirmed publishes prefix-0 … prefix-(total-1), each persistent,
// waiting for its confirm.
func publishConfirmed(t *testing.T, ctx context.Context, ch *amqp.Channel, q, prefix string, total int) {
	t.Helper()
	for i := range total {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(prefix + "-" + strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish %s-%d: confirmed=%v err=%v", prefix, i, ok, err)
		}
	}
}

// consumeAll consumes (and acks) until prefix-0 … prefix-(total-1) have
// all arrived; anything else is a message never published.
func consumeAll(t *testing.T, ctx context.Context, ch *amqp.Channel, q, prefix string, total int) {
	t.Helper()
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < total {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("deliveries closed after %d of %d", len(seen), total)
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(string(d.Body), prefix+"-")); err != nil || n < 0 || n >= total {
				t.Fatalf("unknown message %q", d.Body)
			}
			seen[string(d.Body)] = true
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("consumed %d of %d %s-* messages: %v", len(seen), total, prefix, ctx.Err())
		}
	}
}

// checkStatusCommand runs `sluice cluster status` against n and checks it
// names n, its role and the leader.
func checkStatusCommand(t *testing.T, ctx context.Context, n *node, leader uint64) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Cluster(ctx, []string{"status", "--endpoint", n.srv.URL()}, &cli.Env{Stdout: &out, Stderr: &errOut}); code != cli.ExitOK {
		t.Fatalf("sluice cluster status: exit %d: %s", code, errOut.String())
	}
	role := "follower"
	if n.id == leader {
		role = "leader"
	}
	head := fmt.Sprintf("node %d: %s, term ", n.id, role)
	if !strings.HasPrefix(out.String(), head) || !strings.Contains(out.String(), fmt.Sprintf(", leader %d,", leader)) {
		t.Fatalf("sluice cluster status printed:\n%s\nwant it to start %q and name leader %d", out.String(), head, leader)
	}
	// Every boot member is a voter; the table shows membership and lag.
	if !regexp.MustCompile(`(?m)^ID +RAFT +MEMBERSHIP +LEADER +MATCH +LAG +IN-SYNC `).MatchString(out.String()) ||
		len(regexp.MustCompile(`(?m)^\d+ +\S+ +voter `).FindAllString(out.String(), -1)) != 3 ||
		!strings.Contains(out.String(), "replication factor: 3 voters\n") {
		t.Fatalf("sluice cluster status printed:\n%s\nwant three voters under ID RAFT MEMBERSHIP LEADER MATCH LAG IN-SYNC, and the replication factor", out.String())
	}
	t.Logf("sluice cluster status:\n%s", out.String())
	// --json prints the node's whole answer.
	out.Reset()
	if code := cli.Cluster(ctx, []string{"status", "--json", "--endpoint", n.srv.URL()}, &cli.Env{Stdout: &out, Stderr: &errOut}); code != cli.ExitOK {
		t.Fatalf("sluice cluster status --json: exit %d: %s", code, errOut.String())
	}
	var rep cluster.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Node.ID != n.id || len(rep.Peers) != 3 || rep.Peers[0].Membership != "voter" {
		t.Fatalf("sluice cluster status --json printed %s (%v)", out.String(), err)
	}
}
