package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/server"
)

// secretFile writes a cluster secret file of content into a temporary
// directory.
func secretFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// leaderAndFollower returns the node that leads and one that follows it.
func leaderAndFollower(t *testing.T, nodes []*Node) (leader, follower *Node) {
	t.Helper()
	leader, followers := leaderAndFollowers(t, nodes)
	for _, n := range followers {
		if n.raft.Status().Leader != 0 {
			return leader, n
		}
	}
	t.Fatal("no follower knows the leader")
	return nil, nil
}

// TestSecretClusterServesAndRefusesOutsiders: a three-node cluster whose
// nodes share a secret serves SQS and AMQP through a follower (forwarded
// and relayed over the leader's internal listeners, with the node
// handshake); a client that dials the leader's internal HTTP or AMQP
// listener directly is refused and counted.
func TestSecretClusterServesAndRefusesOutsiders(t *testing.T) {
	secret, extra := secretFile(t, strings.Repeat("k", 40)), secretFile(t, strings.Repeat("e", 40))
	nodes := threeNodes(t, func(o *server.Options) { o.Cluster.SecretFile, o.Cluster.ExtraSecretFile = secret, extra })
	leader, follower := leaderAndFollower(t, nodes)
	ctx := context.Background()
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + follower.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 5,
		Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("authed")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("hello")}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
	if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].Body) != "hello" {
		t.Fatalf("receive through the follower: %v, %v", got, err)
	}

	// AMQP through the follower: the relay's handshake with the leader
	// passes, and the broker answers the protocol header.
	amqpGreets(t, follower.AMQPAddr())

	ad, _, ok := leader.target(0)
	if !ok {
		t.Fatal("the leader serves no advertisement")
	}
	// The extra secret (a rotation in progress) opens the internal
	// listener too; any other does not.
	for k, want := range map[string]bool{strings.Repeat("e", 40): true, strings.Repeat("z", 40): false} {
		conn, err := net.Dial("tcp", ad.SQS)
		if err != nil {
			t.Fatal(err)
		}
		_, err = nodeauth.DialConn(conn, nodeauth.Key(k), nodeauth.SurfaceHTTP, 9, 0)
		_ = conn.Close() // only the handshake's outcome matters
		if (err == nil) != want {
			t.Fatalf("handshake with key %.1q on the internal listener: %v, want success %v", k, err, want)
		}
	}
	// Raw HTTP and AMQP clients of the internal listeners: each sends
	// its protocol's first bytes (padded to a proof's length, so the
	// listener reads everything and closes cleanly), never a valid proof,
	// and gets the handshake's hello, not an answer. (Not http.Get: the
	// transport may read the hello as an unsolicited response and close
	// before writing, which is a silent close, not counted.)
	before, _ := scrape(t, leader)
	rawClient(t, ad.SQS, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	rawClient(t, ad.AMQP, "AMQP\x00\x00\x09\x01")
	poll.CheckFor(t, 10*time.Second, func() error {
		after, _ := scrape(t, leader)
		for _, s := range []string{"http", "amqp"} {
			k := fmt.Sprintf(`sluice_cluster_auth_failures_total{surface=%q}`, s)
			if after[k] <= before[k] {
				return fmt.Errorf("%s: %v, was %v", k, after[k], before[k])
			}
		}
		return nil
	})
	if after, _ := scrape(t, leader); after[`sluice_cluster_auth_failures_total{surface="raft"}`] != 0 {
		t.Fatalf("raft handshakes refused between nodes sharing the secret: %v", after[`sluice_cluster_auth_failures_total{surface="raft"}`])
	}
}

// TestOtherSecretNeverJoins: a node started with another secret never
// hears from the group: no leader, none of its data, and the group counts
// its attempts.
func TestOtherSecretNeverJoins(t *testing.T) {
	secret, other := secretFile(t, strings.Repeat("k", 40)), secretFile(t, strings.Repeat("o", 40))
	nodes, _ := startThree(t, func(o *server.Options) {
		o.Cluster.SecretFile = secret
		if o.Cluster.NodeID == 3 {
			o.Cluster.SecretFile = other
		}
	}, nil, 2)
	leader, _ := leaderAndFollower(t, nodes[:2])
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + leader.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 5,
		Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
	if _, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("outsider")}); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		vals, _ := scrape(t, leader)
		if v := vals[`sluice_cluster_auth_failures_total{surface="raft"}`]; v == 0 {
			return fmt.Errorf("the leader counted no refused raft handshake")
		}
		return nil
	})
	st := nodes[2].raft.Status()
	if st.Leader != 0 || st.Applied >= leader.raft.Status().Applied {
		t.Fatalf("the node with another secret heard from the group: %+v", st)
	}
}

// rawClient connects to addr, sends first padded with zeros to a proof's
// length, and checks that it reads only the listener's hello before the
// listener closes the connection.
func rawClient(t *testing.T, addr, first string) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	if _, err := raw.Write(append([]byte(first), bytes.Repeat([]byte{0}, nodeauth.ProofSize-len(first))...)); err != nil {
		t.Fatal(err)
	}
	if err := raw.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(raw)
	if err != nil || len(rest) != nodeauth.HelloSize {
		t.Fatalf("raw client %.8q of an internal listener read %d bytes (%v); want only the %d-byte hello, then the close", first, len(rest), err, nodeauth.HelloSize)
	}
}
