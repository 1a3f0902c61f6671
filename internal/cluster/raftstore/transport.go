package raftstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
)

// Wire format between nodes. Every connection, message connections and
// snapshot streams alike, opens with the node handshake (package
// nodeauth, surface "raft"; "raft/<k>" for shard k > 0 of a node with
// shards, whose listener mux.go shares among its groups): the listener sends a hello with a nonce, the
// dialer proves it holds the cluster secret and names its node id, and
// the listener proves the same back; a connection whose handshake fails
// (or does not finish within nodeauth.Timeout) is closed before any frame
// is read, and counted (Config.OnAuthFailure). Without a secret the
// handshake runs with an empty key: the same bytes, proving nothing.
// After it, a connection carries frames one way, from the dialling node
// to the listening one:
//
//	length   4 bytes big-endian, the size of msg (at most MaxFrameSize)
//	msg      a protobuf-marshalled raftpb.Message
//
// A node dials one connection to each peer and reads the connections its
// peers dial to it. Every Message names its sender, which must be the
// node the handshake authenticated: a frame from anyone else closes the
// connection. A snapshot goes on a connection of its own (stream), which
// the receiver answers with one byte after the snapshot's last frame: 0
// taken, 1 refused; a receiver with no free receive slot (snaplimit.go)
// closes it instead.
// The secret authenticates who may speak; it does not encrypt: without
// Config.Encryption the traffic is plaintext, for a private network
// between the nodes.

// MaxFrameSize is the largest frame a node sends or accepts (64 MiB). A
// larger incoming frame closes the connection with ErrFrameTooLarge; a
// larger outgoing message is dropped (Raft resends).
const MaxFrameSize = 64 << 20

// ErrFrameTooLarge is returned by the frame decoder for a length over
// MaxFrameSize.
var ErrFrameTooLarge = errors.New("raftstore: frame exceeds the 64 MiB limit")

// sendQueueLen bounds the frames queued for one peer. When it is full, new
// messages to that peer are dropped and the peer is reported unreachable:
// Raft tolerates lost messages and resends.
const sendQueueLen = 4096

// Reconnect backoff after a failed dial or write.
const (
	dialTimeout = time.Second
	minBackoff  = 50 * time.Millisecond
	maxBackoff  = time.Second
)

// appendFrame appends m's frame to dst.
func appendFrame(dst []byte, m *pb.Message) ([]byte, error) {
	body, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("raftstore: marshal message: %w", err)
	}
	if len(body) > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(body))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...), nil
}

// readFrame reads one frame from r and decodes its message. It returns
// io.EOF at a clean end between frames, and an error for a truncated
// frame, a length over MaxFrameSize or a body that is not a Message.
func readFrame(r io.Reader, buf []byte) (*pb.Message, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, buf, fmt.Errorf("raftstore: truncated frame header: %w", err)
		}
		return nil, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, buf, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, fmt.Errorf("raftstore: truncated frame of %d bytes: %w", n, err)
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(buf, m); err != nil {
		return nil, buf, fmt.Errorf("raftstore: bad message frame: %w", err)
	}
	return m, buf, nil
}

// transport moves Raft messages between nodes.
type transport struct {
	id uint64
	ln net.Listener
	// surface is the handshake's surface: the Raft group of one shard
	// (nodeauth.RaftSurface; "raft" for shard 0 and a one-group node).
	surface string
	log     *slog.Logger
	// recv hands a received message to the loop; a non-nil result is
	// written back on the message's connection (the acknowledgement that
	// ends a stream).
	recv  func(*pb.Message) []byte
	unrch func(id uint64)      // reports a peer unreachable to the loop
	peers map[uint64]*peerConn // the loop's only, once started
	// keys are the cluster secrets of the handshake: keys[0] this node's
	// own (empty: none) and the one it dials with, a second one also
	// accepted from dialers (a rotation; the mux, mux.go, runs the
	// listener's side); onAuth, when set, is called for every failed dial
	// handshake and every frame from another node than the handshake's;
	// failLog keeps their logging to one line per peer address per minute.
	keys    nodeauth.Keys
	enc     *nodeauth.Encryption // nil: plain TCP (Config.Encryption)
	onAuth  func()
	failLog nodeauth.FailureLog

	// limits is the node's snapshot budget (snaplimit.go): the streams
	// this transport receives take its receive slots, the ones it sends
	// are paced by its rate. sending and receiving count this group's
	// streams in flight (Status).
	limits             *snapLimits
	sending, receiving atomic.Int64

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	blocked bool // tests: drop everything in and out (a partition)
	closed  bool

	stop   chan struct{}
	ctx    context.Context // cancelled by close: ends a dial in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// peerConn is the outgoing side to one peer.
type peerConn struct {
	id   uint64
	addr string
	q    chan []byte
	stop chan struct{} // closed when the peer is removed
}

func newTransport(id uint64, ln net.Listener, surface string, peers []Peer, log *slog.Logger, keys nodeauth.Keys, enc *nodeauth.Encryption, onAuth func(),
	recv func(*pb.Message) []byte, unreachable func(uint64)) *transport {
	if len(keys) == 0 {
		keys = nodeauth.Keys{nil}
	}
	t := &transport{
		id: id, ln: ln, surface: surface, log: log, recv: recv, unrch: unreachable, keys: keys, enc: enc, onAuth: onAuth,
		peers: map[uint64]*peerConn{},
		conns: map[net.Conn]struct{}{},
		stop:  make(chan struct{}),
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for _, p := range peers {
		if p.ID == id {
			continue
		}
		t.peers[p.ID] = newPeerConn(p)
	}
	return t
}

func newPeerConn(p Peer) *peerConn {
	return &peerConn{id: p.ID, addr: p.RaftAddr, q: make(chan []byte, sendQueueLen), stop: make(chan struct{})}
}

// addPeer starts sending to p (a member added at runtime), replacing a
// sender to another address. Loop only, after start.
func (t *transport) addPeer(p Peer) {
	if old := t.peers[p.ID]; old != nil {
		if old.addr == p.RaftAddr {
			return
		}
		close(old.stop)
	}
	pc := newPeerConn(p)
	t.peers[p.ID] = pc
	t.wg.Add(1)
	go t.sendLoop(pc)
}

// removePeer stops sending to id, after what is queued for it, and closes
// its connection. Loop only.
func (t *transport) removePeer(id uint64) {
	if p := t.peers[id]; p != nil {
		close(p.stop)
		delete(t.peers, id)
	}
}

// start runs the accept loop and one sender per peer.
func (t *transport) start() {
	t.wg.Add(1)
	go t.accept()
	for _, p := range t.peers {
		t.wg.Add(1)
		go t.sendLoop(p)
	}
}

// isBlocked reports whether the transport drops all traffic (tests).
func (t *transport) isBlocked() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.blocked
}

// setBlocked makes the transport drop every message in both directions
// (blocked) or deliver again. Tests use it to partition a node.
func (t *transport) setBlocked(b bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.blocked = b
}

// send queues m for its recipient, never blocking. It is called by the
// loop only, after the Ready's entries and HardState are durable.
func (t *transport) send(m *pb.Message) {
	p := t.peers[m.GetTo()]
	if p == nil {
		return
	}
	f, err := appendFrame(nil, m)
	if err != nil {
		t.log.Warn("raftstore: dropping a message", "to", p.id, "err", err)
		t.unrch(p.id)
		return
	}
	select {
	case p.q <- f:
	default:
		t.unrch(p.id)
	}
}

// sendLoop keeps a connection to p and writes its queued frames.
func (t *transport) sendLoop(p *peerConn) {
	defer t.wg.Done()
	backoff := minBackoff
	var conn net.Conn
	var w *bufio.Writer
	defer func() {
		if conn != nil {
			t.forget(conn)
		}
	}()
	for {
		var f []byte
		select {
		case <-t.stop:
			return
		case <-p.stop:
			// Removed: what is queued still goes out (best effort), above
			// all the commit index that tells the peer of its removal.
			if conn != nil && !t.isBlocked() {
				for len(p.q) > 0 {
					if _, err := w.Write(<-p.q); err != nil {
						return
					}
				}
				_ = w.Flush() // best effort: the peer is gone from the group
			}
			return
		case f = <-p.q:
		}
		if t.isBlocked() {
			continue
		}
		if conn == nil {
			c, err := t.dial(p.addr, p.id)
			if err != nil {
				t.unrch(p.id)
				select {
				case <-t.stop:
					return
				case <-p.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			backoff = minBackoff
			conn, w = c, bufio.NewWriterSize(c, 64<<10)
		}
		_, err := w.Write(f)
		// Write what else is queued before flushing, so a burst costs one
		// syscall.
		for err == nil && len(p.q) > 0 {
			_, err = w.Write(<-p.q)
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			t.log.Debug("raftstore: peer connection failed", "peer", p.id, "err", err)
			t.unrch(p.id)
			t.forget(conn)
			conn, w = nil, nil
		}
	}
}

// streamWriteTimeout bounds the write of one frame of a stream: a peer
// that reads nothing for that long (a partition that keeps the connection
// open, a stopped process) fails the stream, so that Raft hears of the
// failure and tries again, instead of waiting on it forever.
const streamWriteTimeout = 10 * time.Second

// streamAckTimeout bounds the wait for a stream's acknowledgement once it
// is written: the receiver syncs what it received before answering (its
// WAL tail: the rest is in sorted tables pebble synced as it flushed
// them). A stream lost on the way (a partition that swallows it) costs
// this long before Raft hears of the failure and tries again.
const streamAckTimeout = 20 * time.Second

// errStreamRefused is returned by a stream the peer answered with a
// refusal.
var errStreamRefused = errors.New("raftstore: the peer refused the stream")

// errBlocked fails a snapshot stream while the transport drops all
// traffic (tests).
var errBlocked = errors.New("raftstore: transport blocked")

// stream writes the frames produce makes to peer to on a connection of its
// own, in a goroutine, waits for the peer's one-byte acknowledgement (0:
// it has taken everything; anything else: it refused the stream), and
// then calls done with the outcome (also when the transport is closed,
// immediately). A snapshot goes this way: its frames
// come from a generator, one at a time, and TCP's flow control slows the
// generator down, so the peer's send queue neither fills with nor delays
// for it. Closing the transport ends a stream in progress.
func (t *transport) stream(to uint64, produce func(write func(*pb.Message) error) error, done func(error)) {
	p := t.peers[to]
	t.mu.Lock()
	closed := t.closed
	if !closed {
		t.wg.Add(1)
	}
	t.mu.Unlock()
	switch {
	case closed:
		done(net.ErrClosed)
		return
	case p == nil:
		t.wg.Done()
		done(fmt.Errorf("raftstore: no peer %d", to))
		return
	}
	go func() {
		defer t.wg.Done()
		done(t.writeStream(p, produce))
	}()
}

// writeStream is stream's goroutine.
func (t *transport) writeStream(p *peerConn, produce func(write func(*pb.Message) error) error) error {
	if t.isBlocked() {
		return errBlocked
	}
	t.sending.Add(1)
	defer t.sending.Add(-1)
	c, err := t.dial(p.addr, p.id)
	if err != nil {
		return err
	}
	defer t.forget(c)
	w := bufio.NewWriterSize(c, 64<<10)
	var frame []byte
	err = produce(func(m *pb.Message) error {
		if t.isBlocked() {
			return errBlocked
		}
		var err error
		if frame, err = appendFrame(frame[:0], m); err != nil {
			return err
		}
		if !t.limits.pace(len(frame), t.stop) {
			return net.ErrClosed
		}
		if err := c.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil {
			return err
		}
		_, err = w.Write(frame)
		return err
	})
	if err != nil {
		return err
	}
	if err := c.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := c.SetReadDeadline(time.Now().Add(streamAckTimeout)); err != nil {
		return err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("raftstore: no acknowledgement of the stream: %w", err)
	}
	if ack[0] != 0 {
		return errStreamRefused
	}
	return nil
}

// dial connects to peer id at addr, registers the connection, so that
// close can unblock a write stuck on a peer that does not read, and runs
// the handshake, expecting node id to answer.
func (t *transport) dial(addr string, id uint64) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(t.ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	sc, _, err := t.enc.DialConn(c, t.keys[0], t.surface, t.id, id)
	if err != nil {
		t.forget(c)
		if errors.Is(err, nodeauth.ErrAuth) {
			t.authFailed(addr, err)
		} else if errors.Is(err, nodeauth.ErrRefused) && t.failLog.Allow("dial "+addr) {
			t.log.Warn("raftstore: a peer refused this node's handshake", "peer", id, "addr", addr, "err", err)
		}
		return nil, err
	}
	if sc != c { // encrypted: the connection to close is the sealed one
		t.mu.Lock()
		delete(t.conns, c)
		t.conns[sc] = struct{}{}
		closed := t.closed
		t.mu.Unlock()
		if closed { // close ran between the two: it closed c, hence sc
			return nil, net.ErrClosed
		}
	}
	return sc, nil
}

// authFailed counts a failed handshake and logs it, at most once a
// minute per peer address.
func (t *transport) authFailed(remote string, err error) {
	if t.onAuth != nil {
		t.onAuth()
	}
	if t.failLog.Allow(remote) {
		t.log.Warn("raftstore: refused a connection that failed the node handshake (logged once a minute per address)", "remote", remote, "err", err)
	}
}

// forget closes c and unregisters it.
func (t *transport) forget(c net.Conn) {
	_ = c.Close()
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// accept reads every incoming connection until the transport closes.
func (t *transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if !closed {
				t.log.Error("raftstore: raft listener failed", "err", err)
			}
			return
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.mu.Unlock()
		t.wg.Add(1)
		go t.read(c)
	}
}

// read delivers the frames of one incoming connection, which the mux
// authenticated (mux.go), as long as each is from the node the handshake
// named.
func (t *transport) read(c net.Conn) {
	defer t.wg.Done()
	defer t.forget(c)
	ac, ok := c.(*nodeauth.Conn)
	if !ok {
		t.log.Error("raftstore: a connection that did not come through the mux", "remote", c.RemoteAddr().String())
		return
	}
	from := ac.Peer
	r := bufio.NewReaderSize(c, 64<<10)
	var buf []byte
	stream := false // the connection holds a receive slot
	defer func() {
		if stream {
			t.receiving.Add(-1)
			t.limits.releaseRecv()
		}
	}()
	for {
		if stream {
			// A stream's sender that stops must not keep its slot.
			if err := c.SetReadDeadline(time.Now().Add(snapRecvIdle)); err != nil {
				return
			}
		}
		m, b, err := readFrame(r, buf)
		buf = b
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Warn("raftstore: closing a peer connection", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		if m.GetType() == pb.MessageType_MsgSnap && !stream {
			// The first frame of a snapshot stream (a connection of its
			// own, transport.stream): it takes a receive slot for as
			// long as the connection lasts, or is closed.
			if !t.limits.acquireRecv(snapRecvWait, t.stop) {
				t.log.Info("raftstore: refusing a snapshot stream: the node receives as many as it may at once", "from", from)
				return
			}
			stream = true
			t.receiving.Add(1)
		}
		// A follower forwards a request to transfer the leadership to its
		// leader unchanged (etcd raft), so that message names the
		// transfer's target, not its sender; any voter may ask.
		if m.GetFrom() != from && m.GetType() != pb.MessageType_MsgTransferLeader {
			t.authFailed(nodeauth.Host(c.RemoteAddr()), fmt.Errorf("node %d sent a message from node %d", from, m.GetFrom()))
			return
		}
		if t.isBlocked() {
			continue
		}
		if reply := t.recv(m); reply != nil {
			if err := c.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil {
				return
			}
			if _, err := c.Write(reply); err != nil {
				t.log.Debug("raftstore: cannot acknowledge a stream", "remote", c.RemoteAddr().String(), "err", err)
				return
			}
		}
	}
}

// close stops the listener, every connection and every sender.
func (t *transport) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	for c := range t.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	t.cancel()
	close(t.stop)
	_ = t.ln.Close()
	t.wg.Wait()
}
