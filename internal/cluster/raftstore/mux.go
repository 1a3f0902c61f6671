package raftstore

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// Every node's Raft listener is behind a mux: OpenShards' for several
// shards (shards.go), or a one-shard one that Open makes for a plain
// listener, so that a connection's handshake runs in one place. Every connection opens with the node handshake
// as on a one-group node, but the dialer proves it for the surface of one
// shard (nodeauth.RaftSurface: "raft" for shard 0, "raft/<k>" for the
// others); the mux runs the listener's side for every shard at once
// (nodeauth.NewMultiListener), learns which group the connection is for, and
// hands it, authenticated, to that group's transport. The frames after
// the handshake are a one-group connection's. A connection thus belongs
// to one group for its life: a frame cannot reach another group, and
// shard 0 of a node with shards speaks to a node without them byte for
// byte as before.

// errMuxClosed is returned by a shard listener's Accept once it or its
// mux is closed.
var errMuxClosed = errors.New("raftstore: shard listener closed")

// mux owns a node's Raft listener: a nodeauth multi-surface Listener runs the
// handshakes, and the mux hands each authenticated connection to its
// shard's listener.
type mux struct {
	ln      *nodeauth.Listener
	onAuth  func()
	log     *slog.Logger
	failLog nodeauth.FailureLog
	done    chan struct{}

	mu sync.Mutex
	// shards holds each shard's listener; nil for a shard whose group
	// this node does not hold (ADR 0016), whose connections are closed
	// once their handshake is done.
	shards []*shardListener
	closed bool
}

// shardListener is the listener one shard's transport accepts from: its
// connections are *nodeauth.Conn, authenticated for that shard.
type shardListener struct {
	m     *mux
	k     int
	conns chan *nodeauth.Conn
	once  sync.Once
	done  chan struct{}
}

// newMux serves shards groups on ln as node id. It starts accepting at
// once; a connection for a shard whose listener is not being accepted
// from waits until it is (or the shard listener closes); one for a shard
// with no listener (none opened yet, or its listener closed) is closed.
func newMux(ln net.Listener, id uint64, shards int, keys nodeauth.Keys, enc *nodeauth.Encryption, onAuth func(), log *slog.Logger) *mux {
	m := &mux{onAuth: onAuth, log: log, done: make(chan struct{}), shards: make([]*shardListener, shards)}
	surfaces := make([]string, shards)
	for k := range shards {
		surfaces[k] = nodeauth.RaftSurface(k)
	}
	m.ln = nodeauth.NewMultiListener(ln, enc, keys, surfaces, id, m.authFailed)
	go m.dispatch()
	return m
}

// listener opens shard k's listener (Config.Listener of its Node): a new
// one unless one is open. Closing it ends this shard's accepts; listener
// may then open another (a group this node holds again, ADR 0016).
func (m *mux) listener(k int) net.Listener {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sl := m.shards[k]; sl != nil {
		return sl
	}
	sl := &shardListener{m: m, k: k, conns: make(chan *nodeauth.Conn), done: make(chan struct{})}
	if m.closed {
		sl.once.Do(func() { close(sl.done) })
		return sl
	}
	m.shards[k] = sl
	return sl
}

// current is shard k's open listener, or nil.
func (m *mux) current(k int) *shardListener {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shards[k]
}

// forget drops sl as its shard's listener, if it still is.
func (m *mux) forget(sl *shardListener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shards[sl.k] == sl {
		m.shards[sl.k] = nil
	}
}

// dispatch hands every authenticated connection to its shard's listener
// until the multi-listener closes.
func (m *mux) dispatch() {
	defer close(m.done)
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				m.log.Error("raftstore: raft listener failed", "err", err)
			}
			return
		}
		ac := c.(*nodeauth.Conn) // a multi-listener's
		sl := m.current(ac.Surface)
		if sl == nil {
			_ = c.Close() // a group this node does not hold
			continue
		}
		select {
		case sl.conns <- ac:
		case <-sl.done:
			_ = c.Close()
		}
	}
}

// authFailed counts a failed handshake and logs it, at most once a
// minute per address.
func (m *mux) authFailed(remote net.Addr, err error) {
	if m.onAuth != nil {
		m.onAuth()
	}
	if host := nodeauth.Host(remote); m.failLog.Allow(host) {
		m.log.Warn("raftstore: refused a connection that failed the node handshake (logged once a minute per address)", "remote", host, "err", err)
	}
}

// close closes the listener (and the handshakes in progress) and every
// shard listener, and waits for the dispatcher.
func (m *mux) close() {
	m.mu.Lock()
	m.closed = true
	open := slices.Clone(m.shards)
	m.mu.Unlock()
	for _, sl := range open {
		if sl != nil {
			_ = sl.Close()
		}
	}
	_ = m.ln.Close()
	<-m.done
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
	sl.m.forget(sl)
	return nil
}

// Addr is the mux's listening address.
func (sl *shardListener) Addr() net.Addr { return sl.m.ln.Addr() }
