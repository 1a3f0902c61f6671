package amqp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// rawClient is a hand-driven AMQP client.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// rawDial performs the handshake with the given tune-ok values and
// returns the client before connection.open.
func rawDial(t *testing.T, b *broker, tune wire.ConnectionTuneOK) *rawClient {
	t.Helper()
	return rawDialAddr(t, b.ln.Addr().String(), tune)
}

// rawDialAddr is rawDial to a listener of the test's own.
func rawDialAddr(t *testing.T, addr string, tune wire.ConnectionTuneOK) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	c := &rawClient{t: t, nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}
	c.w.WriteString(wire.ProtocolHeader)
	c.w.Flush()
	readMethod(t, c.r)
	sendMethod(t, c.w, 0, &wire.ConnectionStartOK{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	readMethod(t, c.r)
	sendMethod(t, c.w, 0, &tune)
	sendMethod(t, c.w, 0, &wire.ConnectionOpen{VirtualHost: "/"})
	return c
}

// expectClose reads methods until connection.close and checks it.
func (c *rawClient) expectClose(code uint16, text string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		m := readMethod(c.t, c.r)
		if cl, ok := m.(*wire.ConnectionClose); ok {
			if cl.ReplyCode != code || cl.ReplyText != text {
				c.t.Fatalf("connection.close %d %q, want %d %q", cl.ReplyCode, cl.ReplyText, code, text)
			}
			return
		}
	}
}

func TestMaxConnections(t *testing.T) {
	b := startBroker(t, withOptions(Options{MaxConnections: 2}))
	c1 := b.dial()
	b.dial()
	_, err := amqp091.Dial(b.url)
	if err == nil {
		t.Fatal("a third connection was accepted")
	}
	raw := rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072})
	raw.expectClose(530, "NOT_ALLOWED - connection refused: node connection limit (2) is reached")
	c1.Close()
	poll.CheckFor(t, 5*time.Second, poll.True("a free connection slot", func() bool {
		c, err := amqp091.Dial(b.url)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}))
}

func TestChannelMaxExceeded(t *testing.T) {
	b := startBroker(t)
	c := rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2, FrameMax: 131072})
	if _, ok := readMethod(t, c.r).(*wire.ConnectionOpenOK); !ok {
		t.Fatal("no open-ok")
	}
	for _, id := range []uint16{1, 2} {
		sendMethod(t, c.w, id, &wire.ChannelOpen{})
		if _, ok := readMethod(t, c.r).(*wire.ChannelOpenOK); !ok {
			t.Fatalf("channel %d not opened", id)
		}
	}
	sendMethod(t, c.w, 3, &wire.ChannelOpen{})
	c.expectClose(530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")

	// Reopening an open channel is 504, as RabbitMQ.
	c = rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072})
	readMethod(t, c.r)
	sendMethod(t, c.w, 1, &wire.ChannelOpen{})
	readMethod(t, c.r)
	sendMethod(t, c.w, 1, &wire.ChannelOpen{})
	c.expectClose(504, "CHANNEL_ERROR - second 'channel.open' seen")
}

func TestFrameMaxEnforced(t *testing.T) {
	b := startBroker(t)
	c := rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 4096})
	readMethod(t, c.r)
	// A frame larger than the negotiated frame_max: 501.
	frame := []byte{wire.FrameMethod, 0, 1}
	frame = binary.BigEndian.AppendUint32(frame, 5000)
	frame = append(append(frame, make([]byte, 5000)...), wire.FrameEnd)
	c.w.Write(frame)
	c.w.Flush()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	m := readMethod(t, c.r)
	if cl, ok := m.(*wire.ConnectionClose); !ok || cl.ReplyCode != 501 {
		t.Fatalf("got %#v", m)
	}
	// A frame_max above the server's in tune-ok: 530.
	c = rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: DefaultFrameMax + 1})
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if cl, ok := readMethod(t, c.r).(*wire.ConnectionClose); !ok || cl.ReplyCode != 530 {
		t.Fatalf("got %#v", cl)
	}
}

func TestMaxConsumersPerChannel(t *testing.T) {
	b := startBroker(t, withOptions(Options{MaxConsumersPerChannel: 2}))
	c, ch := b.channel()
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	_, err := ch.QueueDeclare("mc", false, false, false, false, nil)
	must(t, err)
	for range 2 {
		_, err := ch.Consume("mc", "", false, false, false, false, nil)
		must(t, err)
	}
	_, err = ch.Consume("mc", "", false, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 530 || e.Reason != "NOT_ALLOWED - reached maximum (2) of consumers per channel" {
		t.Fatalf("third consumer: %v", e)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 530 {
			t.Fatalf("connection close: %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection stayed open (RabbitMQ closes it)")
	}
}

func TestMaxUnackedPerChannel(t *testing.T) {
	b := startBroker(t, withOptions(Options{MaxUnackedPerChannel: 5}))
	_, ch := b.channel()
	_, err := ch.QueueDeclare("mu", false, false, false, false, nil)
	must(t, err)
	for range 8 {
		publish(t, ch, "", "mu", "m")
	}
	msgs, err := ch.Consume("mu", "", false, false, false, false, nil)
	must(t, err)
	var last amqp091.Delivery
	for range 5 {
		last = recv(t, msgs)
	}
	noDelivery(t, msgs, 300*time.Millisecond)
	// basic.get on the full channel: get-empty although messages wait.
	if _, ok, err := ch.Get("mu", false); err != nil || ok {
		t.Fatalf("get on a full channel: ok=%v err=%v", ok, err)
	}
	must(t, last.Ack(true))
	for range 3 {
		recv(t, msgs)
	}
}

// The message size limit is RabbitMQ 4.x's 16 MiB by default and
// configurable (Options.MaxMessageSize): a 2 MiB body, which the old fixed
// 1 MiB refused, round-trips; over a configured limit the channel closes
// with RabbitMQ's 406.
func TestMessageSizeLimit(t *testing.T) {
	b := startBroker(t)
	if b.srv.opts.MaxMessageSize != 16<<20 {
		t.Fatalf("default MaxMessageSize %d, want 16 MiB", b.srv.opts.MaxMessageSize)
	}
	_, ch := b.channel()
	_, err := ch.QueueDeclare("big", false, false, false, false, nil)
	must(t, err)
	body := bytes.Repeat([]byte("b"), 2<<20)
	must(t, ch.Publish("", "big", false, false, amqp091.Publishing{Body: body}))
	if d := getOne(t, ch, "big"); !bytes.Equal(d.Body, body) {
		t.Fatalf("a 2 MiB body came back as %d bytes", len(d.Body))
	}

	b = startBroker(t, withOptions(Options{MaxMessageSize: 1 << 20}))
	_, ch = b.channel()
	_, err = ch.QueueDeclare("big", false, false, false, false, nil)
	must(t, err)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	must(t, ch.Publish("", "big", false, false, amqp091.Publishing{Body: make([]byte, 1<<20+1)}))
	select {
	case e := <-closed:
		want := "PRECONDITION_FAILED - message size 1048577 is larger than configured max size 1048576"
		if e == nil || e.Code != 406 || e.Reason != want {
			t.Fatalf("close: %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an oversized message did not close the channel")
	}
}

// serverConn finds the server side of a client socket.
func (b *broker) serverConn(client net.Conn) *conn {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	for c := range b.srv.conns {
		if c.nc.RemoteAddr().String() == client.LocalAddr().String() {
			return c
		}
	}
	return nil
}

// A consumer whose client stops reading must not block anything else, its
// outgoing queue stays bounded, and it is closed after WriteTimeout with
// its unacknowledged messages requeued.
func TestStalledConsumer(t *testing.T) {
	const (
		buffer  = 256 << 10
		msgSize = 100 << 10
		count   = 300
	)
	b := startBroker(t, withOptions(Options{WriteTimeout: 3 * time.Second, OutgoingBuffer: buffer}))
	_, ch := b.channel()
	for _, q := range []string{"big", "victim", "other"} {
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		must(t, err)
	}
	body := bytes.Repeat([]byte("x"), msgSize)
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, count))
	for range count {
		must(t, ch.PublishWithContext(context.Background(), "", "big", false, false, amqp091.Publishing{Body: body}))
	}
	for range count {
		<-confirms
	}

	// The stalled client: consume "big" and "victim" with a large
	// prefetch, then never read again.
	raw := rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072})
	raw.nc.(*net.TCPConn).SetReadBuffer(4096)
	readMethod(t, raw.r)
	sendMethod(t, raw.w, 1, &wire.ChannelOpen{})
	readMethod(t, raw.r)
	sendMethod(t, raw.w, 1, &wire.BasicQos{PrefetchCount: 1000})
	readMethod(t, raw.r)
	sendMethod(t, raw.w, 1, &wire.BasicConsume{Queue: "victim", ConsumerTag: "v"})
	sendMethod(t, raw.w, 1, &wire.BasicConsume{Queue: "big", ConsumerTag: "b"})
	srv := b.serverConn(raw.nc)
	if srv == nil {
		t.Fatal("server side of the stalled client not found")
	}
	var peak int
	poll.CheckFor(t, 5*time.Second, poll.True("the stalled connection's queue to fill", func() bool {
		peak = max(peak, srv.pending())
		return srv.pending() > buffer/2
	}))

	// Another connection works normally meanwhile, in bounded time:
	// topology changes (including deleting the stalled consumer's queue),
	// publishes and consumes.
	_, ch2 := b.channel()
	deadline := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		must(t, f())
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Fatalf("%s took %v behind a stalled client", what, d)
		}
		peak = max(peak, srv.pending())
	}
	deadline("queue.declare", func() error { _, err := ch2.QueueDeclare("tmp", false, false, false, false, nil); return err })
	deadline("queue.delete", func() error { _, err := ch2.QueueDelete("tmp", false, false, false); return err })
	deadline("queue.delete of the stalled consumer's queue", func() error {
		_, err := ch2.QueueDelete("victim", false, false, false)
		return err
	})
	deadline("publish and consume", func() error {
		publish(t, ch2, "", "other", "hello")
		d := getOne(t, ch2, "other")
		return d.Ack(false)
	})
	if srv.pending() > buffer+msgSize+4096 || peak > buffer+msgSize+4096 {
		t.Fatalf("outgoing queue reached %d bytes (limit %d)", peak, buffer)
	}

	// The stalled connection is closed after WriteTimeout, and what it
	// held goes back to "big".
	poll.CheckFor(t, 10*time.Second, poll.True("the stalled connection to be closed", func() bool {
		peak = max(peak, srv.pending())
		return b.serverConn(raw.nc) == nil
	}))
	if peak > buffer+msgSize+4096 {
		t.Fatalf("outgoing queue reached %d bytes (limit %d)", peak, buffer)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("its deliveries to be requeued", func() bool {
		info, err := b.eng.GetQueue("big")
		return err == nil && info.InFlight == 0 && info.Visible == count
	}))
}
