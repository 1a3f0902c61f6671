package nodeauth

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/brokertest/tap"
)

func newEnc(t *testing.T) *Encryption {
	t.Helper()
	e, err := NewEncryption()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// exchange dials l through addr with e and key, sends a secret line each
// way and reports what the dial and the exchange returned.
func exchange(t *testing.T, l *Listener, addr string, e *Encryption, k Key) error {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	c, id, err := e.DialConn(raw, k, SurfaceRaft, 2, 1)
	if err != nil {
		return err
	}
	if id != 1 {
		t.Fatalf("reached node %d, want 1", id)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if _, ok := s.(*tls.Conn); ok {
		t.Fatal("the listener returned a *tls.Conn: an http.Server would take it for a client's HTTPS")
	}
	out, back := []byte("a message body only the two nodes may read"), []byte("and its acknowledgement, just as private")
	go func() { _, _ = c.Write(out) }()
	got := make([]byte, len(out))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, out) {
		t.Fatalf("listener read %q, %v", got, err)
	}
	go func() { _, _ = s.Write(back) }()
	got = make([]byte, len(back))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, back) {
		t.Fatalf("dialer read %q, %v", got, err)
	}
	return c.Close()
}

// listen starts a Listener for node 1 holding key on 127.0.0.1:0,
// encrypted as e says, closed when the test ends. failed returns every
// handshake it reported as failed so far.
func listen(t *testing.T, e *Encryption) (l *Listener, addr string, failed func() []error) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	l = NewListener(inner, e, Keys{key}, SurfaceRaft, 1, func(_ net.Addr, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	t.Cleanup(func() { _ = l.Close() })
	return l, inner.Addr().String(), func() []error {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
}

// refusedOnce waits until failed reports one refused handshake.
func refusedOnce(t *testing.T, failed func() []error) {
	t.Helper()
	poll.CheckFor(t, 10*time.Second, poll.True("the refusal counted", func() bool { return len(failed()) == 1 }))
}

// TestEncryptedConnection: with Encryption on both ends the handshake
// passes, the bytes after it arrive, and none of them — nor the handshake
// — cross the wire in the clear; without it, they do (the tap can tell).
func TestEncryptedConnection(t *testing.T) {
	for _, encrypt := range []bool{true, false} {
		var e *Encryption
		if encrypt {
			e = newEnc(t)
		}
		l, addr, failed := listen(t, e)
		p := tap.New(t, addr)
		var de *Encryption
		if encrypt {
			de = newEnc(t) // another node's throwaway certificate
		}
		if err := exchange(t, l, p.Addr(), de, key); err != nil {
			t.Fatalf("encrypt=%v: %v", encrypt, err)
		}
		_ = l.Close()
		for _, clear := range []string{"only the two nodes", "just as private", magic} {
			if got := p.Seen(clear); got == encrypt {
				t.Errorf("encrypt=%v: %q on the wire: %v", encrypt, clear, got)
			}
		}
		if f := failed(); len(f) != 0 {
			t.Errorf("encrypt=%v: failed handshakes %v", encrypt, f)
		}
	}
}

// TestEncryptedWrongKeyRefused: TLS alone lets anyone in (nobody checks a
// certificate); the secret still decides.
func TestEncryptedWrongKeyRefused(t *testing.T) {
	l, addr, failed := listen(t, newEnc(t))
	if err := exchange(t, l, addr, newEnc(t), other); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong key: %v, want ErrRefused", err)
	}
	refusedOnce(t, failed)
}

// mitm terminates TLS on both sides with its own certificate and relays
// the plaintext between them: it holds no secret, but sees and could
// rewrite everything if the handshake were not bound to the session.
func mitm(t *testing.T, target string) string {
	t.Helper()
	e := newEnc(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp", target)
				if err != nil {
					_ = c.Close()
					return
				}
				tu := tls.Client(u, e.client)
				tc := tls.Server(c, e.server)
				t.Cleanup(func() { _ = tu.Close(); _ = tc.Close() })
				go func() { _, _ = io.Copy(tu, tc); _ = tu.Close() }()
				_, _ = io.Copy(tc, tu)
				_ = tc.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestManInTheMiddleRefused: a relay that ends TLS on each side and
// passes the node handshake's bytes on unchanged cannot get through, as
// each side's MAC is bound to its own TLS session.
func TestManInTheMiddleRefused(t *testing.T) {
	l, addr, failed := listen(t, newEnc(t))
	if err := exchange(t, l, mitm(t, addr), newEnc(t), key); !errors.Is(err, ErrRefused) {
		t.Fatalf("through a man in the middle: %v, want ErrRefused", err)
	}
	refusedOnce(t, failed)
}

// TestEncryptionMismatch: a node that encrypts and one that does not
// refuse each other, and the errors name the setting.
func TestEncryptionMismatch(t *testing.T) {
	for _, listenerEncrypts := range []bool{false, true} {
		var le, de *Encryption
		if listenerEncrypts {
			le = newEnc(t)
		} else {
			de = newEnc(t)
		}
		l, addr, failed := listen(t, le)
		err := exchange(t, l, addr, de, key)
		if err == nil || !strings.Contains(err.Error(), "[cluster] encrypt") {
			t.Errorf("listener encrypts=%v: dial %v, want an error naming [cluster] encrypt", listenerEncrypts, err)
		}
		if listenerEncrypts && !errors.Is(err, ErrRefused) {
			t.Errorf("plain dialer of an encrypting listener: %v, want ErrRefused", err)
		}
		// An encrypting listener reports the plain dialer only when its
		// own handshake timeout ends first; when the dialer's does, the
		// dialer closes having sent nothing, which is a port probe's
		// silence. The plain listener always reports the TLS dialer.
		if !listenerEncrypts {
			refusedOnce(t, failed)
			if lerr := failed()[0]; !strings.Contains(lerr.Error(), "[cluster] encrypt") || !errors.Is(lerr, ErrAuth) {
				t.Errorf("plain listener: %v, want ErrAuth naming [cluster] encrypt", lerr)
			}
		}
		_ = l.Close()
	}
}

// TestTransitionListener: a listener in transition takes plain and TLS
// dialers alike, each the way it came (the tap sees the plain one's bytes
// and not the TLS one's), and a node in transition dials as its dial
// flag says.
func TestTransitionListener(t *testing.T) {
	for _, dialer := range []string{"plain", "tls", "transition-plain", "transition-tls"} {
		l, addr, failed := listen(t, newEnc(t).Transition(false))
		p := tap.New(t, addr)
		var de *Encryption
		switch dialer {
		case "tls":
			de = newEnc(t)
		case "transition-plain":
			de = newEnc(t).Transition(false)
		case "transition-tls":
			de = newEnc(t).Transition(true)
		}
		if err := exchange(t, l, p.Addr(), de, key); err != nil {
			t.Fatalf("%s dialer: %v", dialer, err)
		}
		_ = l.Close()
		encrypted := dialer == "tls" || dialer == "transition-tls"
		if clear := p.Seen("only the two nodes"); clear == encrypted {
			t.Errorf("%s dialer: the body in the clear on the wire: %v", dialer, clear)
		}
		if f := failed(); len(f) != 0 {
			t.Errorf("%s dialer: failed handshakes %v", dialer, f)
		}
	}
}
