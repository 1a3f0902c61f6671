package amqp

import (
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestSilentSocketsDoNotBlockLogin is the security issue's AMQP slot
// finding: silent sockets (connect, send nothing) held connection slots
// for the whole handshake timeout, so enough of them blocked a real
// login. Now they only compete for a few handshake slots, where the
// longest-waiting is closed first, and a real client logs in.
func TestSilentSocketsDoNotBlockLogin(t *testing.T) {
	b := startBroker(t, withOptions(Options{MaxConnections: 50, MaxHandshakes: 8}))
	for i := 0; i < 100; i++ {
		nc, err := net.Dial("tcp", b.ln.Addr().String())
		must(t, err)
		defer nc.Close()
	}
	poll.CheckFor(t, 5*time.Second, poll.True("the silent sockets to be accepted", func() bool { return b.srv.nextConn.Load() >= 100 }))
	b.srv.mu.Lock()
	if n := len(b.srv.slots.handshaking); n > 8 {
		t.Errorf("%d connections handshaking, cap 8", n)
	}
	b.srv.mu.Unlock()
	conn, err := amqp091.Dial(b.url)
	if err != nil {
		t.Fatalf("a real login with 100 silent sockets open: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	publish(t, ch, "", "", "ok")
}

// TestHandshakeTimeout: a socket that never finishes the handshake is
// closed after HandshakeTimeout.
func TestHandshakeTimeout(t *testing.T) {
	b := startBroker(t, withOptions(Options{HandshakeTimeout: 200 * time.Millisecond}))
	nc, err := net.Dial("tcp", b.ln.Addr().String())
	must(t, err)
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("a silent socket got data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a silent socket was not closed")
	}
}

// TestMaxConnectionsPerIP: one address gets at most its share.
func TestMaxConnectionsPerIP(t *testing.T) {
	b := startBroker(t, withOptions(Options{MaxConnectionsPerIP: 3}))
	var conns []*amqp091.Connection
	for i := 0; i < 3; i++ {
		c, err := amqp091.Dial(b.url)
		must(t, err)
		defer c.Close()
		conns = append(conns, c)
	}
	if c, err := amqp091.Dial(b.url); err == nil {
		c.Close()
		t.Fatal("a fourth connection from one address was accepted")
	}
	must(t, conns[0].Close())
	poll.CheckFor(t, 5*time.Second, poll.True("a slot to free", func() bool {
		c, err := amqp091.Dial(b.url)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}))
}
