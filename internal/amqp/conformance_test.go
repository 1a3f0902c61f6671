package amqp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Issue 12: behaviours other clients' acceptance suites (pika, amqplib,
// py-amqp) expect of RabbitMQ, checked with amqp091-go or a raw client.

// After close-ok the server reads and discards what the client still
// sends until the client closes: closing with unread input would make the
// kernel reset the connection, and amqplib's close callback (its
// high-watermark tests) would see ECONNRESET instead of completing.
func TestCloseDrainsUnreadInput(t *testing.T) {
	b := startBroker(t)
	nc := rawOpen(t, b, 0)
	r, w := bufio.NewReader(nc), bufio.NewWriter(nc)
	// connection.close and, in the same write, input the server will
	// not have read when it answers (heartbeats, as a busy client's
	// queued frames would be).
	f, err := wire.MethodFrame(0, &wire.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
	must(t, err)
	must(t, wire.WriteFrame(w, f))
	for range 20000 {
		must(t, wire.WriteFrame(w, wire.Frame{Type: wire.FrameHeartbeat}))
	}
	must(t, w.Flush())
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, ok := readMethod(t, r).(*wire.ConnectionCloseOK); !ok {
		t.Fatal("no close-ok")
	}
	// The server half-closes after close-ok: a clean EOF, not a reset.
	_, err = io.Copy(io.Discard, r)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			t.Fatal("the server reset the connection instead of draining the client's input")
		}
		t.Fatalf("reading after close-ok: %v", err)
	}
	// Writing more after close-ok does not fail with EPIPE/ECONNRESET while
	// the server still drains.
	if _, err := nc.Write(make([]byte, 8)); err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			t.Fatalf("write after close-ok: %v", err)
		}
	}
}
