package amqp

import (
	"runtime"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// liveHeap is the heap still referenced after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestTxBytesCapPerConnection is the security issue's AMQP finding: 1,500
// uncommitted 1 MB publishes in a transaction took the broker to 2.2 GB.
// Now the publish that passes the connection's cap closes its channel
// with 406, the transaction is rolled back (nothing reaches the queue),
// the memory is given back, and the connection's other channels go on.
func TestTxBytesCapPerConnection(t *testing.T) {
	const capBytes = 4 << 20
	b := startBroker(t, withOptions(Options{MaxTxBytesPerConnection: capBytes}))
	conn, ch := b.channel()
	_, err := ch.QueueDeclare("tx", false, false, false, false, nil)
	must(t, err)
	sc := b.serverConnOf(conn)
	if sc == nil {
		t.Fatal("server side of the connection not found")
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	must(t, ch.Tx())
	base := liveHeap()
	body := make([]byte, 256<<10)
	sent := 0
	for ; sent < 200; sent++ { // 50 MiB offered
		if ch.Publish("", "tx", false, false, amqp091.Publishing{Body: body}) != nil {
			break
		}
		if sc.txHeld.Load() > capBytes {
			t.Fatalf("connection holds %d bytes of transactions, cap %d", sc.txHeld.Load(), capBytes)
		}
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 {
			t.Fatalf("close: %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel over the cap was not closed")
	}
	if grew := liveHeap() - base; grew > 3*capBytes {
		t.Fatalf("live heap grew %d MiB offering %d MiB in a transaction with a %d MiB cap", grew>>20, sent/4, capBytes>>20)
	}
	poll.CheckFor(t, 5*time.Second, poll.True("the transaction's bytes to be released", func() bool { return sc.txHeld.Load() == 0 }))
	// Nothing of the refused transaction reached the queue; the
	// connection still works, and a transaction under the cap commits.
	ch2, err := conn.Channel()
	must(t, err)
	q, err := inspect(ch2, "tx")
	must(t, err)
	if q.Messages != 0 {
		t.Fatalf("%d messages of a rolled-back transaction in the queue", q.Messages)
	}
	must(t, ch2.Tx())
	for i := 0; i < 3; i++ {
		must(t, ch2.Publish("", "tx", false, false, amqp091.Publishing{Body: body}))
	}
	must(t, ch2.TxCommit())
	poll.CheckFor(t, 5*time.Second, poll.True("the committed messages", func() bool {
		q, err := inspect(ch2, "tx")
		return err == nil && q.Messages == 3
	}))
	if sc.txHeld.Load() != 0 {
		t.Fatalf("%d bytes still counted after commit", sc.txHeld.Load())
	}
}

// serverConnOf finds the server side of an amqp091 connection.
func (b *broker) serverConnOf(client *amqp091.Connection) *conn {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	for c := range b.srv.conns {
		if c.nc.RemoteAddr().String() == client.LocalAddr().String() {
			return c
		}
	}
	return nil
}

// TestPartialBodyCapPerConnection: 1,500 channels each holding a body one
// byte short of complete (heartbeats off) held 1.5 GB indefinitely. Now
// the connection is closed with 506 RESOURCE_ERROR once its partial
// bodies pass the cap, and its memory is freed.
func TestPartialBodyCapPerConnection(t *testing.T) {
	const capBytes = 4 << 20
	b := startBroker(t, withOptions(Options{MaxPartialBytesPerConnection: capBytes}))
	c := rawDial(t, b, wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072})
	if _, ok := readMethod(t, c.r).(*wire.ConnectionOpenOK); !ok {
		t.Fatal("no open-ok")
	}
	base := liveHeap()
	const bodySize = 1_000_000
	chunk := make([]byte, 131072-wire.FrameOverhead)
	var closeMsg *wire.ConnectionClose
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			f, err := wire.ReadFrame(c.r, 0)
			if err != nil {
				return
			}
			if m, err := wire.ParseMethod(f.Payload); err == nil {
				if cl, ok := m.(*wire.ConnectionClose); ok {
					closeMsg = cl
					return
				}
			}
		}
	}()
	for id := uint16(1); id <= 40; id++ { // 40 MB offered
		sendMethod(t, c.w, id, &wire.ChannelOpen{})
		f, err := wire.MethodFrame(id, &wire.BasicPublish{RoutingKey: "nowhere"})
		must(t, err)
		hdr, err := wire.AppendContentHeader(nil, &wire.ContentHeader{ClassID: wire.ClassBasic, BodySize: bodySize})
		must(t, err)
		if wire.WriteFrame(c.w, f) != nil || wire.WriteFrame(c.w, wire.Frame{Type: wire.FrameHeader, Channel: id, Payload: hdr}) != nil {
			break
		}
		werr := error(nil)
		for left := bodySize - 1; left > 0 && werr == nil; left -= len(chunk) {
			werr = wire.WriteFrame(c.w, wire.Frame{Type: wire.FrameBody, Channel: id, Payload: chunk[:min(left, len(chunk))]})
		}
		if werr != nil || c.w.Flush() != nil {
			break // the server closed the connection
		}
	}
	<-done
	if closeMsg == nil || closeMsg.ReplyCode != 506 {
		t.Fatalf("connection.close: %+v, want 506", closeMsg)
	}
	poll.CheckFor(t, 5*time.Second, poll.True("the connection to end", func() bool { return b.serverConn(c.nc) == nil }))
	if grew := liveHeap() - base; grew > 3*capBytes {
		t.Fatalf("live heap grew %d MiB with a %d MiB partial-body cap", grew>>20, capBytes>>20)
	}
	// A well-behaved client is served.
	_, ch := b.channel()
	_, err := ch.QueueDeclare("after", false, false, false, false, nil)
	must(t, err)
	publish(t, ch, "", "after", "ok")
	if d := getOne(t, ch, "after"); string(d.Body) != "ok" {
		t.Fatalf("got %q", d.Body)
	}
}
