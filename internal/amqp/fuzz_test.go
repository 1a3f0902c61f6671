package amqp

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// panicCounter counts "connection panic" log records: serve recovers
// panics so one client cannot crash the broker, and the fuzz test must
// still see them.
type panicCounter struct{ n atomic.Int64 }

func (p *panicCounter) Enabled(context.Context, slog.Level) bool { return true }
func (p *panicCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "panic") {
		p.n.Add(1)
	}
	return nil
}
func (p *panicCounter) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *panicCounter) WithGroup(string) slog.Handler      { return p }

func frameBytes(t testing.TB, ch uint16, m wire.Method) []byte {
	f, err := wire.MethodFrame(ch, m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := wire.AppendFrame(nil, f)
	return b
}

// FuzzConnection feeds arbitrary bytes to a connection after a valid
// handshake. The server must not panic, must answer only with frames it
// can encode, and any connection.close it sends must carry a hard-error
// code (or 320/403/530 as RabbitMQ uses them).
func FuzzConnection(f *testing.F) {
	var pc panicCounter
	b := startBroker(f, withOptions(Options{Logger: slog.New(&pc), FrameMax: 16384}))
	open := frameBytes(f, 1, &wire.ChannelOpen{})
	f.Add(open)
	f.Add(append(append([]byte{}, open...), frameBytes(f, 1, &wire.QueueDeclare{Queue: "fz", AutoDelete: true})...))
	pub := frameBytes(f, 1, &wire.BasicPublish{RoutingKey: "fz"})
	hdr := appendContentHeader(nil, 1, 3, []byte{0x10, 0, 2})
	body, _ := wire.AppendFrame(nil, wire.Frame{Type: wire.FrameBody, Channel: 1, Payload: []byte("abc")})
	f.Add(append(append(append(append([]byte{}, open...), pub...), hdr...), body...))
	f.Add(append(append([]byte{}, open...), frameBytes(f, 1, &wire.BasicAck{DeliveryTag: 7})...))
	f.Add(append(append([]byte{}, open...), frameBytes(f, 1, &wire.BasicConsume{Queue: "fz"})...))
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0xCE})
	f.Add([]byte{1, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 4, 0, 10, 0, 50, 0xCE})
	f.Add(frameBytes(f, 0, &wire.ConnectionClose{ReplyCode: 200}))
	f.Add(append(append([]byte{}, open...), open...))
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		b.srv.ServeConn(server)
		client.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(client)
		w := bufio.NewWriter(client)
		w.WriteString(wire.ProtocolHeader)
		w.Flush()
		readMethod(t, r)
		sendMethod(t, w, 0, &wire.ConnectionStartOK{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
		readMethod(t, r)
		sendMethod(t, w, 0, &wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 16384, Heartbeat: 0})
		sendMethod(t, w, 0, &wire.ConnectionOpen{VirtualHost: "/"})
		if _, ok := readMethod(t, r).(*wire.ConnectionOpenOK); !ok {
			t.Fatal("no open-ok")
		}
		done := make(chan uint16, 1)
		go func() {
			var code uint16
			defer func() { done <- code }()
			for {
				fr, err := wire.ReadFrame(r, 0)
				if err != nil {
					return
				}
				if fr.Type != wire.FrameMethod || fr.Channel != 0 {
					continue
				}
				m, err := wire.ParseMethod(fr.Payload)
				if err != nil {
					t.Errorf("server sent an undecodable method: %v", err)
					return
				}
				if cl, ok := m.(*wire.ConnectionClose); ok {
					code = cl.ReplyCode
					client.Write(frameBytes(t, 0, &wire.ConnectionCloseOK{}))
				}
			}
		}()
		client.SetWriteDeadline(time.Now().Add(time.Second))
		client.Write(data)
		var code uint16
		select {
		case code = <-done:
		case <-time.After(30 * time.Millisecond):
			client.Close()
			code = <-done
		}
		if code != 0 && !wire.IsHardError(code) && code != 200 && code != 403 && code != 530 {
			t.Fatalf("connection closed with non-connection code %d", code)
		}
		if n := pc.n.Load(); n != 0 {
			t.Fatalf("%d connection panics", n)
		}
	})
}

// FuzzCheckEnvelope: an envelope CheckEnvelope accepts (an admin import
// stores such envelopes) can be delivered: it decodes, and its
// properties with the broker's headers added parse again.
func FuzzCheckEnvelope(f *testing.F) {
	props, err := encodeProps(&wire.Properties{ContentType: "text/plain", Priority: 3,
		Headers: wire.Table{{Key: "a", Value: int32(1)}, {Key: "t", Value: wire.Table{{Key: "b", Value: "c"}}}}})
	if err != nil {
		f.Fatal(err)
	}
	e := envelope{exchange: "x", keys: []string{"k", "cc"}, props: props}
	f.Add(e.encode())
	f.Add([]byte{envelopeVersion, 0, 0, 0, 0, 0})
	f.Add([]byte{envelopeVersion, 0, 1, 'x', 1, 1, 'k', 0x80, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckEnvelope(b) != nil {
			return
		}
		env, err := decodeEnvelope(b)
		if err != nil {
			t.Fatalf("accepted envelope %x does not decode: %v", b, err)
		}
		out := addHeaders(env.props, wire.Table{{Key: "x-delivery-count", Value: int64(2)}, {Key: "x-first-death-queue", Value: "q"}})
		if _, err := parseProps(out); err != nil {
			t.Fatalf("accepted envelope %x: its properties with headers added do not parse: %v", b, err)
		}
	})
}
