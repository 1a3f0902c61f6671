package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// The node handshake on the Raft transport (transport.go, package
// nodeauth): nodes sharing the secret form a group; a node with another
// secret or none is refused, and every refusal is counted.

var (
	testSecret  = bytes.Repeat([]byte("s"), nodeauth.MinSecretSize)
	otherSecret = bytes.Repeat([]byte("o"), nodeauth.MinSecretSize)
)

// authCluster starts n nodes, node i with secrets[i], each counting its
// refused handshakes in the returned counters.
func authCluster(t *testing.T, secrets [][]byte) (*cluster, []*atomic.Int64) {
	t.Helper()
	fails := make([]*atomic.Int64, len(secrets))
	for i := range fails {
		fails[i] = new(atomic.Int64)
	}
	c := startClusterTuned(t, len(secrets), false, func(i int, cfg *Config) {
		cfg.Secret = secrets[i]
		cfg.OnAuthFailure = func() { fails[i].Add(1) }
	})
	return c, fails
}

func TestSecretClusterReplicates(t *testing.T) {
	c, fails := authCluster(t, [][]byte{testSecret, testSecret, testSecret})
	li := c.leader(-1)
	if err := writeKV(c.nodes[li].Store(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		poll.CheckFor(t, 10*time.Second, func() error { return stateHas(nd, "k", "v") })
	}
	for i, f := range fails {
		if n := f.Load(); n != 0 {
			t.Fatalf("node %d refused %d handshakes between nodes sharing the secret", i+1, n)
		}
	}
}

// TestWrongOrNoSecretRefused: a third node with another secret, or none,
// never receives the group's data, and both sides count the refusals.
func TestWrongOrNoSecretRefused(t *testing.T) {
	for name, third := range map[string][]byte{"wrong": otherSecret, "none": nil} {
		t.Run(name, func(t *testing.T) {
			c, fails := authCluster(t, [][]byte{testSecret, testSecret, third})
			li := c.leader(2)
			if li == 2 {
				t.Fatal("the node without the secret leads")
			}
			if err := writeKV(c.nodes[li].Store(), "k", "v"); err != nil {
				t.Fatal(err)
			}
			other := 1 - li // the other node with the secret
			poll.CheckFor(t, 10*time.Second, func() error { return stateHas(c.nodes[other], "k", "v") })
			poll.CheckFor(t, 10*time.Second, func() error {
				if fails[li].Load() == 0 || fails[2].Load() == 0 {
					return fmt.Errorf("refusals counted: leader %d, outsider %d", fails[li].Load(), fails[2].Load())
				}
				return nil
			})
			if err := stateHas(c.nodes[2], "k", "v"); err == nil {
				t.Fatal("the node without the secret got the group's data")
			}
			if st := c.nodes[2].Status(); st.Leader != 0 || st.Applied >= c.nodes[li].Status().Applied {
				t.Fatalf("outsider status %+v: it heard from the group", st)
			}
		})
	}
}

// dialAuth opens a raw connection to node 1 of c and runs the handshake
// as node id with key.
func dialAuth(t *testing.T, c *cluster, key []byte, id uint64) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", c.peers[0].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := nodeauth.DialConn(conn, key, nodeauth.SurfaceRaft, id, 1); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return conn
}

// waitClosed waits for the other end to close conn.
func waitClosed(t *testing.T, conn net.Conn, within time.Duration) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("connection not closed by the node within %v: %v", within, err)
	}
}

// TestForgedFromCut: a peer that passes the handshake as node 2, then
// sends a message naming node 3 as its sender, is cut off and counted,
// and the message is not delivered.
func TestForgedFromCut(t *testing.T) {
	c, fails := authCluster(t, [][]byte{testSecret, testSecret, testSecret})
	c.leader(-1)
	conn := dialAuth(t, c, testSecret, 2)
	before := c.nodes[0].Status().Term
	f, err := appendFrame(nil, &pb.Message{Type: pb.MessageType_MsgVote.Enum(), To: new(uint64(1)), From: new(uint64(3)), Term: new(before + 100)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(f); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, conn, 10*time.Second)
	poll.CheckFor(t, 10*time.Second, func() error {
		if fails[0].Load() == 0 {
			return errors.New("the forged sender was not counted")
		}
		return nil
	})
	if got := c.nodes[0].Status().Term; got >= before+100 {
		t.Fatalf("term %d: the forged vote request was delivered", got)
	}
}

// TestJunkAndSilentHandshakesDropped: a peer that answers the hello with
// junk, one with the wrong secret, and one that sends nothing are all
// closed, the silent one within nodeauth.Timeout, and counted.
func TestJunkAndSilentHandshakesDropped(t *testing.T) {
	c, fails := authCluster(t, [][]byte{testSecret})
	c.leader(-1)
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", c.peers[0].RaftAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	junk := dial()
	if _, err := junk.Write(bytes.Repeat([]byte{0xff}, nodeauth.ProofSize)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, junk, 10*time.Second)

	wrong := dial()
	if _, err := nodeauth.DialConn(wrong, otherSecret, nodeauth.SurfaceRaft, 2, 1); !errors.Is(err, nodeauth.ErrRefused) {
		t.Fatalf("handshake with the wrong secret: %v, want ErrRefused", err)
	}

	silent := dial()
	waitClosed(t, silent, nodeauth.Timeout+10*time.Second)
	poll.CheckFor(t, 10*time.Second, func() error {
		if n := fails[0].Load(); n < 3 {
			return fmt.Errorf("%d refusals counted, want 3", n)
		}
		return nil
	})
	poll.CheckFor(t, 10*time.Second, func() error { return writeKV(c.nodes[0].Store(), "still", "works") })
}

// TestSecretRotationRolling: the secret changes from one to another by
// three rolling restarts, one node at a time (each node accepts the new
// secret; each dials with it, still accepting the old; each drops the
// old), and at every step the group stays writable, every node gets
// every write, and no handshake is refused.
func TestSecretRotationRolling(t *testing.T) {
	type keys struct{ own, extra []byte }
	cfg := []keys{{testSecret, nil}, {testSecret, nil}, {testSecret, nil}}
	var fails atomic.Int64
	c := startClusterTuned(t, 3, false, func(i int, conf *Config) {
		conf.Secret, conf.ExtraSecret = cfg[i].own, cfg[i].extra
		conf.OnAuthFailure = func() { fails.Add(1) }
	})
	check := replicates(t, c, &fails)
	check("start")
	for phase, next := range []keys{{testSecret, otherSecret}, {otherSecret, testSecret}, {otherSecret, nil}} {
		for i := range 3 {
			c.stop(i)
			cfg[i] = next
			c.restart(i)
			check(fmt.Sprintf("phase %d node %d", phase+1, i+1))
		}
	}
}

// TestEncryptionTransitionRolling turns encryption on in a running group
// by three rounds of rolling restarts (docs/operations.md): every node's
// listeners first take both kinds of dialer while it still dials plain,
// then it dials in TLS, then its listeners take TLS only. Writes
// replicate at every step and no handshake is refused; then back off the
// same way.
func TestEncryptionTransitionRolling(t *testing.T) {
	mode := []string{"plain", "plain", "plain"}
	var fails atomic.Int64
	c := startClusterTuned(t, 3, false, func(i int, conf *Config) {
		conf.Secret = testSecret
		conf.OnAuthFailure = func() { fails.Add(1) }
		if mode[i] == "plain" {
			conf.Encryption = nil
			return
		}
		e, err := nodeauth.NewEncryption()
		if err != nil {
			t.Fatal(err)
		}
		switch mode[i] {
		case "accept":
			e = e.Transition(false)
		case "dial":
			e = e.Transition(true)
		}
		conf.Encryption = e
	})
	check := replicates(t, c, &fails)
	check("start")
	for _, next := range []string{"accept", "dial", "tls", "dial", "accept", "plain"} {
		for i := range 3 {
			c.stop(i)
			mode[i] = next
			c.restart(i)
			check(fmt.Sprintf("%s, node %d", next, i+1))
		}
	}
}

// replicates returns a check for each step of a rolling change: a new
// key written through the leader reaches every node, and no handshake
// was refused (fails counts them).
func replicates(t *testing.T, c *cluster, fails *atomic.Int64) func(step string) {
	write := 0
	return func(step string) {
		t.Helper()
		li := c.leader(-1)
		k := fmt.Sprint("k", write)
		write++
		poll.CheckFor(t, 15*time.Second, func() error { return writeKV(c.nodes[li].Store(), k, step) })
		for _, nd := range c.nodes {
			poll.CheckFor(t, 15*time.Second, func() error { return stateHas(nd, k, step) })
		}
		if n := fails.Load(); n != 0 {
			t.Fatalf("%s: %d handshakes refused", step, n)
		}
	}
}
