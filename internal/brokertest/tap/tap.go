// Package tap is a TCP proxy for tests that records every byte it
// carries, both ways: a test puts it between two parties to see what
// crosses the wire (whether a message body travels in the clear).
//
// It imports nothing of Sluice, so tests of any package may use it.
package tap

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// Tap listens on 127.0.0.1:0 and relays each connection to its target.
type Tap struct {
	ln  net.Listener
	mu  sync.Mutex
	got bytes.Buffer
}

// New starts a Tap in front of target; it stops, closing every
// connection it relays, when the test ends.
func New(t testing.TB, target string) *Tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Tap{ln: ln}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(io.MultiWriter(p, c), u); _ = c.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(io.MultiWriter(p, u), c); _ = u.Close() }()
		}
	}()
	return p
}

// Addr is the address to dial instead of the target.
func (p *Tap) Addr() string { return p.ln.Addr().String() }

// Write records b (both directions into one record).
func (p *Tap) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got.Write(b)
}

// Seen reports whether s crossed the tap, either way, so far.
func (p *Tap) Seen(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.got.Bytes(), []byte(s))
}
