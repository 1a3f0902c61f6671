package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// relayCounts reads how many AMQP connections n holds on its public
// listener (admitted, not yet released) and how many of them it relays.
func relayCounts(n *Node) (held, relayed int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.relayed, len(n.relays)
}

// TestLeaderServesItsOwnAMQPConnections: a client connected to the
// leader's public AMQP listener is served by the leader's own server,
// without a relay through its internal listener; the connection still
// counts against the node's caps until it ends; at a leader change the
// leader's server closes it with 320 CONNECTION_FORCED; and the same
// address, now a follower's, relays the client's reconnection.
func TestLeaderServesItsOwnAMQPConnections(t *testing.T) {
	nodes := threeNodes(t, func(*server.Options) {})
	leader, followers := leaderAndFollowers(t, nodes)

	conn, closed := relayedConn(t, leader, "direct")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := ch.PublishWithContext(context.Background(), "", "direct", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatal("publish nacked")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no confirm")
	}
	d, ok, err := ch.Get("direct", true)
	if err != nil || !ok || string(d.Body) != "hello" {
		t.Fatalf("get: %v %v %q", err, ok, d.Body)
	}
	if held, relayed := relayCounts(leader); held != 1 || relayed != 0 {
		t.Fatalf("the leader holds %d public AMQP connections and relays %d, want 1 served directly", held, relayed)
	}

	handOver(t, nodes, 0, followers[0].opts.Cluster.NodeID)
	wantForced(t, "a leader change", closed, "shutdown")
	poll.CheckFor(t, 10*time.Second, func() error {
		if held, _ := relayCounts(leader); held != 0 {
			return fmt.Errorf("the old leader still counts %d public AMQP connections", held)
		}
		return nil
	})

	// The same address serves again, relayed to the new leader.
	poll.CheckFor(t, 30*time.Second, func() error {
		c, err := amqp.Dial("amqp://guest:guest@" + leader.AMQPAddr() + "/")
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }() // the test is done with it
		ch, err := c.Channel()
		if err == nil {
			_, err = ch.QueueDeclarePassive("direct", true, false, false, false, nil)
		}
		if err != nil {
			return err
		}
		if held, relayed := relayCounts(leader); held != 1 || relayed != 1 {
			return fmt.Errorf("the old leader holds %d public AMQP connections and relays %d, want 1 relayed", held, relayed)
		}
		return nil
	})
}

// TestLeaderServesDirectlyWithinThePerIPCap: the connections the leader
// serves itself count against amqp_max_connections_per_ip like relayed
// ones: past the cap the next is closed at accept, and once a served
// connection ends its place is given back (released when the leader's
// server is done with the socket, not when it took it over).
func TestLeaderServesDirectlyWithinThePerIPCap(t *testing.T) {
	nodes := threeNodes(t, func(o *server.Options) { o.AMQPMaxConnectionsPerIP = 1 })
	leader, _ := leaderAndFollowers(t, nodes)
	url := "amqp://guest:guest@" + leader.AMQPAddr() + "/"
	first, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	if held, relayed := relayCounts(leader); held != 1 || relayed != 0 {
		t.Fatalf("the leader holds %d public AMQP connections and relays %d, want 1 served directly", held, relayed)
	}
	if c, err := amqp.Dial(url); err == nil {
		_ = c.Close() // the test fails anyway
		t.Fatal("a second connection from one address was admitted past amqp_max_connections_per_ip = 1")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		c, err := amqp.Dial(url)
		if err != nil {
			return fmt.Errorf("after the first connection closed: %w", err)
		}
		return c.Close()
	})
}
