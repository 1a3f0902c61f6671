package amqp

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// brokenWriteConn is a server-side socket whose writes fail once fail is
// set, and whose Close does nothing until closeNow: the server's reader
// goes on reading what the client sent after its writer failed, as it
// does while a dying connection's last frames are still buffered.
type brokenWriteConn struct {
	net.Conn
	fail atomic.Bool
	once sync.Once
}

func (c *brokenWriteConn) Write(b []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("test: the connection's writes fail")
	}
	return c.Conn.Write(b)
}

func (c *brokenWriteConn) Close() error { return nil }

func (c *brokenWriteConn) closeNow() { c.once.Do(func() { _ = c.Conn.Close() }) }

// A basic.consume whose consume-ok cannot be written (the connection's
// writer has failed) registers a consumer that never runs. Until
// 2026-12-04 the channel's teardown then waited for it forever: the
// connection never ended, the server's Close hung on it (in a cluster,
// the node's next leadership of shard 0 waited behind it: a 3-shard
// fault run lost shard 0's service on one node for over a minute), and
// the consumer stayed registered on its queue.
func TestConsumeWhoseReplyCannotBeWritten(t *testing.T) {
	b := startBroker(t)
	_, _, err := b.eng.CreateQueue("q", engine.DefaultQueueConfig(), nil)
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	conns := make(chan *brokenWriteConn, 1)
	ended := make(chan struct{})
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		w := &brokenWriteConn{Conn: nc}
		conns <- w
		b.srv.ServeConnThen(w, func() { close(ended) })
	}()
	c := rawDialAddr(t, ln.Addr().String(), wire.ConnectionTuneOK{ChannelMax: 16, FrameMax: 131072})
	must(t, c.nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	w := <-conns
	t.Cleanup(w.closeNow)
	if m := readMethod(t, c.r); m.Name() != (&wire.ConnectionOpenOK{}).Name() {
		t.Fatalf("got %s, want connection.open-ok", m.Name())
	}
	sendMethod(t, c.w, 1, &wire.ChannelOpen{})
	if m := readMethod(t, c.r); m.Name() != (&wire.ChannelOpenOK{}).Name() {
		t.Fatalf("got %s, want channel.open-ok", m.Name())
	}

	// The writer fails on channel 2's open-ok; then channel 1 consumes.
	w.fail.Store(true)
	sendMethod(t, c.w, 2, &wire.ChannelOpen{})
	deadline := time.Now().Add(10 * time.Second)
	for !b.writerFailed() {
		if time.Now().After(deadline) {
			t.Fatal("the server's writer never failed")
		}
		time.Sleep(time.Millisecond) // polling the server's connection
	}
	sendMethod(t, c.w, 1, &wire.BasicConsume{Queue: "q", ConsumerTag: "c"})
	for b.consumers("q") == 0 && b.connections() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the consume was never handled")
		}
		time.Sleep(time.Millisecond)
	}

	// The socket closes: the connection must end, and the consumer go.
	w.closeNow()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection never ended: its teardown waits for a consumer that never ran")
	}
	if n := b.consumers("q"); n != 0 {
		t.Errorf("queue q has %d consumers after its only connection ended, want 0", n)
	}
}

// writerFailed reports whether some connection of b's server can no
// longer write.
func (b *broker) writerFailed() bool {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	for c := range b.srv.conns {
		c.omu.Lock()
		failed := c.werr != nil
		c.omu.Unlock()
		if failed {
			return true
		}
	}
	return false
}

// connections is how many connections b's server holds.
func (b *broker) connections() int {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	return len(b.srv.conns)
}

// consumers is how many consumers queue name of vhost "/" has.
func (b *broker) consumers(name string) int {
	t := b.srv.topo
	t.mu.RLock()
	defer t.mu.RUnlock()
	q := t.vhosts["/"].queues[name]
	if q == nil {
		return 0
	}
	return len(q.consumers)
}
