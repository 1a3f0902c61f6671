// Package nodeauth authenticates the nodes of a Sluice cluster to each
// other with a shared secret (the [cluster] secret_file): a mutual
// challenge-response that opens every connection between nodes, before
// any other byte (Raft messages and snapshot streams, and the requests
// and AMQP connections a node forwards to the leader's internal
// listeners).
//
// The handshake, on a fresh connection (all integers big-endian):
//
//	listener → dialer  hello  magic "SLUICENA" (8), version 1 (1),
//	                          listener node id (8), listener nonce nL (32)
//	dialer → listener  proof  dialer node id (8), dialer nonce nD (32),
//	                          HMAC-SHA256(secret, "sluice-node-auth-v1 dialer\x00" |
//	                            surface | "\x00" | listener id | nL | dialer id | nD)
//	listener → dialer  ack    HMAC-SHA256(secret, "sluice-node-auth-v1 listener\x00" |
//	                            surface | "\x00" | listener id | nL | dialer id | nD)
//
// The surface ("raft", "http", "amqp"; "raft/<k>" for shard k > 0 of a
// node hosting several Raft groups, RaftSurface) binds a handshake to the
// listener, and the group, it was made for; the two directions use different labels, so neither
// MAC can be reflected as the other. Nonces come from crypto/rand, so a
// recorded handshake cannot be replayed. The listener checks the proof in
// constant time and closes the connection without answering when it is
// wrong; the dialer checks the ack, so it knows it reached a node holding
// the secret (and, when it expects one, the node id it meant to dial).
// Every message has a fixed size: a peer cannot make either side allocate
// by what it sends, and the caller bounds the whole handshake in time
// (Timeout).
//
// Without a secret configured (a loopback cluster for development) the
// handshake still runs, with an empty key: it then proves nothing, but the
// wire format is the same, and a node with a secret never accepts one
// without (or with another).
//
// A listener may accept more than one secret (Keys: a rotation in
// progress); a dialer always proves one, its own.
//
// Confidentiality is optional ([cluster] encrypt, Encryption): without
// it the traffic after the handshake is plaintext, and an attacker on the
// path can read it or take over an authenticated TCP connection. With it,
// every connection is TLS 1.3 first and the handshake runs inside, with
// the session's exporter value in both MACs (channel binding, as RFC 9266
// binds SCRAM to a TLS session): the certificates are throwaway
// self-signed ones that nobody verifies, and what authenticates each end
// is still the secret — a man in the middle holds two TLS sessions with
// two exporter values, so the MACs it relays hold on neither.
package nodeauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Sizes of the handshake's messages and fields.
const (
	NonceSize = 32
	MACSize   = sha256.Size
	HelloSize = len(magic) + 1 + 8 + NonceSize
	ProofSize = 8 + NonceSize + MACSize
	// Version is the handshake's version, sent in the hello.
	Version = 1
	// MinSecretSize is the shortest secret a node accepts.
	MinSecretSize = 32
)

// Timeout bounds a whole handshake on either side: a peer that sends
// nothing, or trickles its bytes, is cut after this long.
const Timeout = 5 * time.Second

const magic = "SLUICENA"

// Surfaces: the listeners a handshake opens a connection to.
const (
	SurfaceRaft = "raft"
	SurfaceHTTP = "http"
	SurfaceAMQP = "amqp"
)

// RaftSurface is the surface of shard k's Raft group: SurfaceRaft for
// shard 0, so a one-shard cluster's handshake is the same bytes as before
// shards existed, and "raft/<k>" for the others. A connection's
// handshake thus binds it to one group: a frame cannot reach another.
func RaftSurface(shard int) string {
	if shard == 0 {
		return SurfaceRaft
	}
	return SurfaceRaft + "/" + strconv.Itoa(shard)
}

// ErrAuth is returned when the other side's MAC is wrong: it does not hold
// this node's secret (or a node expected by id is another).
var ErrAuth = errors.New("nodeauth: the peer failed authentication (does it hold the same cluster secret?)")

// ErrRefused is returned to a dialer whose proof the listener refused: it
// closed the connection instead of acknowledging. A listener closing for
// its own reasons (a leader's internal listener as its leadership ends)
// looks the same to the dialer, so the text names both.
var ErrRefused = errors.New("nodeauth: the peer closed the connection instead of accepting this node's handshake (it holds another cluster secret, or was closing: a leadership change)")

// ErrBadHello is returned for a hello that is not this protocol's or not
// its version.
var ErrBadHello = errors.New("nodeauth: not a Sluice node handshake (wrong magic or version)")

// Key is a cluster secret. The zero value (no secret) is valid: see the
// package comment.
type Key []byte

// Keys are the secrets a listener accepts: Keys[0] is the node's own (the
// one it dials with), any further one is accepted too. A node holds two
// while the cluster's secret is rotated without a full restart: the
// listener answers a dialer under whichever key its proof used, so nodes
// that dial with the old key and nodes that dial with the new one both
// get in as long as every listener accepts both. Empty Keys accept the
// empty key only.
type Keys []Key

// With returns the Keys of own followed by extra (extra nil: own alone).
func With(own Key, extra Key) Keys {
	if extra == nil {
		return Keys{own}
	}
	return Keys{own, extra}
}

// mac is the handshake's MAC. binding is nil on a plain connection; on an
// encrypted one (Encryption) it is the TLS session's exporter value, so
// the MAC holds only on the session it was made on. Every field before it
// has a fixed size, so an input with a binding is never one without.
func (k Key) mac(label, surface string, listener uint64, nL []byte, dialer uint64, nD, binding []byte) []byte {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(label))
	h.Write([]byte(surface))
	h.Write([]byte{0})
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], listener)
	h.Write(id[:])
	h.Write(nL)
	binary.BigEndian.PutUint64(id[:], dialer)
	h.Write(id[:])
	h.Write(nD)
	h.Write(binding)
	return h.Sum(nil)
}

const (
	dialerLabel   = "sluice-node-auth-v1 dialer\x00"
	listenerLabel = "sluice-node-auth-v1 listener\x00"
)

// Hello is the listener's first message, decoded.
type Hello struct {
	Listener uint64
	Nonce    [NonceSize]byte
}

// DecodeHello decodes a hello of exactly HelloSize bytes.
func DecodeHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) != HelloSize {
		return h, fmt.Errorf("nodeauth: a hello is %d bytes, not %d", HelloSize, len(b))
	}
	if string(b[:len(magic)]) != magic || b[len(magic)] != Version {
		return h, ErrBadHello
	}
	b = b[len(magic)+1:]
	h.Listener = binary.BigEndian.Uint64(b)
	copy(h.Nonce[:], b[8:])
	if h.Listener == 0 {
		return h, errors.New("nodeauth: a hello names node id 0")
	}
	return h, nil
}

// Proof is the dialer's answer, decoded.
type Proof struct {
	Dialer uint64
	Nonce  [NonceSize]byte
	MAC    [MACSize]byte
}

// DecodeProof decodes a proof of exactly ProofSize bytes.
func DecodeProof(b []byte) (Proof, error) {
	var p Proof
	if len(b) != ProofSize {
		return p, fmt.Errorf("nodeauth: a proof is %d bytes, not %d", ProofSize, len(b))
	}
	p.Dialer = binary.BigEndian.Uint64(b)
	copy(p.Nonce[:], b[8:])
	copy(p.MAC[:], b[8+NonceSize:])
	if p.Dialer == 0 {
		return p, errors.New("nodeauth: a proof names node id 0")
	}
	return p, nil
}

// Accept runs the listener's side of the handshake on rw for surface,
// as node self, accepting a proof under any of keys, and returns the
// dialer's authenticated node id. It reads exactly ProofSize bytes; the
// caller bounds it in time (AcceptConnAny does).
func Accept(rw io.ReadWriter, keys Keys, surface string, self uint64) (uint64, error) {
	id, _, err := AcceptAny(rw, keys, []string{surface}, self)
	return id, err
}

// AcceptAny is Accept for a listener that serves several surfaces on one
// port (the Raft groups of a node's shards, RaftSurface): the dialer's
// proof names one of surfaces, and AcceptAny returns which (its index)
// with the dialer's node id. Every surface and key is tried, so the time
// taken tells neither.
func AcceptAny(rw io.ReadWriter, keys Keys, surfaces []string, self uint64) (id uint64, surface int, err error) {
	return acceptAny(rw, keys, surfaces, self, nil)
}

func acceptAny(rw io.ReadWriter, keys Keys, surfaces []string, self uint64, binding []byte) (id uint64, surface int, err error) {
	if len(keys) == 0 {
		keys = Keys{nil}
	}
	if len(surfaces) == 0 {
		return 0, 0, errors.New("nodeauth: no surface to accept")
	}
	hello := make([]byte, 0, HelloSize)
	hello = append(hello, magic...)
	hello = append(hello, Version)
	hello = binary.BigEndian.AppendUint64(hello, self)
	var nL [NonceSize]byte
	_, _ = rand.Read(nL[:]) // crypto/rand.Read never fails (it panics first)
	hello = append(hello, nL[:]...)
	if _, err := rw.Write(hello); err != nil {
		if reset(err) {
			err = fmt.Errorf("%w (%w)", errPeerGone, err)
		}
		return 0, 0, fmt.Errorf("nodeauth: sending the hello: %w", err)
	}
	var buf [ProofSize]byte
	if n, err := io.ReadFull(rw, buf[:]); err != nil {
		if n == 0 && reset(err) {
			err = fmt.Errorf("%w (%w)", errPeerGone, err)
		}
		return 0, 0, fmt.Errorf("nodeauth: reading the proof: %w", err)
	}
	if binding == nil && buf[0] == tlsHandshakeRecord && buf[1] == 3 {
		return 0, 0, fmt.Errorf("%w: the dialer speaks TLS (%s)", ErrAuth, encryptHint)
	}
	p, err := DecodeProof(buf[:])
	if err != nil {
		return 0, 0, err
	}
	var key Key
	ok := false
	for i, sf := range surfaces {
		for _, k := range keys {
			// Every pair is tried, so the time taken does not tell which
			// one matched.
			if hmac.Equal(p.MAC[:], k.mac(dialerLabel, sf, self, nL[:], p.Dialer, p.Nonce[:], binding)) && !ok {
				key, surface, ok = k, i, true
			}
		}
	}
	if !ok {
		return 0, 0, fmt.Errorf("%w: node %d", ErrAuth, p.Dialer)
	}
	if _, err := rw.Write(key.mac(listenerLabel, surfaces[surface], self, nL[:], p.Dialer, p.Nonce[:], binding)); err != nil {
		return 0, 0, fmt.Errorf("nodeauth: sending the ack: %w", err)
	}
	return p.Dialer, surface, nil
}

// Dial runs the dialer's side of the handshake on rw for surface, as node
// self, expecting the listener to be node expect (0: any node holding the
// key). It returns the listener's node id.
func Dial(rw io.ReadWriter, key Key, surface string, self, expect uint64) (uint64, error) {
	return dial(rw, key, surface, self, expect, nil)
}

func dial(rw io.ReadWriter, key Key, surface string, self, expect uint64, binding []byte) (uint64, error) {
	var buf [HelloSize]byte
	if n, err := io.ReadFull(rw, buf[:]); err != nil {
		if n == 0 && binding == nil && (errors.Is(err, io.EOF) || isTimeout(err)) {
			// A listener that encrypts waits for a TLS hello and says
			// nothing to a plain dialer: a refusal (callers log it).
			return 0, fmt.Errorf("%w: no hello from the listener (%v; a node that encrypts sends nothing first: %s)", ErrRefused, err, encryptHint)
		}
		return 0, fmt.Errorf("nodeauth: reading the hello: %w", err)
	}
	h, err := DecodeHello(buf[:])
	if err != nil {
		return 0, err
	}
	if expect != 0 && h.Listener != expect {
		return 0, fmt.Errorf("%w: dialled node %d, reached node %d", ErrAuth, expect, h.Listener)
	}
	var nD [NonceSize]byte
	_, _ = rand.Read(nD[:]) // crypto/rand.Read never fails (it panics first)
	proof := make([]byte, 0, ProofSize)
	proof = binary.BigEndian.AppendUint64(proof, self)
	proof = append(proof, nD[:]...)
	proof = append(proof, key.mac(dialerLabel, surface, h.Listener, h.Nonce[:], self, nD[:], binding)...)
	if _, err := rw.Write(proof); err != nil {
		return 0, fmt.Errorf("nodeauth: sending the proof: %w", err)
	}
	var ack [MACSize]byte
	if _, err := io.ReadFull(rw, ack[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w: node %d", ErrRefused, h.Listener)
		}
		return 0, fmt.Errorf("nodeauth: reading the ack: %w", err)
	}
	if !hmac.Equal(ack[:], key.mac(listenerLabel, surface, h.Listener, h.Nonce[:], self, nD[:], binding)) {
		return 0, fmt.Errorf("%w: node %d", ErrAuth, h.Listener)
	}
	return h.Listener, nil
}

// Silent reports whether err, from Accept, means the peer closed the
// connection before sending a single byte (a TCP port probe, a peer
// shutting down): a refusal, but not a failed authentication, so callers
// neither count nor log it. A peer that closes with the hello unread
// resets the connection rather than closing it, which counts the same.
func Silent(err error) bool {
	return errors.Is(err, errPeerGone) || errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF)
}

// errPeerGone marks a handshake whose peer reset the connection before it
// sent a byte (Silent).
var errPeerGone = errors.New("nodeauth: the peer closed the connection before its proof")

// reset reports whether err is the peer resetting or having closed the
// connection.
func reset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// AcceptConnAny is AcceptAny on c within Timeout; c's deadline is
// cleared after.
func AcceptConnAny(c net.Conn, keys Keys, surfaces []string, self uint64) (uint64, int, error) {
	if err := c.SetDeadline(time.Now().Add(Timeout)); err != nil {
		return 0, 0, err
	}
	id, i, err := AcceptAny(c, keys, surfaces, self)
	if err != nil {
		return 0, 0, err
	}
	return id, i, c.SetDeadline(time.Time{})
}

// DialConn is Dial on c within Timeout; c's deadline is cleared after.
func DialConn(c net.Conn, key Key, surface string, self, expect uint64) (uint64, error) {
	if err := c.SetDeadline(time.Now().Add(Timeout)); err != nil {
		return 0, err
	}
	id, err := Dial(c, key, surface, self, expect)
	if err != nil {
		return 0, err
	}
	return id, c.SetDeadline(time.Time{})
}

// FailureLog rate-limits the logging of failed handshakes: Allow reports
// true at most once per Interval for one key (a peer's address), so a
// misconfigured or hostile peer that retries in a loop cannot flood the
// log. It remembers at most 1,024 keys. The zero value is ready, with a
// one-minute interval.
type FailureLog struct {
	Interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
}

// Allow reports whether a failure from key should be logged now.
func (f *FailureLog) Allow(key string) bool {
	iv := f.Interval
	if iv <= 0 {
		iv = time.Minute
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]time.Time{}
	}
	if t, ok := f.last[key]; ok && now.Sub(t) < iv {
		return false
	}
	if len(f.last) >= 1024 {
		for k, t := range f.last {
			if now.Sub(t) >= iv {
				delete(f.last, k)
			}
		}
		if len(f.last) >= 1024 {
			return false // flooded by distinct addresses: the counter still counts
		}
	}
	f.last[key] = now
	return true
}

// Host is the host part of a remote address, the key FailureLog callers use.
func Host(a net.Addr) string {
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}
