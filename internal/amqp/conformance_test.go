package amqp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
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

// writeLog records every Write the server makes on its connections.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
}

type loggingListener struct {
	net.Listener
	log *writeLog
}

func (l loggingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return loggingConn{c, l.log}, nil
}

type loggingConn struct {
	net.Conn
	log *writeLog
}

func (c loggingConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, append([]byte(nil), p...))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// rawOpenCaps performs the handshake by hand on addr with the given client
// capabilities and opens channel 1.
func rawOpenCaps(t *testing.T, addr string, caps ...string) (*bufio.Reader, *bufio.Writer) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	return rawHandshake(t, nc, caps...)
}

// rawHandshake opens an AMQP connection by hand on nc, with the given
// client capabilities, and opens channel 1.
func rawHandshake(t *testing.T, nc net.Conn, caps ...string) (*bufio.Reader, *bufio.Writer) {
	t.Helper()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	r, w := bufio.NewReader(nc), bufio.NewWriter(nc)
	w.WriteString(wire.ProtocolHeader)
	w.Flush()
	readMethod(t, r)
	var ct wire.Table
	for _, c := range caps {
		ct = append(ct, wire.Field{Key: c, Value: true})
	}
	sendMethod(t, w, 0, &wire.ConnectionStartOK{ClientProperties: wire.Table{{Key: "capabilities", Value: ct}},
		Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	readMethod(t, r)
	sendMethod(t, w, 0, &wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072})
	sendMethod(t, w, 0, &wire.ConnectionOpen{VirtualHost: "/"})
	if _, ok := readMethod(t, r).(*wire.ConnectionOpenOK); !ok {
		t.Fatal("no open-ok")
	}
	sendMethod(t, w, 1, &wire.ChannelOpen{})
	if _, ok := readMethod(t, r).(*wire.ChannelOpenOK); !ok {
		t.Fatal("no channel open-ok")
	}
	return r, w
}

// On queue.delete, the basic.cancel of the deleting connection's consumer
// and the delete-ok go out back to back in one write, as RabbitMQ sends
// them: amqplib's "cancelled consumer" test closes on the cancel and must
// find the delete-ok already there. The server's writes are recorded (a
// second listener on the same server, wrapped), so the check does not
// depend on timing.
func TestQueueDeleteCancelAndDeleteOKTogether(t *testing.T) {
	b := startBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	log := &writeLog{}
	go b.srv.Serve(loggingListener{ln, log})
	t.Cleanup(func() { ln.Close() })

	r, w := rawOpenCaps(t, ln.Addr().String(), "consumer_cancel_notify")
	sendMethod(t, w, 1, &wire.QueueDeclare{Queue: "cancelled"})
	if _, ok := readMethod(t, r).(*wire.QueueDeclareOK); !ok {
		t.Fatal("no declare-ok")
	}
	sendMethod(t, w, 1, &wire.BasicConsume{Queue: "cancelled", ConsumerTag: "c1"})
	if _, ok := readMethod(t, r).(*wire.BasicConsumeOK); !ok {
		t.Fatal("no consume-ok")
	}
	sendMethod(t, w, 1, &wire.QueueDelete{Queue: "cancelled"})
	if m, ok := readMethod(t, r).(*wire.BasicCancel); !ok || m.ConsumerTag != "c1" {
		t.Fatalf("got %#v, want basic.cancel first", m)
	}
	if _, ok := readMethod(t, r).(*wire.QueueDeleteOK); !ok {
		t.Fatal("no delete-ok after the cancel")
	}
	cancel, err := appendMethod(nil, 1, &wire.BasicCancel{ConsumerTag: "c1", NoWait: true})
	must(t, err)
	deleteOK, err := appendMethod(nil, 1, &wire.QueueDeleteOK{})
	must(t, err)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, wr := range log.writes {
		if i := bytes.Index(wr, cancel); i >= 0 {
			if !bytes.HasPrefix(wr[i+len(cancel):], deleteOK) {
				t.Fatalf("basic.cancel was written without the delete-ok right after it: %x", wr)
			}
			return
		}
	}
	t.Fatal("no write held the basic.cancel")
}

// A passive queue.declare-ok counts messages a consumer has taken but not
// yet queued for writing as ready: a client that cancels a no-ack consumer
// once the count is 0 must have every delivery ahead of the declare-ok
// (pika's TestBasicCancelWithNonAckableConsumer). Here the consumer's
// client stops reading, so its consumer holds taken messages it cannot
// write; with no-ack, those are exactly the engine's in-flight messages.
func TestPassiveDeclareCountsTakenUndelivered(t *testing.T) {
	b := startBroker(t, withOptions(Options{OutgoingBuffer: 64 << 10}))
	_, ch := b.channel()
	_, err := ch.QueueDeclare("taken", false, false, false, false, nil)
	must(t, err)
	body := bytes.Repeat([]byte("x"), 256<<10)
	for range 64 {
		_, err := b.eng.Send("taken", []engine.Message{{Body: body}})
		must(t, err)
	}
	nc, err := net.Dial("tcp", b.ln.Addr().String())
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	must(t, nc.(*net.TCPConn).SetReadBuffer(4096))
	r, w := rawHandshake(t, nc)
	sendMethod(t, w, 1, &wire.BasicConsume{Queue: "taken", ConsumerTag: "c", NoAck: true})
	if _, ok := readMethod(t, r).(*wire.BasicConsumeOK); !ok {
		t.Fatal("no consume-ok")
	}
	// The client reads nothing more.
	var count, want int
	poll.CheckFor(t, 5*time.Second, poll.True("the declare-ok count to include taken messages", func() bool {
		info, err := b.eng.GetQueue("taken")
		must(t, err)
		q, err := ch.QueueDeclarePassive("taken", false, false, false, false, nil)
		must(t, err)
		info2, err := b.eng.GetQueue("taken")
		must(t, err)
		count, want = q.Messages, info.Visible+info.InFlight
		return info.InFlight > 0 && info.InFlight == info2.InFlight && info.Visible == info2.Visible && count == want
	}))
}

// An unknown exchange type is a 406 PRECONDITION_FAILED channel error, as
// on RabbitMQ 4.x (3.x closed the connection with 503 COMMAND_INVALID):
// the connection and its other channels stay usable.
func TestUnknownExchangeTypeIsChannelError(t *testing.T) {
	b := startBroker(t)
	c, ch := b.channel()
	connClosed := c.NotifyClose(make(chan *amqp091.Error, 1))
	err := ch.ExchangeDeclare("weird", "x-no-such-type", false, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != "PRECONDITION_FAILED - invalid exchange type 'x-no-such-type'" {
		t.Fatalf("got %v", e)
	}
	ch2, err := c.Channel()
	must(t, err)
	must(t, ch2.ExchangeDeclare("fine", "direct", false, true, false, false, nil))
	select {
	case e := <-connClosed:
		t.Fatalf("connection closed: %v", e)
	default:
	}
}
