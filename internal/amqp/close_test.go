package amqp

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// close-ok must follow the connection's cleanup: a client reconnecting as
// soon as Close returns must not find the old connection's exclusive
// queue or exclusive consumer, nor have the old connection's auto-delete
// remove the queue it has just declared (amqp091-go's
// ExampleConnection_reconnect).
func TestReconnectAfterCloseFindsNoLeftovers(t *testing.T) {
	b := startBroker(t)
	pubConn, pub := b.channel()
	_ = pubConn
	const autoQ = "reconnect.auto"
	_, err := pub.QueueDeclare(autoQ, false, true, false, false, nil)
	must(t, err)
	for i := range 50 {
		c, err := amqp091.Dial(b.url)
		must(t, err)
		ch, err := c.Channel()
		must(t, err)
		// An exclusive queue of the same name each time.
		if _, err := ch.QueueDeclare("reconnect.excl", false, false, true, false, nil); err != nil {
			t.Fatalf("round %d: exclusive declare: %v", i, err)
		}
		if _, err := ch.Consume("reconnect.excl", "", false, true, false, false, nil); err != nil {
			t.Fatalf("round %d: consume exclusive queue: %v", i, err)
		}
		// The auto-delete queue, with an exclusive consumer, as the
		// example does.
		if _, err := ch.QueueDeclare(autoQ, false, true, false, false, nil); err != nil {
			t.Fatalf("round %d: auto-delete declare: %v", i, err)
		}
		must(t, ch.Qos(1, 0, false))
		msgs, err := ch.Consume(autoQ, "", false, true, false, false, nil)
		if err != nil {
			t.Fatalf("round %d: exclusive consume: %v", i, err)
		}
		publish(t, pub, "", autoQ, fmt.Sprint(i))
		d := recv(t, msgs)
		if string(d.Body) != fmt.Sprint(i) {
			t.Fatalf("round %d: got %q", i, d.Body)
		}
		must(t, d.Ack(false))
		must(t, c.Close())
	}
}

// Acks sent just before connection.close take effect before the close
// requeues the unacknowledged deliveries: the queue is empty as soon as
// Close returns.
func TestAcksBeforeConnectionCloseApplied(t *testing.T) {
	b := startBroker(t)
	_, pub := b.channel()
	const q, n = "acks.close", 600
	_, err := pub.QueueDeclare(q, true, false, false, false, nil)
	must(t, err)
	must(t, pub.Confirm(false))
	for i := range n {
		dc, err := pub.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))})
		must(t, err)
		if i == n-1 && !dc.Wait() {
			t.Fatal("publish nacked")
		}
	}
	for round := range 3 {
		c, err := amqp091.Dial(b.url)
		must(t, err)
		ch, err := c.Channel()
		must(t, err)
		must(t, ch.Qos(100, 0, false))
		msgs, err := ch.Consume(q, "", false, false, false, false, nil)
		must(t, err)
		for range n / 3 {
			must(t, recv(t, msgs).Ack(false))
		}
		must(t, c.Close())
		info, err := b.eng.GetQueue(q)
		must(t, err)
		if want := n - (round+1)*n/3; info.Visible != want || info.InFlight != 0 {
			t.Fatalf("round %d: after Close: %d ready, %d in flight; want %d ready, 0 in flight", round, info.Visible, info.InFlight, want)
		}
	}
}

// Acks applied together stop at an unknown tag as single acks do: those
// before it take effect, the channel closes with 406, and the deliveries
// still unacknowledged go back to the queue.
func TestAckBatchStopsAtUnknownTag(t *testing.T) {
	b := startBroker(t)
	_, pub := b.channel()
	const q = "acks.unknown"
	_, err := pub.QueueDeclare(q, true, false, false, false, nil)
	must(t, err)
	for i := range 4 {
		publish(t, pub, "", q, fmt.Sprint(i))
	}
	_, ch := b.channel()
	must(t, ch.Qos(4, 0, false))
	msgs, err := ch.Consume(q, "", false, false, false, false, nil)
	must(t, err)
	for range 4 {
		recv(t, msgs)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	must(t, ch.Ack(1, false))
	must(t, ch.Ack(2, false))
	must(t, ch.Ack(99, false))
	// The channel may already be closed by the time this ack is sent
	// (amqp091 then refuses it with 504): either way it must not apply.
	_ = ch.Ack(3, false)
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 {
			t.Fatalf("channel closed with %v, want 406", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
	poll.CheckFor(t, 5*time.Second, poll.True("two messages requeued", func() bool {
		info, _ := b.eng.GetQueue(q)
		return info.Visible == 2 && info.InFlight == 0
	}))
}
