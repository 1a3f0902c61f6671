package raftstore

import (
	"errors"
	"log/slog"
	"net"
	"sync"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// A node that hosts several shards (shards.go) serves all their Raft
// groups on one listener. Every connection opens with the node handshake
// as on a one-group node, but the dialer proves it for the surface of one
// shard (nodeauth.RaftSurface: "raft" for shard 0, "raft/<k>" for the
// others); the mux runs the listener's side for every shard at once
// (nodeauth.AcceptAny), learns which group the connection is for, and
// hands it, authenticated, to that group's transport. The frames after
// the handshake are a one-group connection's. A connection thus belongs
// to one group for its life: a frame cannot reach another group, and
// shard 0 of a node with shards speaks to a node without them byte for
// byte as before.

// errMuxClosed is returned by a shard listener's Accept once it or its
// mux is closed.
var errMuxClosed = errors.New("raftstore: shard listener closed")

// mux owns a node's Raft listener and dispatches the connections its
// accepts to the shards' listeners.
type mux struct {
	ln       net.Listener
	id       uint64
	keys     nodeauth.Keys
	onAuth   func()
	log      *slog.Logger
	failLog  nodeauth.FailureLog
	surfaces []string
	shards   []*shardListener

	mu      sync.Mutex
	pending int                   // handshakes in progress
	conns   map[net.Conn]struct{} // connections in their handshake
	closed  bool
	wg      sync.WaitGroup
}

// muxConn is a connection whose handshake the mux ran: from is the node
// it authenticated. The transport skips its own handshake for one.
type muxConn struct {
	net.Conn
	from uint64
}

// shardListener is the listener one shard's transport accepts from.
type shardListener struct {
	m     *mux
	conns chan *muxConn
	once  sync.Once
	done  chan struct{}
}

// newMux serves shards groups on ln as node id. It starts accepting at
// once; a connection for a shard whose listener is not being accepted
// from waits (up to the handshake's timeout, then is closed).
func newMux(ln net.Listener, id uint64, shards int, keys nodeauth.Keys, onAuth func(), log *slog.Logger) *mux {
	if len(keys) == 0 {
		keys = nodeauth.Keys{nil}
	}
	m := &mux{ln: ln, id: id, keys: keys, onAuth: onAuth, log: log, conns: map[net.Conn]struct{}{}}
	for k := range shards {
		m.surfaces = append(m.surfaces, nodeauth.RaftSurface(k))
		m.shards = append(m.shards, &shardListener{m: m, conns: make(chan *muxConn), done: make(chan struct{})})
	}
	m.wg.Add(1)
	go m.accept()
	return m
}

// listener is shard k's listener (Config.Listener of its Node).
func (m *mux) listener(k int) net.Listener { return m.shards[k] }

// accept runs the handshakes of incoming connections, bounded as a
// one-group transport bounds them, until the mux closes.
func (m *mux) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if !closed {
				m.log.Error("raftstore: raft listener failed", "err", err)
			}
			return
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			_ = c.Close()
			return
		}
		if m.pending >= nodeauth.MaxPendingHandshakes {
			m.mu.Unlock()
			_ = c.Close()
			m.authFailed(nodeauth.Host(c.RemoteAddr()), errors.New("too many handshakes in progress"))
			continue
		}
		m.pending++
		m.conns[c] = struct{}{}
		m.mu.Unlock()
		m.wg.Add(1)
		go m.handshake(c)
	}
}

// handshake authenticates c and hands it to its shard's listener.
func (m *mux) handshake(c net.Conn) {
	defer m.wg.Done()
	from, k, err := nodeauth.AcceptConnAny(c, m.keys, m.surfaces, m.id)
	m.mu.Lock()
	m.pending--
	delete(m.conns, c)
	closed := m.closed
	m.mu.Unlock()
	if err != nil {
		_ = c.Close()
		if !closed && !nodeauth.Silent(err) {
			m.authFailed(nodeauth.Host(c.RemoteAddr()), err)
		}
		return
	}
	sl := m.shards[k]
	select {
	case sl.conns <- &muxConn{Conn: c, from: from}:
	case <-sl.done:
		_ = c.Close()
	}
}

func (m *mux) authFailed(remote string, err error) {
	if m.onAuth != nil {
		m.onAuth()
	}
	if m.failLog.Allow(remote) {
		m.log.Warn("raftstore: refused a connection that failed the node handshake (logged once a minute per address)", "remote", remote, "err", err)
	}
}

// close closes the listener, every shard listener and every connection
// still in its handshake, and waits for the mux's goroutines.
func (m *mux) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	for c := range m.conns {
		_ = c.Close()
	}
	m.mu.Unlock()
	_ = m.ln.Close()
	for _, sl := range m.shards {
		_ = sl.Close()
	}
	m.wg.Wait()
}

// Accept returns the next authenticated connection for this shard.
func (sl *shardListener) Accept() (net.Conn, error) {
	select {
	case c := <-sl.conns:
		return c, nil
	case <-sl.done:
		return nil, errMuxClosed
	}
}

// Close ends this shard's accepts; the mux's listener stays open for the
// others (the mux closes it).
func (sl *shardListener) Close() error {
	sl.once.Do(func() { close(sl.done) })
	return nil
}

// Addr is the mux's listening address.
func (sl *shardListener) Addr() net.Addr { return sl.m.ln.Addr() }
