package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/brokertest/tap"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/server"
)

// TestEncryptedCluster: with [cluster] encrypt, a three-node cluster
// serves SQS and AMQP through a follower (forwarded and relayed to the
// leader), a message body crosses no Raft link in the clear (every link
// passes through a tap that looks for it; without encrypt the same tap
// finds it, so the test can fail), and every internal listener — Raft,
// HTTP, AMQP — speaks TLS first and refuses a plain node handshake, even
// with the right secret.
func TestEncryptedCluster(t *testing.T) {
	for _, encrypt := range []bool{true, false} {
		t.Run(fmt.Sprintf("encrypt=%v", encrypt), func(t *testing.T) {
			const secretText = "0123456789abcdef0123456789abcdef-encrypt"
			secret := secretFile(t, secretText)
			real := brokertest.ReservePorts(t, 3)
			taps := make([]*tap.Tap, 3)
			peers := make([]server.ClusterPeer, 3)
			for i := range taps {
				taps[i] = tap.New(t, real[i])
				peers[i] = server.ClusterPeer{ID: uint64(i + 1), Raft: taps[i].Addr()}
			}
			var dialled atomic.Int64
			nodes := threeNodesWith(t, func(o *server.Options) {
				o.Cluster.SecretFile, o.Cluster.Encrypt = secret, encrypt
				o.Cluster.Peers, o.Cluster.RaftListen = peers, real[o.Cluster.NodeID-1]
			}, func(n *Node) { noPublicForwards(n, &dialled) })
			leader, follower := leaderAndFollower(t, nodes)

			ctx := context.Background()
			c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + follower.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 5,
				Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
			q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("sealed")})
			if err != nil {
				t.Fatal(err)
			}
			const body = "a canary body that only the nodes may read, 7f3a9c"
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)}); err != nil {
				t.Fatal(err)
			}
			got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
			if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].Body) != body {
				t.Fatalf("receive through the follower: %v, %v", got, err)
			}
			amqpGreets(t, follower.AMQPAddr())
			// A membership change asked of the follower reaches the leader
			// over the internal HTTP listener (TLS-only with encrypt, as
			// probed below), never its public one.
			if status, code := memberCall(t, follower, "DELETE", "/sluice/v1/cluster/members/9", "", ""); status != http.StatusNotFound || code != "MemberNotFound" {
				t.Fatalf("removing member 9 through the follower: %d %q, want 404 MemberNotFound from the leader", status, code)
			}
			if n := dialled.Load(); n != 0 {
				t.Fatalf("%d membership changes went to the leader's public listener", n)
			}

			// The send is acknowledged once a majority has it: at least one
			// follower's tap carried the entry.
			seen := false
			for _, p := range taps {
				seen = seen || p.Seen(body)
			}
			if seen == encrypt {
				t.Fatalf("encrypt=%v: the body seen in the clear on a Raft link: %v", encrypt, seen)
			}

			// Before the probes below, which the raft listener counts.
			if vals, _ := scrape(t, leader); vals[`sluice_cluster_auth_failures_total{surface="raft"}`] != 0 {
				t.Errorf("raft handshakes refused between the nodes: %v", vals[`sluice_cluster_auth_failures_total{surface="raft"}`])
			}
			ad, _, ok := leader.target(0)
			if !ok {
				t.Fatal("the leader serves no advertisement")
			}
			var wg sync.WaitGroup
			for _, l := range []struct{ surface, addr string }{
				{nodeauth.SurfaceRaft, real[leader.opts.Cluster.NodeID-1]},
				{nodeauth.SurfaceHTTP, ad.SQS},
				{nodeauth.SurfaceAMQP, ad.AMQP},
			} {
				// In parallel: a plain handshake with a node that encrypts
				// waits out the handshake timeout.
				wg.Add(1)
				go func() {
					defer wg.Done()
					plain := plainHandshake(t, l.addr, secretText, l.surface)
					if encrypted := tlsHandshake(t, l.addr); encrypted != encrypt || (plain == nil) == encrypt {
						t.Errorf("%s listener %s: TLS handshake %v, plain node handshake %v; want TLS %v", l.surface, l.addr, encrypted, plain, encrypt)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// amqpGreets checks that addr answers the AMQP protocol header with
// connection.start (a method frame, type 1).
func amqpGreets(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 1)
	if _, err := io.ReadFull(conn, frame); err != nil || frame[0] != 1 {
		t.Fatalf("AMQP through %s: %v, first byte %v; want connection.start", addr, err, frame)
	}
}

// tlsHandshake reports whether addr completes a TLS handshake.
func tlsHandshake(t *testing.T, addr string) bool {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only whether TLS is spoken
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// plainHandshake runs a plain node handshake with the right secret on
// addr and returns its error.
func plainHandshake(t *testing.T, addr, secret, surface string) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return err
	}
	defer func() { _ = c.Close() }()
	_, err = nodeauth.DialConn(c, nodeauth.Key(secret), surface, 9, 0)
	if err != nil && !strings.Contains(err.Error(), "[cluster] encrypt") && !errors.Is(err, nodeauth.ErrRefused) {
		t.Errorf("a plain handshake with %s failed without naming [cluster] encrypt: %v", addr, err)
	}
	return err
}

// TestEncryptionTransitionCluster: in the middle of each of the first two
// rounds of turning encryption on (docs/operations.md) — node 1 not yet
// restarted, nodes 2 and 3 restarted — the cluster serves SQS and AMQP
// through every node and refuses no handshake between its nodes. Round 1:
// node 1 plain, the others accepting both and dialing plain; round 2:
// node 1 so, the others accepting both and dialing TLS.
func TestEncryptionTransitionCluster(t *testing.T) {
	for round := 1; round <= 2; round++ {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) { transitionRound(t, round) })
	}
}

func transitionRound(t *testing.T, round int) {
	secret := secretFile(t, "0123456789abcdef0123456789abcdef-transition")
	nodes := threeNodes(t, func(o *server.Options) {
		o.Cluster.SecretFile = secret
		restarted := o.Cluster.NodeID != 1
		// Round r's setting on the restarted nodes, round r-1's on node 1.
		r := round
		if !restarted {
			r--
		}
		o.Cluster.EncryptTransition, o.Cluster.Encrypt = r >= 1, r >= 2
	})
	ctx := context.Background()
	for _, n := range nodes {
		c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", RetryMaxAttempts: 5,
			Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
		q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("halfway")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m")}); err != nil {
			t.Fatalf("send through node %d: %v", n.opts.Cluster.NodeID, err)
		}
		got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
		if err != nil || len(got.Messages) != 1 {
			t.Fatalf("receive through node %d: %v, %v", n.opts.Cluster.NodeID, got, err)
		}
		if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		amqpGreets(t, n.AMQPAddr())
	}
	// The leader's view shows each member's setting (the round it is in).
	want := map[int]string{1: "plain", 2: "accept-both, dial plain", 3: "accept-both, dial tls"}
	leader, _ := leaderAndFollower(t, nodes)
	poll.CheckFor(t, 10*time.Second, func() error {
		v, ok := leader.view()
		if !ok {
			return fmt.Errorf("node %d no longer leads", leader.opts.Cluster.NodeID)
		}
		for _, m := range v.Members {
			r := round
			if m.ID == 1 {
				r--
			}
			if m.Links != want[r+1] {
				return fmt.Errorf("member %d's links %q, want %q", m.ID, m.Links, want[r+1])
			}
		}
		return nil
	})
	for _, n := range nodes {
		vals, _ := scrape(t, n)
		for _, s := range []string{"raft", "http", "amqp"} {
			if v := vals[fmt.Sprintf(`sluice_cluster_auth_failures_total{surface=%q}`, s)]; v != 0 {
				t.Errorf("node %d refused %v %s handshakes", n.opts.Cluster.NodeID, v, s)
			}
		}
	}
}
