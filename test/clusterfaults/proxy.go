// Package clusterfaults runs a cluster of real `sluice server` processes on
// 127.0.0.1 whose every Raft link, and every request or AMQP connection a
// node forwards to the leader, passes through a Link (a TCP proxy this
// package controls), injects faults on a seeded schedule (partitions, one-way
// partitions, delayed links, cut forwards, SIGKILL and restart, SIGSTOP and
// SIGCONT, kill -9 of the leader) under a load of SQS producers and consumers
// spread over every node, and judges the history with the test/faults
// Checker after healing (cluster_test.go, faults_test.go). See
// docs/reliability.md, "Cluster faults".
//
// The Raft transport (internal/cluster/raftstore) sends each node's messages
// to a peer over a connection that node dials, so one Link per directed pair
// A→B (node A's peer entry for B names the Link, which forwards to B's real
// Raft listener) carries exactly A's messages to B: cutting it is a one-way
// partition, cutting both directions a partition.
package clusterfaults

import (
	"net"
	"sync"
	"time"
)

// Mode is what a Link does with traffic.
type Mode int

const (
	// Pass forwards bytes both ways (after the Link's delay, if any).
	Pass Mode = iota
	// Blackhole keeps connections open, reads and discards what the
	// sender writes, and forwards nothing: the sender sees no error, its
	// messages vanish (a silent network partition). New connections are
	// accepted and treated the same way.
	Blackhole
	// Reset closes every connection and every new one at once: the sender
	// sees errors and keeps redialling (a refused route).
	Reset
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	}
	return "mode?"
}

// chunkQueue bounds the bytes a delayed connection holds in flight (in
// reads of up to 32 KiB); a full queue stops reading, so the sender feels
// back-pressure as it would on a slow link.
const chunkQueue = 256

// Link is a one-direction TCP proxy from a listener on 127.0.0.1:0 to a
// target address. It is safe for concurrent use. A connection that was
// blackholed is never forwarded again (its byte stream has a hole in it):
// it is closed when the Link returns to Pass, and the sender redials.
type Link struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	conns   map[*pipe]struct{}
	closed  bool
	wg      sync.WaitGroup
	dropped int64 // bytes discarded by Blackhole (for logs)
}

// pipe is one proxied connection.
type pipe struct {
	client, server net.Conn // server is nil for a connection accepted while blackholed
	holed          bool     // guarded by Link.mu: discarding, never forwarded again
	once           sync.Once
}

func (p *pipe) close() {
	p.once.Do(func() {
		_ = p.client.Close() // closing is all that is wanted; errors change nothing
		if p.server != nil {
			_ = p.server.Close()
		}
	})
}

// Listen starts a Link on 127.0.0.1:0 that forwards to target.
func Listen(target string) (*Link, error) { return ListenOn("127.0.0.1:0", target) }

// ListenOn starts a Link on addr that forwards to target.
func ListenOn(addr, target string) (*Link, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Link{target: target, ln: ln, conns: map[*pipe]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the address senders dial.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Target is the address the Link forwards to.
func (l *Link) Target() string { return l.target }

// State returns the current mode and delay.
func (l *Link) State() (Mode, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode, l.delay
}

// Set changes the mode and the delay added to every chunk forwarded from
// now on. Blackhole marks every open connection as holed; Reset and a
// return to Pass close the holed (Reset: all) connections.
func (l *Link) Set(mode Mode, delay time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode, l.delay = mode, delay
	for p := range l.conns {
		switch {
		case mode == Reset, mode == Pass && p.holed:
			delete(l.conns, p)
			p.close()
		case mode == Blackhole:
			p.holed = true
		}
	}
}

// Conns is the number of connections the Link holds open.
func (l *Link) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Heal is Set(Pass, 0).
func (l *Link) Heal() { l.Set(Pass, 0) }

// Close stops the listener and every connection and waits for the Link's
// goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	l.closed = true
	for p := range l.conns {
		p.close()
	}
	l.conns = map[*pipe]struct{}{}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		mode, closed := l.mode, l.closed
		l.mu.Unlock()
		if closed || mode == Reset {
			_ = c.Close() // refused: the sender sees the error
			continue
		}
		p := &pipe{client: c}
		if mode == Pass {
			s, err := net.DialTimeout("tcp", l.target, 2*time.Second)
			if err != nil {
				_ = c.Close() // the target is down: so is the route
				continue
			}
			p.server = s
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			p.close()
			continue
		}
		// The mode may have changed while dialling: a connection that
		// was not dialled is holed from the start.
		p.holed = p.server == nil || l.mode == Blackhole
		if l.mode == Reset {
			l.mu.Unlock()
			p.close()
			continue
		}
		l.conns[p] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.forward(p)
	}
}

// holed reports whether p is discarding.
func (l *Link) holed(p *pipe) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return p.holed
}

type chunk struct {
	b   []byte
	due time.Time
}

// forward copies client→server through a delay queue and server→client
// directly, until either side ends; then it closes both.
func (l *Link) forward(p *pipe) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, p)
		l.mu.Unlock()
		p.close()
	}()
	q := make(chan chunk, chunkQueue)
	var wg sync.WaitGroup
	if p.server != nil {
		wg.Add(2)
		go func() { // writer: delivers chunks when due
			defer wg.Done()
			failed := false
			for c := range q { // drained to the end, so the reader never blocks
				if failed || l.holed(p) {
					continue
				}
				if d := time.Until(c.due); d > 0 {
					time.Sleep(d) // the injected latency itself
				}
				if _, err := p.server.Write(c.b); err != nil {
					failed = true
					p.close() // ends the reader too
				}
			}
		}()
		go func() { // the way back (the Raft transport sends nothing back; copy it anyway)
			defer wg.Done()
			defer p.close()
			buf := make([]byte, 32<<10)
			for {
				n, err := p.server.Read(buf)
				if n > 0 && !l.holed(p) {
					if _, werr := p.client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := p.client.Read(buf)
		if n > 0 {
			l.mu.Lock()
			holed, delay := p.holed, l.delay
			if holed {
				l.dropped += int64(n)
			}
			l.mu.Unlock()
			if !holed {
				q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			break // EOF, a reset or Close: the connection is over either way
		}
	}
	close(q)
	p.close()
	wg.Wait()
}
