package amqp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/auth/password"
)

func TestAuthPlainAndAMQPLAIN(t *testing.T) {
	b := startBroker(t, withOptions(Options{Users: []User{
		{Name: "alice", PasswordHash: password.Hash("s3cret"), Permissions: map[string]Permission{"/": {".*", ".*", ".*"}}},
	}}))
	addr := b.ln.Addr().String()
	c, err := amqp091.Dial("amqp://alice:s3cret@" + addr + "/")
	must(t, err)
	c.Close()
	c, err = amqp091.DialConfig("amqp://"+addr+"/", amqp091.Config{SASL: []amqp091.Authentication{&amqp091.AMQPlainAuth{Username: "alice", Password: "s3cret"}}})
	must(t, err)
	c.Close()
	_, err = amqp091.Dial("amqp://alice:wrong@" + addr + "/")
	if !errors.Is(err, amqp091.ErrCredentials) {
		t.Fatalf("wrong password: %v", err)
	}
	_, err = amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if !errors.Is(err, amqp091.ErrCredentials) {
		t.Fatalf("unknown user: %v", err)
	}
}

func TestAuthFailureCloseCapability(t *testing.T) {
	b := startBroker(t)
	// A client advertising authentication_failure_close gets 403.
	nc, err := net.Dial("tcp", b.ln.Addr().String())
	must(t, err)
	defer nc.Close()
	r := bufio.NewReader(nc)
	w := bufio.NewWriter(nc)
	w.WriteString(wire.ProtocolHeader)
	w.Flush()
	readMethod(t, r) // start
	sendMethod(t, w, 0, &wire.ConnectionStartOK{
		ClientProperties: wire.Table{{Key: "capabilities", Value: wire.Table{{Key: "authentication_failure_close", Value: true}}}},
		Mechanism:        "PLAIN", Response: "\x00guest\x00nope", Locale: "en_US"})
	m := readMethod(t, r)
	cl, ok := m.(*wire.ConnectionClose)
	if !ok || cl.ReplyCode != 403 || !strings.HasPrefix(cl.ReplyText, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN") {
		t.Fatalf("got %#v", m)
	}
}

func TestBadVhost530(t *testing.T) {
	b := startBroker(t)
	_, err := amqp091.Dial("amqp://guest:guest@" + b.ln.Addr().String() + "/nope")
	var e *amqp091.Error
	if !errors.As(err, &e) || e.Code != 530 || e.Reason != "NOT_ALLOWED - vhost nope not found" {
		if !errors.Is(err, amqp091.ErrVhost) {
			t.Fatalf("bad vhost: %v", err)
		}
	}
}

func TestOtherVhostAndPermissions(t *testing.T) {
	b := startBroker(t, withOptions(Options{Users: []User{
		{Name: "app", Password: "pw", Permissions: map[string]Permission{"staging": {Configure: "^app\\.", Write: ".*", Read: ".*"}}},
	}}))
	c, err := amqp091.Dial("amqp://app:pw@" + b.ln.Addr().String() + "/staging")
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("app.orders", true, false, false, false, nil)
	must(t, err)
	publish(t, ch, "", "app.orders", "x")
	if d := getOne(t, ch, "app.orders"); string(d.Body) != "x" {
		t.Fatal(string(d.Body))
	}
	if _, err := b.eng.GetQueue(engineName("staging", "app.orders")); err != nil {
		t.Fatalf("engine queue for vhost staging: %v", err)
	}
	if _, err := b.eng.GetQueue("app.orders"); err == nil {
		t.Fatal("a staging queue leaked into vhost /")
	}
	_, err = ch.QueueDeclare("other", true, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 403 || e.Reason != "ACCESS_REFUSED - access to queue 'other' in vhost 'staging' refused for user 'app'" {
		t.Fatalf("%v", e)
	}
	// No permissions on "/": 530 at open.
	_, err = amqp091.Dial("amqp://app:pw@" + b.ln.Addr().String() + "/")
	if !errors.Is(err, amqp091.ErrVhost) {
		var e *amqp091.Error
		if !errors.As(err, &e) || e.Code != 530 {
			t.Fatalf("vhost without permission: %v", err)
		}
	}
}

func TestBadProtocolHeader(t *testing.T) {
	b := startBroker(t)
	nc, err := net.Dial("tcp", b.ln.Addr().String())
	must(t, err)
	defer nc.Close()
	nc.Write([]byte("AMQP\x00\x00\x08\x00"))
	got, _ := io.ReadAll(nc)
	if string(got) != wire.ProtocolHeader {
		t.Fatalf("got %q", got)
	}
}

func TestNegotiation(t *testing.T) {
	b := startBroker(t)
	c := b.dial()
	if c.Config.ChannelMax != 2047 || c.Config.FrameSize != 131072 {
		t.Fatalf("negotiated %+v", c.Config)
	}
	props := c.Properties
	caps, _ := props["capabilities"].(amqp091.Table)
	for _, k := range []string{"publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
		"connection.blocked", "consumer_priorities", "authentication_failure_close", "per_consumer_qos", "direct_reply_to"} {
		if caps[k] != true {
			t.Errorf("capability %s = %v", k, caps[k])
		}
	}
	if props["product"] != "Sluice" {
		t.Errorf("product %v", props["product"])
	}
	// A small frame_max still carries big bodies (split into frames).
	c2, err := amqp091.DialConfig(b.url, amqp091.Config{FrameSize: 4096})
	must(t, err)
	defer c2.Close()
	ch, err := c2.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("big", false, false, true, false, nil)
	must(t, err)
	body := strings.Repeat("0123456789", 5000)
	publish(t, ch, "", "big", body)
	if d := getOne(t, ch, "big"); string(d.Body) != body {
		t.Fatalf("body of %d bytes came back as %d", len(body), len(d.Body))
	}
	// Empty body: no body frames.
	publish(t, ch, "", "big", "")
	if d := getOne(t, ch, "big"); len(d.Body) != 0 {
		t.Fatal("empty body")
	}
}

func TestHeartbeats(t *testing.T) {
	b := startBroker(t)
	c, err := amqp091.DialConfig(b.url, amqp091.Config{Heartbeat: time.Second})
	must(t, err)
	defer c.Close()
	// The client closes a connection that misses heartbeats (3 intervals);
	// staying open for 3s proves the server sends them.
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	select {
	case e := <-closed:
		t.Fatalf("closed: %v", e)
	case <-time.After(3 * time.Second):
	}
	// A silent client is dropped by the server after two intervals.
	nc := rawOpen(t, b, 1)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	buf := make([]byte, 64)
	for {
		if _, err := nc.Read(buf); err != nil {
			break
		}
	}
	if time.Since(start) > 4*time.Second {
		t.Fatal("server did not drop a silent client")
	}
}

func TestChannelFlowAndErrors(t *testing.T) {
	b := startBroker(t)
	c, ch := b.channel()
	err := ch.Flow(false)
	if e := amqpErr(t, err); e.Code != 540 {
		t.Fatalf("flow(false): %v", e)
	}
	ch, err = c.Channel()
	must(t, err)
	must(t, ch.Flow(true))
	err = ch.Qos(10, 1024, false)
	if e := amqpErr(t, err); e.Code != 540 {
		t.Fatalf("prefetch_size: %v", e)
	}
	ch, err = c.Channel()
	must(t, err)
	//lint:ignore SA1019 basic.recover is part of the protocol under test
	err = ch.Recover(false)
	if e := amqpErr(t, err); e.Code != 540 {
		t.Fatalf("recover(false): %v", e)
	}
	ch, err = c.Channel()
	must(t, err)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	must(t, ch.Publish("", "q", false, true, amqp091.Publishing{}))
	select {
	case e := <-closed:
		if e.Code != 540 || e.Reason != "NOT_IMPLEMENTED - immediate=true" {
			t.Fatalf("immediate: %v", e)
		}
	case <-time.After(time.Second):
		t.Fatal("immediate=true not refused within 1s")
	}
	if c.IsClosed() {
		t.Fatal("channel errors closed the connection")
	}
}

func TestServerCloseSends320(t *testing.T) {
	b := startBroker(t)
	c := b.dial()
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	b.stop()
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 {
			t.Fatalf("close: %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no close")
	}
}

// update-secret is answered update-secret-ok whatever the secret, as
// RabbitMQ does for its internal user database (credentials that do not
// expire); the connection stays as it was (amqplib's "updateSecret" test
// sends a secret that is not the password).
func TestUpdateSecret(t *testing.T) {
	b := startBroker(t)
	c := b.dial()
	must(t, c.UpdateSecret("guest", "rotation"))
	must(t, c.UpdateSecret("new secret", "no reason"))
	ch, err := c.Channel()
	must(t, err)
	if _, err := ch.QueueDeclare("after.update", false, true, false, false, nil); err != nil {
		t.Fatalf("connection unusable after update-secret: %v", err)
	}
}

// Raw protocol helpers.

func sendMethod(t *testing.T, w *bufio.Writer, ch uint16, m wire.Method) {
	t.Helper()
	f, err := wire.MethodFrame(ch, m)
	must(t, err)
	must(t, wire.WriteFrame(w, f))
	must(t, w.Flush())
}

func readMethod(t *testing.T, r *bufio.Reader) wire.Method {
	t.Helper()
	for {
		f, err := wire.ReadFrame(r, 0)
		must(t, err)
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		m, err := wire.ParseMethod(f.Payload)
		must(t, err)
		return m
	}
}

// rawOpen performs the handshake by hand with the given heartbeat and
// returns the open socket.
func rawOpen(t *testing.T, b *broker, heartbeat uint16) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", b.ln.Addr().String())
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	r := bufio.NewReader(nc)
	w := bufio.NewWriter(nc)
	w.WriteString(wire.ProtocolHeader)
	w.Flush()
	readMethod(t, r)
	sendMethod(t, w, 0, &wire.ConnectionStartOK{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	readMethod(t, r)
	sendMethod(t, w, 0, &wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072, Heartbeat: heartbeat})
	sendMethod(t, w, 0, &wire.ConnectionOpen{VirtualHost: "/"})
	if _, ok := readMethod(t, r).(*wire.ConnectionOpenOK); !ok {
		t.Fatal("no open-ok")
	}
	return nc
}
