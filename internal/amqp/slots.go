package amqp

import (
	"net"
	"time"
)

// Connection slots before authentication. 4,200 silent sockets (a TCP
// connect and nothing more) used to block a real login: each held a slot
// for the whole 10 s handshake timeout. Now:
//
//   - A connection that has not completed connection.open is
//     "handshaking", and at most MaxHandshakes connections handshake at
//     once. One more closes the connection that has been handshaking
//     longest: a real client finishes in milliseconds, so a flood of
//     silent sockets only displaces itself.
//   - The handshake must finish within HandshakeTimeout (default 5 s).
//   - Only logged-in connections count against MaxConnections (checked
//     at connection.open), so silent sockets cannot use up its slots.
//   - At most MaxConnectionsPerIP connections (handshaking or open) come
//     from one IP address; one more is closed at accept.
//
// The sets live in slotState, guarded by Server.mu.

// Defaults.
const (
	DefaultMaxHandshakes       = 64
	DefaultHandshakeTimeout    = 5 * time.Second
	DefaultMaxConnectionsPerIP = 1024
)

type slotState struct {
	handshaking map[*conn]time.Time // since accept
	byIP        map[string]int
}

// admitLocked registers an accepted connection. It returns false when the
// connection's address is over its cap (the caller closes it), and the
// longest-handshaking connection to close when the handshake slots are
// full. s.mu is held.
func (s *Server) admitLocked(c *conn) (ok bool, evict *conn) {
	if s.slots.handshaking == nil {
		s.slots.handshaking = map[*conn]time.Time{}
		s.slots.byIP = map[string]int{}
	}
	c.ip = remoteIP(c.nc)
	if lim := s.opts.MaxConnectionsPerIP; lim > 0 && s.slots.byIP[c.ip] >= lim {
		return false, nil
	}
	s.slots.byIP[c.ip]++
	if lim := s.opts.MaxHandshakes; lim > 0 && len(s.slots.handshaking) >= lim {
		var since time.Time
		for h, t := range s.slots.handshaking {
			if evict == nil || t.Before(since) {
				evict, since = h, t
			}
		}
		delete(s.slots.handshaking, evict)
	}
	s.slots.handshaking[c] = time.Now()
	return true, evict
}

// handshakeOver takes c out of the handshaking set (it logged in, or its
// handshake failed).
func (s *Server) handshakeOver(c *conn) {
	s.mu.Lock()
	delete(s.slots.handshaking, c)
	s.mu.Unlock()
}

// countActive counts a connection reaching connection.open against
// MaxConnections; false when the limit is reached (the open is refused).
func (s *Server) countActive(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lim := s.opts.MaxConnections; lim > 0 && s.active >= lim {
		return false
	}
	s.active++
	c.counted = true
	return true
}

// releaseLocked forgets an ended connection. s.mu is held.
func (s *Server) releaseLocked(c *conn) {
	delete(s.slots.handshaking, c)
	if s.slots.byIP[c.ip]--; s.slots.byIP[c.ip] <= 0 {
		delete(s.slots.byIP, c.ip)
	}
}

func remoteIP(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return host
}
