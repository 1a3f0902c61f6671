package nodeauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Encryption carries a node's connections to other nodes in TLS 1.3
// ([cluster] encrypt). Each node makes a throwaway self-signed certificate
// when it starts and nobody verifies it: the node handshake that follows,
// bound to the TLS session (see the package comment), is what proves each
// end holds the cluster secret. A nil *Encryption is valid and means plain
// TCP, so callers hold one and use it either way.
//
// Every node of a cluster must agree: a node that encrypts and one that
// does not cannot complete a handshake, and both say so in the error
// (encryptHint).
//
// While a running cluster changes over (Transition), a node's listeners
// take both kinds of dialer, and it dials one way or the other.
type Encryption struct {
	server, client *tls.Config
	dial           bool // dialers use TLS
	acceptPlain    bool // listeners take plain dialers too (Transition)
}

// PlainWait is how long a listener in transition waits for a dialer's
// first byte before it takes the dialer for a plain one and sends the
// hello: a TLS dialer speaks first (its ClientHello, at once), a plain
// one waits for the hello. It delays a plain dialer's handshake by as
// much, during a transition only.
const PlainWait = 300 * time.Millisecond

// Transition returns a copy of e for a cluster changing over to (or from)
// encryption without an outage: its listeners accept TLS and plain
// dialers alike (a dialer's first byte tells which, PlainWait), and it
// dials in TLS when dial is set. docs/operations.md gives the three
// rounds of rolling restarts.
func (e *Encryption) Transition(dial bool) *Encryption {
	c := *e
	c.dial, c.acceptPlain = dial, true
	return &c
}

// Mode names how e carries a node's links: "plain" (nil), "tls", or in a
// Transition "accept-both, dial plain" / "accept-both, dial tls".
func (e *Encryption) Mode() string {
	switch {
	case e == nil:
		return "plain"
	case !e.acceptPlain:
		return "tls"
	case e.dial:
		return "accept-both, dial tls"
	default:
		return "accept-both, dial plain"
	}
}

// exporterLabel is the TLS exporter label of the channel binding.
const exporterLabel = "EXPORTER-sluice-node-auth"

// tlsHandshakeRecord is the first byte of a TLS connection (a handshake
// record); a plain listener that reads it where a proof should be knows
// the dialer encrypts.
const tlsHandshakeRecord = 0x16

const encryptHint = "does every node set [cluster] encrypt the same?"

// NewEncryption makes the node's certificate (ECDSA P-256, valid for ten
// years, named after nothing) and the TLS configurations of both sides.
func NewEncryption() (*Encryption, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("nodeauth: the node's TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("nodeauth: the node's TLS certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "sluice node"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, fmt.Errorf("nodeauth: the node's TLS certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	return &Encryption{
		dial:   true,
		server: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}},
		client: &tls.Config{
			MinVersion: tls.VersionTLS13,
			// The listener's certificate is not what authenticates it:
			// its ack, a MAC under the cluster secret bound to this very
			// session, is (Dial). A certificate check would add nothing
			// but a CA to run.
			InsecureSkipVerify: true, //nolint:gosec // see above
		},
	}, nil
}

// DialConn runs the dialer's side on c within Timeout: when e dials in
// TLS (not nil, and not a Transition(false)), the TLS handshake and then
// the node handshake bound to it; else the plain handshake. It returns
// the connection to use from then on (c itself when plain) and the
// listener's node id; c's deadline is cleared after.
func (e *Encryption) DialConn(c net.Conn, key Key, surface string, self, expect uint64) (net.Conn, uint64, error) {
	if e == nil || !e.dial {
		id, err := DialConn(c, key, surface, self, expect)
		return c, id, err
	}
	if err := c.SetDeadline(time.Now().Add(Timeout)); err != nil {
		return nil, 0, err
	}
	tc := tls.Client(c, e.client)
	binding, err := bind(tc, false)
	if err != nil {
		return nil, 0, err
	}
	id, err := dial(tc, key, surface, self, expect, binding)
	if err != nil {
		return nil, 0, err
	}
	return sealed{tc}, id, c.SetDeadline(time.Time{})
}

// AcceptConn is AcceptConnAny for the listener's side: when e is not nil,
// the TLS handshake first and then the node handshake bound to it (in a
// Transition, only for a dialer whose first byte is TLS's; a dialer that
// sends nothing for PlainWait gets the plain handshake). It returns the
// connection to use from then on.
func (e *Encryption) AcceptConn(c net.Conn, keys Keys, surfaces []string, self uint64) (net.Conn, uint64, int, error) {
	if e != nil && e.acceptPlain {
		sc, tlsFirst, err := sniff(c)
		if err != nil {
			return nil, 0, 0, err
		}
		if !tlsFirst {
			e = nil // a plain dialer: the plain handshake, on c as it was
		}
		c = sc
	}
	if e == nil {
		id, i, err := AcceptConnAny(c, keys, surfaces, self)
		return c, id, i, err
	}
	if err := c.SetDeadline(time.Now().Add(Timeout)); err != nil {
		return nil, 0, 0, err
	}
	tc := tls.Server(c, e.server)
	binding, err := bind(tc, true)
	if err != nil {
		return nil, 0, 0, err
	}
	id, i, err := acceptAny(tc, keys, surfaces, self, binding)
	if err != nil {
		return nil, 0, 0, err
	}
	return sealed{tc}, id, i, c.SetDeadline(time.Time{})
}

// sniff waits up to PlainWait for c's first byte: a TLS record's tells a
// TLS dialer (the connection returned replays the byte); none tells a
// plain one (c returned unchanged). Any other first byte is refused: a
// plain dialer says nothing before the hello.
func sniff(c net.Conn) (net.Conn, bool, error) {
	if err := c.SetReadDeadline(time.Now().Add(PlainWait)); err != nil {
		return nil, false, err
	}
	var b [1]byte
	n, err := c.Read(b[:])
	if n == 0 && isTimeout(err) {
		return c, false, c.SetReadDeadline(time.Time{})
	}
	if n == 0 {
		if reset(err) {
			err = fmt.Errorf("%w (%w)", errPeerGone, err)
		}
		return nil, false, fmt.Errorf("nodeauth: reading the dialer's first byte: %w", err)
	}
	if b[0] != tlsHandshakeRecord {
		return nil, false, fmt.Errorf("%w: the dialer spoke before the hello, and not TLS", ErrAuth)
	}
	return &replayConn{Conn: c, first: b[0], pending: true}, true, nil
}

// replayConn is a connection whose first byte was read already: Read
// returns it first.
type replayConn struct {
	net.Conn
	first   byte
	pending bool
}

func (r *replayConn) Read(p []byte) (int, error) {
	if r.pending && len(p) > 0 {
		r.pending = false
		p[0] = r.first
		return 1, nil
	}
	return r.Conn.Read(p)
}

// SetKeepAliveConfig is the TCP connection's (sealed's).
func (r *replayConn) SetKeepAliveConfig(c net.KeepAliveConfig) error { return keepAlive(r.Conn, c) }

// keepAlive sets c's TCP keepalive when c is a TCP connection or wraps
// one.
func keepAlive(c net.Conn, cfg net.KeepAliveConfig) error {
	if k, ok := c.(interface {
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}); ok {
		return k.SetKeepAliveConfig(cfg)
	}
	return nil
}

// sealed is an encrypted connection between nodes, past both handshakes.
// Its Close closes the TCP connection at once, without TLS's close_notify
// alert: every protocol between nodes frames its own end, and a Close
// that wrote could wait (up to five seconds) on a peer that has stopped
// reading — a paused node — where a transport closing its connections
// must not. It is not a *tls.Conn, so the leader's HTTP server that it
// reaches does not take a forwarded request for a client's HTTPS (the
// forward says X-Forwarded-Proto for that).
type sealed struct{ *tls.Conn }

// Close closes the TCP connection.
func (s sealed) Close() error { return s.NetConn().Close() }

// SetKeepAliveConfig sets the TCP connection's keepalive, as on a
// *net.TCPConn (the AMQP server sets it on the connections it serves).
func (s sealed) SetKeepAliveConfig(c net.KeepAliveConfig) error { return keepAlive(s.NetConn(), c) }

// bind completes tc's TLS handshake and returns its exporter value.
// listener says which side this is: the listener's failures name a
// silent peer (Silent) and a plain dialer.
func bind(tc *tls.Conn, listener bool) ([]byte, error) {
	if err := tc.Handshake(); err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && string(rh.RecordHeader[:]) == magic[:5] {
			// The listener sent a plain hello ("SLUIC…") for a record.
			return nil, fmt.Errorf("%w: the listener does not encrypt (%s)", ErrAuth, encryptHint)
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		if listener && reset(err) {
			// A port probe, or a peer shutting down (Silent).
			err = fmt.Errorf("%w (%w)", errPeerGone, err)
		}
		if listener && isTimeout(err) {
			// A plain dialer waits for the hello and sends nothing.
			return nil, fmt.Errorf("nodeauth: TLS handshake: %w (a node that does not encrypt sends nothing first: %s)", err, encryptHint)
		}
		return nil, fmt.Errorf("nodeauth: TLS handshake: %w", err)
	}
	st := tc.ConnectionState()
	b, err := st.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return nil, fmt.Errorf("nodeauth: TLS exporter: %w", err)
	}
	return b, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
