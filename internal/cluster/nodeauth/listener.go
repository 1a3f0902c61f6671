package nodeauth

import (
	"errors"
	"net"
	"sync"
	"time"
)

// MaxPendingHandshakes bounds the handshakes a Listener runs at once; a
// connection over it is closed at accept.
const MaxPendingHandshakes = 64

// Listener is a net.Listener whose Accept returns only connections that
// passed the listener's side of the handshake: the handshake runs in a
// goroutine per connection (at most MaxPendingHandshakes at once, each
// within Timeout), so a slow or junk peer never holds up the others.
type Listener struct {
	inner    net.Listener
	keys     Keys
	surfaces []string
	multi    bool // NewMultiListener: Accept returns *Conn
	self     uint64
	enc      *Encryption // nil: plain TCP
	// onFail is called for every failed handshake (counting, logging),
	// but not for a peer that closed before sending a byte (Silent).
	onFail func(remote net.Addr, err error)

	conns   chan net.Conn
	pending chan struct{}
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error // why the inner listener stopped
	open    map[net.Conn]struct{}
	// closing is set, under mu, before stop closes the handshakes in
	// progress: a handshake that ends in error reads it under the same
	// lock, so one cut by stop is never taken for the peer's failure
	// (done is closed only after mu is released, too late to tell).
	closing bool
}

// NewListener wraps inner; enc nil means plain TCP (see Encryption), and
// onFail may be nil. It starts accepting at once.
func NewListener(inner net.Listener, enc *Encryption, keys Keys, surface string, self uint64, onFail func(net.Addr, error)) *Listener {
	return newListener(inner, enc, keys, []string{surface}, false, self, onFail)
}

// NewMultiListener is NewListener for a listener that serves several
// surfaces on one port (the Raft groups of a node's shards, RaftSurface):
// its Accept returns a *Conn, naming the authenticated peer and the
// surface (an index into surfaces) its proof was made for.
func NewMultiListener(inner net.Listener, enc *Encryption, keys Keys, surfaces []string, self uint64, onFail func(net.Addr, error)) *Listener {
	return newListener(inner, enc, keys, surfaces, true, self, onFail)
}

func newListener(inner net.Listener, enc *Encryption, keys Keys, surfaces []string, multi bool, self uint64, onFail func(net.Addr, error)) *Listener {
	l := &Listener{inner: inner, enc: enc, keys: keys, surfaces: surfaces, multi: multi, self: self, onFail: onFail,
		conns: make(chan net.Conn), pending: make(chan struct{}, MaxPendingHandshakes),
		done: make(chan struct{}), open: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.loop()
	return l
}

// Conn is a connection a multi-surface Listener authenticated: Peer is the
// dialer's node id, Surface the index of the surface its proof names.
type Conn struct {
	net.Conn
	Peer    uint64
	Surface int
}

func (l *Listener) fail(c net.Conn, err error) {
	if l.onFail != nil {
		l.onFail(c.RemoteAddr(), err)
	}
}

func (l *Listener) loop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.stop(err)
				return
			}
			// A transient accept error (EMFILE): wait a little, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-l.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		select {
		case l.pending <- struct{}{}:
		default:
			_ = c.Close() // too many handshakes at once: refused before reading
			l.fail(c, errors.New("nodeauth: too many handshakes in progress"))
			continue
		}
		l.mu.Lock()
		if l.closing {
			// Accepted as Close ran: stop has already closed the
			// handshakes it knew of, and would not see this one, which
			// would then hold Close up for a whole Timeout.
			l.mu.Unlock()
			_ = c.Close()
			<-l.pending
			continue // the next Accept reports the closed listener
		}
		l.open[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(c)
	}
}

func (l *Listener) handshake(c net.Conn) {
	defer l.wg.Done()
	conn, peer, surface, err := l.enc.AcceptConn(c, l.keys, l.surfaces, l.self)
	<-l.pending
	l.mu.Lock()
	delete(l.open, c)
	cut := l.closing
	l.mu.Unlock()
	if err != nil {
		_ = c.Close()
		if !Silent(err) && !cut {
			l.fail(c, err)
		}
		return
	}
	out := conn
	if l.multi {
		out = &Conn{Conn: conn, Peer: peer, Surface: surface}
	}
	select {
	case l.conns <- out:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *Listener) stop(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.closing = true
		for c := range l.open {
			_ = c.Close() // ends its handshake
		}
		l.mu.Unlock()
		close(l.done)
	})
}

// Accept returns the next authenticated connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// Close stops accepting and ends the handshakes in progress.
func (l *Listener) Close() error {
	err := l.inner.Close()
	l.stop(net.ErrClosed)
	l.wg.Wait()
	return err
}

// Addr is the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }
