package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// relay is one public AMQP connection relayed to the leader's internal
// AMQP listener.
type relay struct {
	client, upstream net.Conn
	leader           uint64 // the node relayed to

	reason     atomic.Pointer[string] // why the relay ends, once depose sets it
	clientDone chan struct{}          // closed when reading the client has ended
	once       sync.Once
}

// Reply texts of the connection.close (320 CONNECTION_FORCED) a relay
// writes to its client when the leader goes away (relay.finish).
const (
	reasonLeaderChanged = "CONNECTION_FORCED - the cluster's leader changed; reconnect"
	reasonLeaderGone    = "CONNECTION_FORCED - the cluster's leader went away; reconnect"
	reasonShutdown      = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
)

// relayCloseWait bounds how long a relay that has written its
// connection.close waits for the client's close-ok before it closes the
// socket.
const relayCloseWait = 2 * time.Second

// close ends both sides at once (idempotent).
func (r *relay) close() {
	r.once.Do(func() {
		_ = r.client.Close() // closing is the whole point; there is nothing to report
		_ = r.upstream.Close()
	})
}

// depose ends the relay because its leader is no longer the one to
// serve, for reason: the leader's side is closed, and the relay's
// leader→client copy then ends the client's side with a connection.close
// (finish).
func (r *relay) depose(reason string) {
	r.reason.CompareAndSwap(nil, &reason)
	// A client that is not reading may hold the copy in a write to it:
	// bound that write, so the relay ends anyway (finish then sees a
	// failed write and closes without a word).
	_ = r.client.SetWriteDeadline(time.Now().Add(relayCloseWait))
	_ = r.upstream.Close() // the copy reading it notices; nothing else to report
}

// toLeader copies the client's octets to the leader until the client's
// side ends. If the leader's side fails first, what the client still
// sends (its close-ok to the relay's connection.close) is read and
// dropped until the client ends or finish's read deadline passes.
func (r *relay) toLeader() {
	_, _ = io.Copy(r.upstream, r.client) // TCP to TCP: spliced in the kernel; how it ended is seen below
	// The leader's side gets nothing more; closing it also ends toClient
	// if the client ended first.
	_ = r.upstream.Close()
	buf := make([]byte, 512)
	for {
		if _, err := r.client.Read(buf); err != nil {
			break
		}
	}
	close(r.clientDone)
}

// toClient copies the leader's octets to the client, following their
// frames, until the leader's side ends, and then ends the relay (finish).
func (r *relay) toClient() {
	var t frameTracker
	buf := make([]byte, 32<<10)
	for {
		k, err := r.upstream.Read(buf)
		if k > 0 {
			w, werr := r.client.Write(buf[:k])
			t.feed(buf[:w])
			if werr != nil {
				// The client may hold part of a frame: no
				// connection.close can follow it.
				t.broken = true
				break
			}
		}
		if err != nil {
			break
		}
	}
	r.finish(&t)
}

// finish ends a relay whose leader's side has ended. A client whose
// connection the leader had opened and not begun to close, and which
// still reads, is told why with a connection.close 320 CONNECTION_FORCED
// written between two frames (what RabbitMQ sends when a node stops): its
// client library reports a connection error it can act on, not a
// connection reset. The relay then half-closes and waits up to
// relayCloseWait for the client's close-ok and its end, so that the
// connection.close is delivered rather than cut by a reset. Otherwise,
// and after that, both sides are closed.
func (r *relay) finish(t *frameTracker) {
	clientGone := false
	select {
	case <-r.clientDone:
		clientGone = true
	default:
	}
	if !clientGone && t.canClose() {
		reason := reasonLeaderGone
		if p := r.reason.Load(); p != nil {
			reason = *p
		}
		frame, err := closeFrame(reason)
		if err == nil {
			_ = r.client.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err = r.client.Write(frame); err == nil {
				if tc, ok := r.client.(interface{ CloseWrite() error }); ok {
					_ = tc.CloseWrite() // a failure only shortens the wait below
				}
				_ = r.client.SetReadDeadline(time.Now().Add(relayCloseWait))
				<-r.clientDone
			}
		}
	}
	r.close()
	<-r.clientDone
}

// closeFrame is a connection.close 320 CONNECTION_FORCED with reply text
// reason, encoded as a frame on channel 0.
func closeFrame(reason string) ([]byte, error) {
	f, err := wire.MethodFrame(0, &wire.ConnectionClose{ReplyCode: wire.ConnectionForced, ReplyText: reason})
	if err != nil {
		return nil, err
	}
	return wire.AppendFrame(nil, f)
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
		go n.relayAMQP(c, func() { n.release(ip) })
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
// the leader changes. When this node is the leader, its own server serves
// the connection directly instead: no loopback hop, and the server's
// shutdown at the end of the leadership closes it with 320
// CONNECTION_FORCED. It calls release once the connection is done with.
func (n *Node) relayAMQP(c net.Conn, release func()) {
	ctx, cancel := context.WithTimeout(context.Background(), n.hold)
	ad, leader, err := n.route(ctx, 0)
	if err == nil && ad.AMQP == "" {
		err = errors.New("the leader serves no AMQP")
	}
	if err == nil {
		if srv := n.localServerFor(0, ad); srv != nil {
			cancel()
			srv.ServeAMQPConn(c, release)
			return
		}
	}
	defer release()
	var up net.Conn
	if err == nil {
		up, err = n.dialInternal(ctx, &net.Dialer{Timeout: 2 * time.Second}, nodeauth.SurfaceAMQP, ad.AMQP, leader)
	}
	cancel()
	if err != nil {
		n.log.Debug("AMQP connection not relayed", "remote", c.RemoteAddr().String(), "err", err)
		// Closed without a word. A connection.close sent during the
		// handshake would be worse: the server may close only after the
		// client's start-ok, and clients read a close at start-ok as bad
		// credentials (amqp091-go returns ErrCredentials, 403) and one at
		// connection.open as a vhost refusal (ErrVhost); tried and
		// measured with amqp091-go on 2026-11-29.
		_ = c.Close() // the client sees the connection end and retries
		return
	}
	r := &relay{client: c, upstream: up, leader: leader, clientDone: make(chan struct{})}
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
	if _, now, ok := n.target(0); !ok || now != leader {
		r.close()
		return
	}
	go r.toLeader()
	r.toClient()
}

// closeRelays ends every relayed connection whose target matches, for
// reason (relay.depose).
func (n *Node) closeRelays(reason string, match func(leader uint64) bool) {
	n.mu.Lock()
	var doomed []*relay
	for r := range n.relays {
		if match(r.leader) {
			doomed = append(doomed, r)
		}
	}
	n.mu.Unlock()
	for _, r := range doomed {
		r.depose(reason)
	}
}
