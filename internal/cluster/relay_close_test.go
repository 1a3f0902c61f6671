package cluster

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// relayedConn dials n's public AMQP listener, declares queue q (so that
// the connection is open and has carried frames) and returns the
// connection with its close notifications.
func relayedConn(t *testing.T, n *Node, q string) (*amqp.Connection, chan *amqp.Error) {
	t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@" + n.AMQPAddr() + "/")
	if err != nil {
		t.Fatalf("AMQP through node %d: %v", n.opts.Cluster.NodeID, err)
	}
	t.Cleanup(func() { _ = conn.Close() }) // already closed by the broker when the test passes
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	}
	if err != nil {
		t.Fatalf("declare through node %d: %v", n.opts.Cluster.NodeID, err)
	}
	return conn, closed
}

// wantForced waits for the broker to close a connection with 320
// CONNECTION_FORCED and a reply text containing text.
func wantForced(t *testing.T, who string, closed chan *amqp.Error, text string) {
	t.Helper()
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced || !e.Server || !strings.Contains(e.Reason, text) {
			t.Fatalf("%s: connection ended with %v, want the broker's 320 CONNECTION_FORCED saying %q", who, e, text)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the connection was not closed", who)
	}
}

// TestRelayedConnectionsClosedWith320: an AMQP client relayed to a
// leader gets connection.close 320 CONNECTION_FORCED, as RabbitMQ's
// clients get when a node stops, rather than a bare connection reset,
// whichever way its relay ends:
//   - the leader's side vanishes without a word (a killed leader; here the
//     connections of its internal AMQP link are dropped): the relay says
//     so itself;
//   - the leader changes: the old leader's server or the relay says so;
//   - the node relaying it stops gracefully: "shutdown".
//
// The client reconnects to the new leader through the same address.
func TestRelayedConnectionsClosedWith320(t *testing.T) {
	ports := brokertest.ReservePorts(t, 3) // each node's internal AMQP listener
	links := make([]*cuttableLink, 3)
	for i := range links {
		links[i] = newCuttableLink(t, ports[i])
	}
	nodes, stop := threeStoppableNodes(t, func(o *server.Options) {
		i := o.Cluster.NodeID - 1
		o.Cluster.InternalAMQPListen = ports[i]
		o.Cluster.InternalAMQPAdvertise = links[i].ln.Addr().String()
	})
	leader, followers := leaderAndFollowers(t, nodes)

	_, vanished := relayedConn(t, followers[0], "q1")
	links[leader.opts.Cluster.NodeID-1].drop()
	wantForced(t, "the leader's side vanishing", vanished, "leader went away")

	// A leader change reaches the connections relayed to the old leader.
	viaFollower, fClosed := relayedConn(t, followers[1], "q2")
	handOver(t, nodes, 0, followers[1].opts.Cluster.NodeID)
	wantForced(t, "a leader change", fClosed, "")
	if !viaFollower.IsClosed() {
		t.Fatal("a connection closed by the broker still reports open")
	}

	// The same address serves again, on the new leader.
	var again *amqp.Connection
	poll.CheckFor(t, 30*time.Second, func() error {
		c, err := amqp.Dial("amqp://guest:guest@" + followers[0].AMQPAddr() + "/")
		if err != nil {
			return err
		}
		ch, err := c.Channel()
		if err == nil {
			_, err = ch.QueueDeclarePassive("q1", true, false, false, false, nil)
		}
		if err != nil {
			_ = c.Close() // retried
			return err
		}
		again = c
		return nil
	})
	closed := again.NotifyClose(make(chan *amqp.Error, 1))
	if err := stop(int(followers[0].opts.Cluster.NodeID - 1)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	wantForced(t, "its node stopping", closed, "shutdown")
}

// feedAll passes stream through a fresh tracker in the chunks that cuts
// (ascending offsets into stream) make.
func feedAll(stream []byte, cuts ...int) frameTracker {
	var t frameTracker
	at := 0
	for _, c := range cuts {
		c = max(at, min(c, len(stream)))
		t.feed(stream[at:c])
		at = c
	}
	t.feed(stream[at:])
	return t
}

func TestFrameTracker(t *testing.T) {
	start := []byte("\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x0a\xce") // connection.start (args left out)
	body := []byte("\x03\x00\x01\x00\x00\x00\x03abc\xce")
	heartbeat := []byte("\x08\x00\x00\x00\x00\x00\x00\xce")
	closeOK := []byte("\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x33\xce")
	closeOnChannel := []byte("\x01\x00\x01\x00\x00\x00\x04\x00\x0a\x00\x32\xce") // same ids, channel 1: not a connection.close

	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	var empty frameTracker
	if empty.canClose() {
		t.Error("a connection that has carried no frame can be closed")
	}
	open := join(start, body, heartbeat, closeOnChannel)
	for cut := range len(open) + 1 {
		tr := feedAll(open, cut)
		if !tr.canClose() || tr.frames != 4 {
			t.Fatalf("split at %d: canClose %v after %d frames, want true after 4", cut, tr.canClose(), tr.frames)
		}
		if mid := feedAll(open[:len(open)-1], cut); mid.canClose() {
			t.Fatalf("split at %d: canClose inside a frame", cut)
		}
	}
	if tr := feedAll(join(start, closeOK)); tr.canClose() || !tr.closed {
		t.Error("the leader's own close-ok leaves the connection closable by the relay")
	}
	if tr := feedAll([]byte("AMQP\x00\x00\x09\x01")); tr.canClose() || !tr.broken {
		t.Error("a protocol header read as frames")
	}
	if tr := feedAll(join(start, []byte("\x01\x00\x00\x00\x00\x00\x00\x00"))); tr.canClose() || !tr.broken {
		t.Error("a frame without its end octet accepted")
	}
	f, err := closeFrame(reasonLeaderChanged)
	if err != nil {
		t.Fatal(err)
	}
	if tr := feedAll(join(start, f)); !tr.closed || tr.broken {
		t.Errorf("the relay's own connection.close is not one: %+v", tr)
	}
}

// FuzzFrameTracker: the tracker's verdict on a stream does not depend on
// how the stream is cut into reads, and it never panics.
func FuzzFrameTracker(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x0a\xce\x08\x00\x00\x00\x00\x00\x00\xce"), 3, 13)
	f.Add([]byte("AMQP\x00\x00\x09\x01"), 1, 2)
	f.Add([]byte("\x03\x00\x01\xff\xff\xff\xff"), 0, 5)
	f.Fuzz(func(t *testing.T, stream []byte, a, b int) {
		if a < 0 || b < 0 {
			return
		}
		if a > b {
			a, b = b, a
		}
		whole := feedAll(stream)
		cut := feedAll(stream, a, b)
		if whole.canClose() != cut.canClose() || whole.frames != cut.frames || whole.closed != cut.closed || whole.broken != cut.broken {
			t.Fatalf("in one read %+v, cut at %d and %d %+v", whole, a, b, cut)
		}
	})
}

// TestDeposedRelayEndsWithAStuckClient: a relay whose client reads
// nothing (a paused consumer with deliveries queued towards it) still ends
// when its leader is deposed, instead of holding its goroutines and the
// client's slot until the client reads again.
func TestDeposedRelayEndsWithAStuckClient(t *testing.T) {
	client, app := net.Pipe() // app: the client program, which never reads
	up, leader := net.Pipe()
	t.Cleanup(func() { _ = app.Close(); _ = leader.Close() })
	r := &relay{client: client, upstream: up, clientDone: make(chan struct{})}
	go r.toLeader()
	ended := make(chan struct{})
	go func() { r.toClient(); close(ended) }()
	// Heartbeat frames from the leader: toClient reads them all at once,
	// then blocks writing them to the client (a pipe has no buffer).
	if _, err := leader.Write(bytes.Repeat([]byte("\x08\x00\x00\x00\x00\x00\x00\xce"), 100)); err != nil {
		t.Fatal(err)
	}
	r.depose(reasonLeaderChanged)
	select {
	case <-ended:
	case <-time.After(relayCloseWait + 10*time.Second):
		t.Fatal("the relay of a client that reads nothing outlived its leader")
	}
	select {
	case <-r.clientDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the relay's client side was not closed")
	}
}
