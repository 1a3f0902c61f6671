package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimiter guards the HTTP listener's connection slots against one
// client holding them all (10,000 idle keep-alive connections made
// /health, SQS and the admin API time out):
//
//   - At most max connections are open; at the cap Accept first closes the
//     connection that has been idle longest (a keep-alive connection
//     between requests, or one that has not sent a byte yet), and only
//     waits in the kernel's backlog when every connection is busy with a
//     request. An HTTP client whose idle connection is closed opens a new
//     one; no request is lost.
//   - Under pressure (three quarters of the slots taken), connections idle
//     for longer than pressureIdle are closed: the idle timeout shrinks
//     from the server's 120 s to a few seconds.
//   - At most perIP connections come from one IP address; one more first
//     closes that address's own longest-idle connection, else it is closed
//     at once.
//
// The http.Server reports connection states through connState.
type connLimiter struct {
	net.Listener
	max, perIP int
	sem        chan struct{}

	mu    sync.Mutex
	conns map[*limitConn]struct{}
	byIP  map[string]int
	freed chan struct{} // closed (and replaced) when a slot frees
}

// pressureIdle is the idle timeout while three quarters of the slots are
// taken; newGrace is how long a fresh connection may stay silent before it
// counts as idle.
const (
	pressureIdle = 2 * time.Second
	newGrace     = 500 * time.Millisecond
)

// LimitHTTPConnections applies the HTTP listener's connection caps
// (max_http_connections, max_http_connections_per_ip; 0: no cap) to l, for
// an HTTP listener served beside the server's own: a cluster node's public
// listener, where the clients' addresses are known. The http.Server that
// serves the returned listener must report to connState (its ConnState).
func LimitHTTPConnections(l net.Listener, max, perIP int) (_ net.Listener, connState func(net.Conn, http.ConnState)) {
	cl := newConnLimiter(l, max, perIP)
	return cl, cl.connState
}

func newConnLimiter(l net.Listener, max, perIP int) *connLimiter {
	cl := &connLimiter{Listener: l, max: max, perIP: perIP,
		conns: map[*limitConn]struct{}{}, byIP: map[string]int{}, freed: make(chan struct{})}
	if max > 0 {
		cl.sem = make(chan struct{}, max)
	}
	return cl
}

// limitConn is one accepted connection and its HTTP state.
type limitConn struct {
	net.Conn
	l     *connLimiter
	ip    string
	once  sync.Once
	idle  bool      // guarded by l.mu: between requests, or no byte yet
	since time.Time // guarded by l.mu: when idle began
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		if err := l.takeSlot(); err != nil {
			return nil, err
		}
		nc, err := l.Listener.Accept()
		if err != nil {
			l.giveSlot()
			return nil, err
		}
		ip := remoteIP(nc)
		l.mu.Lock()
		if l.perIP > 0 && l.byIP[ip] >= l.perIP {
			victim := l.oldestIdleLocked(ip)
			l.mu.Unlock()
			if victim == nil {
				_ = nc.Close() // refused before serving: nothing was sent on it
				l.giveSlot()
				continue
			}
			_ = victim.Close() // evicting this address's oldest idle connection
			l.mu.Lock()
		}
		c := &limitConn{Conn: nc, l: l, ip: ip, idle: true, since: time.Now()}
		l.conns[c] = struct{}{}
		l.byIP[ip]++
		pressured := l.max > 0 && len(l.conns) >= l.max*3/4
		var stale []*limitConn
		if pressured {
			stale = l.idleSinceLocked(time.Now().Add(-pressureIdle))
		}
		l.mu.Unlock()
		for _, s := range stale {
			_ = s.Close() // evicting an idle connection: its close error changes nothing
		}
		return c, nil
	}
}

// takeSlot waits for a free slot, closing the longest-idle connection to
// make one when every slot is taken.
func (l *connLimiter) takeSlot() error {
	if l.sem == nil {
		return nil
	}
	for {
		select {
		case l.sem <- struct{}{}:
			return nil
		default:
		}
		l.mu.Lock()
		victim := l.oldestIdleLocked("")
		freed := l.freed
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close() // evicting an idle connection
			continue
		}
		// Every connection is busy, or too fresh to count as idle: wait
		// for one to end, or for a fresh one to pass its grace.
		t := time.NewTimer(newGrace / 2)
		select {
		case l.sem <- struct{}{}:
			t.Stop()
			return nil
		case <-freed:
		case <-t.C:
		}
		t.Stop()
	}
}

func (l *connLimiter) giveSlot() {
	if l.sem != nil {
		<-l.sem
	}
}

func (l *connLimiter) release(c *limitConn) {
	l.mu.Lock()
	delete(l.conns, c)
	if l.byIP[c.ip]--; l.byIP[c.ip] <= 0 {
		delete(l.byIP, c.ip)
	}
	close(l.freed)
	l.freed = make(chan struct{})
	l.mu.Unlock()
	l.giveSlot()
}

// oldestIdleLocked is the connection idle longest (of ip, when not ""),
// counting a fresh connection only after newGrace; nil if none.
func (l *connLimiter) oldestIdleLocked(ip string) *limitConn {
	var best *limitConn
	cutoff := time.Now().Add(-newGrace)
	for c := range l.conns {
		if !c.idle || (ip != "" && c.ip != ip) || c.since.After(cutoff) {
			continue
		}
		if best == nil || c.since.Before(best.since) {
			best = c
		}
	}
	return best
}

func (l *connLimiter) idleSinceLocked(before time.Time) []*limitConn {
	var out []*limitConn
	for c := range l.conns {
		if c.idle && c.since.Before(before) {
			out = append(out, c)
		}
	}
	return out
}

// connState is the http.Server's ConnState hook: it marks connections
// idle (between requests) or busy.
func (l *connLimiter) connState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateNew, http.StateIdle:
		c.idle, c.since = true, time.Now()
	case http.StateActive, http.StateHijacked:
		c.idle = false
	}
}

func remoteIP(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return host
}
