package nodeauth

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

var (
	key   = Key(bytes.Repeat([]byte("k"), MinSecretSize))
	other = Key(bytes.Repeat([]byte("x"), MinSecretSize))
)

// pair runs Accept (node 1) and Dial (node 2) on the two ends of a pipe.
func pair(t *testing.T, lkey, dkey Key, lsurf, dsurf string, expect uint64) (acceptID uint64, acceptErr error, dialID uint64, dialErr error) {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		acceptID, acceptErr = Accept(a, Keys{lkey}, lsurf, 1)
		_ = a.Close() // a refusal closes, as a listener does
	}()
	dialID, dialErr = Dial(b, dkey, dsurf, 2, expect)
	_ = b.Close()
	<-done
	return
}

func TestHandshake(t *testing.T) {
	for _, k := range []Key{key, nil} {
		aid, aerr, did, derr := pair(t, k, k, SurfaceRaft, SurfaceRaft, 1)
		if aerr != nil || derr != nil || aid != 2 || did != 1 {
			t.Fatalf("key %q: accept %d %v, dial %d %v", k, aid, aerr, did, derr)
		}
	}
}

func TestHandshakeRefusals(t *testing.T) {
	cases := []struct {
		name         string
		lkey, dkey   Key
		lsurf, dsurf string
		expect       uint64
	}{
		{"wrong key", key, other, SurfaceRaft, SurfaceRaft, 0},
		{"no key against a key", key, nil, SurfaceRaft, SurfaceRaft, 0},
		{"a key against none", nil, key, SurfaceRaft, SurfaceRaft, 0},
		{"another surface", key, key, SurfaceHTTP, SurfaceRaft, 0},
	}
	for _, c := range cases {
		_, aerr, _, derr := pair(t, c.lkey, c.dkey, c.lsurf, c.dsurf, c.expect)
		if !errors.Is(aerr, ErrAuth) {
			t.Errorf("%s: accept %v, want ErrAuth", c.name, aerr)
		}
		if !errors.Is(derr, ErrRefused) {
			t.Errorf("%s: dial %v, want ErrRefused", c.name, derr)
		}
	}
	// The dialer refuses a listener that is not the node it dialled.
	if _, _, _, derr := pair(t, key, key, SurfaceRaft, SurfaceRaft, 3); !errors.Is(derr, ErrAuth) {
		t.Errorf("unexpected listener id: dial %v, want ErrAuth", derr)
	}
}

// TestImpostorListenerRefused: a listener that does not hold the key
// cannot produce the ack, even after seeing the dialer's proof.
func TestImpostorListenerRefused(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		_, _ = Accept(&ackAnyway{a}, Keys{other}, SurfaceRaft, 1)
		_ = a.Close()
	}()
	if _, err := Dial(b, key, SurfaceRaft, 2, 1); !errors.Is(err, ErrAuth) {
		t.Fatalf("dial to an impostor: %v, want ErrAuth", err)
	}
	_ = b.Close()
}

// ackAnyway makes Accept's failure irrelevant: it acks with a MAC made
// under its own key after a failed check, as an impostor would try.
type ackAnyway struct{ net.Conn }

func (c *ackAnyway) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == nil && n == ProofSize {
		_, _ = c.Write(bytes.Repeat([]byte{1}, MACSize))
	}
	return n, err
}

func TestDecodeHello(t *testing.T) {
	good := append([]byte(magic), Version)
	good = append(good, 0, 0, 0, 0, 0, 0, 0, 7)
	good = append(good, bytes.Repeat([]byte{9}, NonceSize)...)
	h, err := DecodeHello(good)
	if err != nil || h.Listener != 7 || h.Nonce[0] != 9 {
		t.Fatalf("DecodeHello = %+v, %v", h, err)
	}
	bad := bytes.Clone(good)
	bad[len(magic)] = 2
	if _, err := DecodeHello(bad); !errors.Is(err, ErrBadHello) {
		t.Fatalf("version 2: %v", err)
	}
	if _, err := DecodeHello(good[:10]); err == nil {
		t.Fatal("a short hello decoded")
	}
}

func TestFailureLog(t *testing.T) {
	var f FailureLog
	if !f.Allow("a") || f.Allow("a") || !f.Allow("b") {
		t.Fatal("want one line per key per interval")
	}
}

// TestListener: only authenticated connections come out of Accept; a
// failed handshake is reported to onFail; Close ends a handshake waiting.
func TestListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int64
	l := NewListener(inner, nil, Keys{key}, SurfaceHTTP, 1, func(net.Addr, error) { fails.Add(1) })
	defer func() { _ = l.Close() }()
	bad, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bad.Close() }()
	if _, err := DialConn(bad, other, SurfaceHTTP, 2, 0); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong key: %v, want ErrRefused", err)
	}
	good, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = good.Close() }()
	if _, err := DialConn(good, key, SurfaceHTTP, 2, 1); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("after the handshake: %q, %v", buf, err)
	}
	_ = c.Close()
	// The refused handshake is reported by the listener's goroutine for
	// that connection, which runs on after the client read the refusal:
	// wait for it rather than race it.
	poll.CheckFor(t, 10*time.Second, poll.True("the refused handshake to be reported", func() bool { return fails.Load() >= 1 }))
	if fails.Load() != 1 {
		t.Fatalf("%d failures reported, want 1", fails.Load())
	}
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Close() }()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if err := silent.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The hello may or may not have been written before Close; after it
	// the connection ends.
	if _, err := io.Copy(io.Discard, silent); err != nil {
		t.Fatalf("a pending handshake outlived Close: %v", err)
	}
}

// rw is a connection for the fuzz targets: reads from in, writes kept.
type rw struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *rw) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *rw) Write(p []byte) (int, error) { return c.out.Write(p) }

// FuzzAccept feeds arbitrary bytes to the listener's side as a dialer's
// proof: it never panics, never reads more than a proof, and never
// accepts (a valid proof needs the listener's fresh nonce).
func FuzzAccept(f *testing.F) {
	f.Add(make([]byte, ProofSize))
	f.Add(bytes.Repeat([]byte{0xff}, ProofSize+10))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &rw{in: bytes.NewReader(data)}
		id, err := Accept(c, Keys{key}, SurfaceRaft, 1)
		if err == nil {
			t.Fatalf("accepted node %d from fuzz input", id)
		}
		if read := len(data) - c.in.Len(); read > ProofSize {
			t.Fatalf("read %d bytes, more than a proof", read)
		}
		if c.out.Len() != HelloSize {
			t.Fatalf("wrote %d bytes, want only the hello", c.out.Len())
		}
	})
}

// FuzzDial feeds arbitrary bytes to the dialer's side as a listener's
// hello and ack: it never panics and never succeeds (the ack must be a
// MAC over the dialer's fresh nonce).
func FuzzDial(f *testing.F) {
	hello := append([]byte(magic), Version, 0, 0, 0, 0, 0, 0, 0, 1)
	hello = append(hello, make([]byte, NonceSize)...)
	f.Add(append(bytes.Clone(hello), make([]byte, MACSize)...))
	f.Add(hello)
	f.Add([]byte("SLUICENA\x02"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &rw{in: bytes.NewReader(data)}
		if id, err := Dial(c, key, SurfaceRaft, 2, 0); err == nil {
			t.Fatalf("authenticated listener %d from fuzz input", id)
		}
		if read := len(data) - c.in.Len(); read > HelloSize+MACSize {
			t.Fatalf("read %d bytes, more than a hello and an ack", read)
		}
		if _, err := DecodeHello(data[:min(len(data), HelloSize)]); err != nil && c.out.Len() != 0 {
			t.Fatalf("answered a hello that does not decode: %v", err)
		}
	})
}

// TestSilentClose: a peer that closes before sending a byte is not an
// authentication failure; one that stops mid-proof, or sends junk, is.
func TestSilentClose(t *testing.T) {
	for _, tc := range []struct {
		in     []byte
		silent bool
	}{
		{nil, true},
		{[]byte{1, 2, 3}, false},
		{make([]byte, ProofSize), false},
	} {
		_, err := Accept(&rw{in: bytes.NewReader(tc.in)}, Keys{key}, SurfaceRaft, 1)
		if err == nil || Silent(err) != tc.silent {
			t.Errorf("%d bytes: %v, Silent %v; want silent %v", len(tc.in), err, Silent(err), tc.silent)
		}
	}
}

// TestResetBeforeProofIsSilent: a peer that goes away with the hello
// unread resets the connection (as a node stopping mid-dial does); that
// is not an authentication failure either.
func TestResetBeforeProofIsSilent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).SetLinger(0); err != nil { // Close sends a reset
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		_, _, err = AcceptConnAny(s, Keys{key}, []string{SurfaceRaft}, 1)
		_ = s.Close()
		if err == nil || !Silent(err) {
			t.Fatalf("a reset before the proof: %v, Silent %v; want silent", err, Silent(err))
		}
	}
}

// TestRotationKeys: a listener holding two keys (a rotation) takes
// dialers of either, each acknowledged under its own key, and still
// refuses a third; With leaves out a missing extra key.
func TestRotationKeys(t *testing.T) {
	third := Key(bytes.Repeat([]byte("3"), MinSecretSize))
	for _, tc := range []struct {
		dial Key
		ok   bool
	}{{key, true}, {other, true}, {third, false}, {nil, false}} {
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := Accept(a, With(key, other), SurfaceRaft, 1)
			_ = a.Close()
			done <- err
		}()
		_, derr := Dial(b, tc.dial, SurfaceRaft, 2, 1)
		_ = b.Close()
		aerr := <-done
		if (aerr == nil) != tc.ok || (derr == nil) != tc.ok {
			t.Errorf("dial with %.1q: accept %v, dial %v; want ok %v", tc.dial, aerr, derr, tc.ok)
		}
	}
	if ks := With(key, nil); len(ks) != 1 {
		t.Fatalf("With(key, nil) = %d keys", len(ks))
	}
}

// TestAcceptAnySurface: one listener serving several shards' Raft groups
// learns from the proof which group a connection is for, refuses a group
// it does not serve, and shard 0 keeps the surface of a one-group node.
func TestAcceptAnySurface(t *testing.T) {
	if RaftSurface(0) != SurfaceRaft || RaftSurface(2) != "raft/2" {
		t.Fatalf("RaftSurface(0) = %q, RaftSurface(2) = %q", RaftSurface(0), RaftSurface(2))
	}
	served := []string{RaftSurface(0), RaftSurface(1), RaftSurface(2)}
	for _, c := range []struct {
		dial string
		want int // -1: refused
	}{{RaftSurface(0), 0}, {RaftSurface(2), 2}, {RaftSurface(3), -1}, {SurfaceHTTP, -1}} {
		a, b := net.Pipe()
		var (
			id, got int
			aerr    error
			done    = make(chan struct{})
		)
		go func() {
			defer close(done)
			var uid uint64
			uid, got, aerr = AcceptAny(a, Keys{other, key}, served, 1)
			id = int(uid)
			_ = a.Close()
		}()
		_, derr := Dial(b, key, c.dial, 2, 1)
		_ = b.Close()
		<-done
		switch {
		case c.want < 0 && (!errors.Is(aerr, ErrAuth) || derr == nil):
			t.Errorf("dial %q: accept %v, dial %v; want both refused", c.dial, aerr, derr)
		case c.want >= 0 && (aerr != nil || derr != nil || got != c.want || id != 2):
			t.Errorf("dial %q: accept node %d surface %d %v, dial %v; want node 2 surface %d", c.dial, id, got, aerr, derr, c.want)
		}
	}
}

// TestCloseMidHandshakeNotCounted: closing a listener ends the handshakes
// in progress; a dialer cut that way (a node stopping while a peer dials
// it, as a rolling restart does) failed no authentication, and is not
// counted as a refusal.
func TestCloseMidHandshakeNotCounted(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int64
	l := NewListener(inner, nil, Keys{key}, SurfaceRaft, 1, func(net.Addr, error) { fails.Add(1) })
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte{1, 2, 3}); err != nil { // a proof begun, not finished
		t.Fatal(err)
	}
	poll.CheckFor(t, 5*time.Second, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.open) == 0 {
			return errors.New("no handshake in progress yet")
		}
		return nil
	})
	_ = l.Close() // waits for the handshakes it ends
	if n := fails.Load(); n != 0 {
		t.Fatalf("a handshake the listener's own Close ended counted as %d refusals", n)
	}
}
