package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// relay is one public AMQP connection relayed to the leader's internal
// AMQP listener.
type relay struct {
	client, upstream net.Conn
	leader           uint64 // the node relayed to
	once             sync.Once
}

// close ends both sides (idempotent).
func (r *relay) close() {
	r.once.Do(func() {
		_ = r.client.Close() // closing is the whole point; there is nothing to report
		_ = r.upstream.Close()
	})
}

// serveAMQP accepts public AMQP connections and relays each to the
// leader, until ln is closed.
func (n *Node) serveAMQP(ln net.Listener) error {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// A transient accept error (EMFILE): wait a little, as
			// net/http does, rather than spinning or giving up.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			n.log.Warn("AMQP accept", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		ip := remoteIP(c)
		if !n.admit(ip) {
			n.log.Warn("AMQP connection refused: relay limit reached", "remote", c.RemoteAddr().String())
			_ = c.Close() // refused: nothing was read or written
			continue
		}
		go func() {
			defer n.release(ip)
			n.relayAMQP(c)
		}()
	}
}

// admit counts one more relayed connection from ip, unless the node's cap
// (MaxRelayedAMQP) or the per-IP cap (amqp_max_connections_per_ip) is
// reached or the node is stopping.
func (n *Node) admit(ip string) bool {
	perIP := n.opts.AMQPMaxConnectionsPerIP
	if perIP == 0 {
		perIP = 1024
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done || n.relayed >= MaxRelayedAMQP || (perIP > 0 && n.perIP[ip] >= perIP) {
		return false
	}
	n.perIP[ip]++
	n.relayed++
	return true
}

func (n *Node) release(ip string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.relayed--
	if n.perIP[ip]--; n.perIP[ip] <= 0 {
		delete(n.perIP, ip)
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// relayAMQP waits (up to the hold timeout) for a leader, dials its internal
// AMQP listener and copies bytes both ways until either side closes or
// the leader changes.
func (n *Node) relayAMQP(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), n.hold)
	ad, leader, err := n.route(ctx)
	if err == nil && ad.AMQP == "" {
		err = errors.New("the leader serves no AMQP")
	}
	var up net.Conn
	if err == nil {
		up, err = n.dialInternal(ctx, &net.Dialer{Timeout: 2 * time.Second}, nodeauth.SurfaceAMQP, ad.AMQP, leader)
	}
	cancel()
	if err != nil {
		n.log.Debug("AMQP connection not relayed", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close() // the client sees the connection end and retries
		return
	}
	r := &relay{client: c, upstream: up, leader: leader}
	n.mu.Lock()
	if n.done {
		n.mu.Unlock()
		r.close()
		return
	}
	n.relays[r] = struct{}{}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.relays, r)
		n.mu.Unlock()
	}()
	// The leader may have changed between route and registering: check
	// again, so a relay to a deposed leader never outlives the change.
	if _, now, ok := n.target(); !ok || now != leader {
		r.close()
		return
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c) // either side ending ends the relay; the error says nothing more
		r.close()
		close(copied)
	}()
	_, _ = io.Copy(c, up)
	r.close()
	<-copied
}

// closeRelays closes every relayed connection whose target matches.
func (n *Node) closeRelays(match func(leader uint64) bool) {
	n.mu.Lock()
	var doomed []*relay
	for r := range n.relays {
		if match(r.leader) {
			doomed = append(doomed, r)
		}
	}
	n.mu.Unlock()
	for _, r := range doomed {
		r.close()
	}
}
