package clusterfaults

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// sink is a TCP server that keeps every byte it receives.
type sink struct {
	ln  net.Listener
	mu  sync.Mutex
	got bytes.Buffer
}

func newSink(t *testing.T) *sink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{ln: ln}
	t.Cleanup(func() { _ = ln.Close() }) // ends the accept loop
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }() // read-only
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					s.mu.Lock()
					s.got.Write(buf[:n])
					s.mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got.String()
}

func dial(t *testing.T, l *Link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // may be closed by the Link already
	return c
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// awaitClosed waits until the Link closes c (a read returns EOF or an
// error).
func awaitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte the target never sent")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the Link did not close the connection")
	}
}

// TestLinkModes drives a Link through every mode and checks what reaches
// the target: Pass forwards, Blackhole swallows (the sender sees no
// error) and its connections are closed on healing, Reset closes open and
// new connections, and a delay holds bytes back at least that long.
func TestLinkModes(t *testing.T) {
	s := newSink(t)
	l, err := Listen(s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }() // the test's verdict is already made
	if l.Target() != s.ln.Addr().String() {
		t.Fatalf("Target %q", l.Target())
	}

	c := dial(t, l)
	write(t, c, "a")
	poll.CheckFor(t, 10*time.Second, func() error { return want(s, "a") })

	l.Set(Blackhole, 0)
	write(t, c, "lost")
	c2 := dial(t, l) // accepted, swallowed
	write(t, c2, "lost2")
	// Accepted by the Link (not just by the kernel) before healing.
	poll.CheckFor(t, 10*time.Second, poll.True("two connections held", func() bool { return l.Conns() == 2 }))
	l.Heal()
	awaitClosed(t, c) // its stream has a hole: the sender must redial
	awaitClosed(t, c2)
	c3 := dial(t, l)
	write(t, c3, "b")
	poll.CheckFor(t, 10*time.Second, func() error { return want(s, "ab") })

	l.Set(Reset, 0)
	awaitClosed(t, c3)
	c4 := dial(t, l)
	awaitClosed(t, c4)

	const delay = 300 * time.Millisecond
	l.Set(Pass, delay)
	if m, d := l.State(); m != Pass || d != delay {
		t.Fatalf("State() = %v, %v", m, d)
	}
	c5 := dial(t, l)
	sent := time.Now()
	write(t, c5, "c")
	poll.CheckFor(t, 10*time.Second, func() error { return want(s, "abc") })
	// A lower bound only: a loaded machine makes it later, never earlier.
	if got := time.Since(sent); got < delay {
		t.Fatalf("delivered after %v, before the %v delay", got, delay)
	}
}

func want(s *sink, w string) error {
	if got := s.String(); got != w {
		return fmt.Errorf("the target got %q, want %q", got, w)
	}
	return nil
}
