package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/selfsigned"
	"github.com/sluicemq/sluice/internal/cli"
	"github.com/sluicemq/sluice/internal/server"
)

// TestClusterTLS: with [tls] and amqps_listen on every node (and no plain
// AMQP listener), one group and three shards alike, a client reaches any
// node over HTTPS and AMQPS. Through the leader of shard 0 and through a
// follower, an SQS client creates a queue and gets its URL with https and
// the node it used, sends and receives; an AMQP client over TLS publishes
// with confirms and consumes what the other node's client published
// (relayed by the follower to the leader's internal listener, which takes
// nodes alone); plain HTTP is not served on the TLS listener; and a
// membership change asked of the follower reaches the leader's public
// listener over TLS (its answer is the leader's 404 MemberNotFound, not
// the 503 of a forward that failed). The node's status report says TLS
// and the AMQPS address. Then every node's certificate files are replaced
// by another certificate's, and all of it holds again with a client that
// trusts the new one alone (the follower checks the leader's new
// certificate against its own new file). It fails with the leader's
// server holding [tls] on its internal listeners, without the forwarded
// X-Forwarded-Proto (follower's URLs http), with the membership forward in
// plain HTTP, and with the follower's roots fixed at its start (after the
// replacement).
func TestClusterTLS(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			// The nodes' files: a copy of certificate A, replaced by B
			// below.
			certA, keyA, pool := selfsigned.Cert(t)
			certB, keyB, poolB := selfsigned.Cert(t)
			slot := selfsigned.NewSlot(t)
			slot.Put(certA, keyA)
			edit := func(o *server.Options) {
				o.TLS = server.TLSConfig{Cert: slot.CertPath, Key: slot.KeyPath}
				o.AMQPListen = ""
				o.AMQPSListen = "127.0.0.1:0"
				o.HTTPAuth.Tokens = []string{"tls-cluster-token-0123456789"}
			}
			var nodes []*Node
			if shards == 1 {
				nodes = threeNodes(t, edit)
			} else {
				nodes, _ = shardedNodesWith(t, edit)
			}
			leader, follower := leaderAndFollower(t, nodes)
			checkClusterTLS(t, leader, follower, pool)
			// A renewed certificate (every node's files replaced) is
			// served from the next connection on, and the follower
			// checks the leader's against the new one: the membership
			// forward still reaches it.
			slot.Put(certB, keyB)
			// New connections, as after the pool's idle timeout.
			follower.publicTransport.CloseIdleConnections()
			checkClusterTLS(t, leader, follower, poolB)
		})
	}
}

func checkClusterTLS(t *testing.T, leader, follower *Node, pool *x509.CertPool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, n := range []*Node{leader, follower} {
		if n.AMQPAddr() != "" || n.AMQPSAddr() == "" {
			t.Fatalf("node %d: amqp %q, amqps %q; want amqps alone", n.opts.Cluster.NodeID, n.AMQPAddr(), n.AMQPSAddr())
		}
		c := sqs.New(sqs.Options{BaseEndpoint: aws.String("https://" + n.HTTPAddr()), Region: "us-east-1", HTTPClient: hc, RetryMaxAttempts: 10,
			Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
		name := fmt.Sprintf("tls-%d", n.opts.Cluster.NodeID)
		q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatalf("CreateQueue over HTTPS through node %d: %v", n.opts.Cluster.NodeID, err)
		}
		if want := "https://" + n.HTTPAddr() + "/000000000000/" + name; aws.ToString(q.QueueUrl) != want {
			t.Fatalf("queue URL through node %d: %s, want %s", n.opts.Cluster.NodeID, aws.ToString(q.QueueUrl), want)
		}
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("over tls")}); err != nil {
			t.Fatal(err)
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "over tls" {
			t.Fatalf("receive over HTTPS through node %d: %+v, %v", n.opts.Cluster.NodeID, out, err)
		}
		// Plain HTTP on the TLS listener is not served.
		if resp, err := http.Get("http://" + n.HTTPAddr() + "/health"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("node %d answered plain HTTP on its TLS listener", n.opts.Cluster.NodeID)
			}
		}
	}

	// AMQP over TLS: the leader serves its own client, the follower
	// relays its client's; each consumes what the other published.
	dial := func(n *Node) *amqp.Channel {
		t.Helper()
		conn, err := amqp.DialTLS("amqps://guest:guest@"+n.AMQPSAddr()+"/", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("AMQPS to node %d: %v", n.opts.Cluster.NodeID, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	chs := []*amqp.Channel{dial(leader), dial(follower)}
	for i, ch := range chs {
		q := fmt.Sprintf("tls-amqp-%d", i)
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(q)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish over AMQPS to %s: confirmed %v, %v", q, ok, err)
		}
	}
	for i, ch := range chs {
		q := fmt.Sprintf("tls-amqp-%d", 1-i)
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok || string(d.Body) != q {
			t.Fatalf("basic.get of %s over AMQPS: %q %v %v", q, d.Body, ok, err)
		}
	}

	// A membership change asked of the follower is the leader's to
	// answer (over the link between nodes, members.go).
	req, err := http.NewRequest(http.MethodDelete, "https://"+follower.HTTPAddr()+"/sluice/v1/cluster/members/9", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tls-cluster-token-0123456789")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var eb struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&eb) // an answer without a code fails below
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || eb.Error.Code != "MemberNotFound" {
		t.Fatalf("removing member 9 through the follower: %d %+v, want 404 MemberNotFound from the leader", resp.StatusCode, eb.Error)
	}

	// The status report says how to reach the node.
	req, err = http.NewRequest(http.MethodGet, "https://"+follower.HTTPAddr()+"/sluice/v1/cluster", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tls-cluster-token-0123456789")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Public Addresses `json:"public"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !st.Public.TLS || st.Public.AMQPS != follower.AMQPSAddr() {
		t.Fatalf("cluster status of the follower: %d %+v, %v", resp.StatusCode, st.Public, err)
	}
	// Each node exports its certificate's expiry, once.
	for _, n := range []*Node{leader, follower} {
		req, err := http.NewRequest(http.MethodGet, "https://"+n.HTTPAddr()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tls-cluster-token-0123456789")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || strings.Count(string(b), "\n"+server.ExpiryMetric+" ") != 1 {
			t.Fatalf("node %d's /metrics (%d, %v): want %s once", n.opts.Cluster.NodeID, resp.StatusCode, err, server.ExpiryMetric)
		}
	}

	// `sluice cluster status` over HTTPS prints how to reach the node.
	var out, errOut strings.Builder
	cliClient := &http.Client{Transport: headerTransport{base: hc.Transport, set: map[string]string{"Authorization": "Bearer tls-cluster-token-0123456789"}}}
	if code := cli.Cluster(ctx, []string{"status", "--endpoint", "https://" + follower.HTTPAddr()}, &cli.Env{Stdout: &out, Stderr: &errOut, HTTPClient: cliClient}); code != cli.ExitOK {
		t.Fatalf("sluice cluster status over HTTPS: exit %d: %s", code, errOut.String())
	}
	if want := "public: https " + follower.HTTPAddr() + ", amqp -, amqps " + follower.AMQPSAddr() + "\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("sluice cluster status printed:\n%s\nwant the line %q", out.String(), want)
	}
}

// TestForwardKeepsTheProxysScheme: behind a TLS-terminating proxy (plain
// HTTP to the node, X-Forwarded-Proto: https), a follower's forward
// keeps the header the leader builds queue URLs from, as the leader does
// when it serves the client itself (Rewrite would drop it).
func TestForwardKeepsTheProxysScheme(t *testing.T) {
	nodes := threeNodes(t, func(*server.Options) {})
	leader, follower := leaderAndFollower(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []*Node{leader, follower} {
		hc := &http.Client{Transport: headerTransport{set: map[string]string{"X-Forwarded-Proto": "https"}}}
		c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + n.HTTPAddr()), Region: "us-east-1", HTTPClient: hc, RetryMaxAttempts: 10,
			Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
		name := fmt.Sprintf("proxied-%d", n.opts.Cluster.NodeID)
		q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if u := aws.ToString(q.QueueUrl); !strings.HasPrefix(u, "https://"+n.HTTPAddr()+"/") {
			t.Fatalf("queue URL through node %d behind a TLS proxy: %s", n.opts.Cluster.NodeID, u)
		}
	}
}

// headerTransport sets its headers on every request (a proxy's, or a
// token the client does not send itself) and sends it with base (nil:
// http.DefaultTransport).
type headerTransport struct {
	base http.RoundTripper
	set  map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.set {
		r.Header.Set(k, v)
	}
	return cmp.Or(h.base, http.DefaultTransport).RoundTrip(r)
}
