package amqp

import (
	"fmt"
	"testing"
	"time"

	"github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestSingleActiveConsumer: of two consumers of an
// x-single-active-consumer queue only the first registered gets
// messages, even with both waiting as they arrive; when it cancels, the
// second takes over; when that one's channel closes with deliveries
// unacknowledged, they go, in order and marked redelivered, to the next.
func TestSingleActiveConsumer(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	args := amqp091.Table{"x-single-active-consumer": true}
	_, err := ch.QueueDeclare("sac", true, false, false, false, args)
	must(t, err)
	_, chA := b.channel()
	cB, chB := b.channel()
	a, err := chA.Consume("sac", "a", false, false, false, false, nil)
	must(t, err)
	bm, err := chB.Consume("sac", "b", false, false, false, false, nil)
	must(t, err)
	onlyFirst(t, b, ch, "sac", a, bm, 20)

	// The active consumer cancels: the next in line takes over.
	must(t, chA.Cancel("a", false))
	for _, m := range []string{"x", "y", "z"} {
		publish(t, ch, "", "sac", m)
	}
	for _, want := range []string{"x", "y", "z"} {
		if d := recv(t, bm); string(d.Body) != want || d.Redelivered {
			t.Fatalf("second consumer got %q (redelivered %v), want %q", d.Body, d.Redelivered, want)
		}
	}
	// It goes with them unacknowledged: they return in order to the
	// consumer that registered after it.
	_, chC := b.channel()
	cm, err := chC.Consume("sac", "c", false, false, false, false, nil)
	must(t, err)
	must(t, cB.Close())
	for _, want := range []string{"x", "y", "z"} {
		if d := recv(t, cm); string(d.Body) != want || !d.Redelivered {
			t.Fatalf("third consumer got %q (redelivered %v), want %q redelivered", d.Body, d.Redelivered, want)
		}
	}

	// Only a boolean is accepted, as RabbitMQ does.
	_, err = ch.QueueDeclare("sac-bad", true, false, false, false, amqp091.Table{"x-single-active-consumer": "true"})
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue 'sac-bad' in vhost '/': {unacceptable_type,longstr}" {
		t.Fatalf("non-boolean x-single-active-consumer: %v", err)
	}
}

// TestSingleActiveConsumerAfterRestart: the setting is read back from
// the stored arguments.
func TestSingleActiveConsumerAfterRestart(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("sac", true, false, false, false, amqp091.Table{"x-single-active-consumer": true})
	must(t, err)
	b.restart()
	_, ch2 := b.channel()
	_, chA := b.channel()
	_, chB := b.channel()
	a, err := chA.Consume("sac", "a", false, false, false, false, nil)
	must(t, err)
	bm, err := chB.Consume("sac", "b", false, false, false, false, nil)
	must(t, err)
	onlyFirst(t, b, ch2, "sac", a, bm, 20)
}

// onlyFirst publishes n messages to q once one consumer waits for them
// and checks that first gets every one, in order, and second none.
func onlyFirst(t *testing.T, b *broker, ch *amqp091.Channel, q string, first, second <-chan amqp091.Delivery, n int) {
	t.Helper()
	// The active consumer waits for messages in the engine; the other
	// does not (without the line both would, and share the messages).
	poll.CheckFor(t, 5*time.Second, poll.True("the active consumer waiting", func() bool {
		info, _ := b.eng.GetQueue(q)
		return info.Waiting == 1
	}))
	for i := range n {
		publish(t, ch, "", q, fmt.Sprint(i))
	}
	for i := range n {
		d := recv(t, first)
		if string(d.Body) != fmt.Sprint(i) {
			t.Fatalf("active consumer got %q, want %d", d.Body, i)
		}
		must(t, d.Ack(false))
	}
	select {
	case d := <-second:
		t.Fatalf("the waiting consumer got %q while the first was active", d.Body)
	default:
	}
}

// TestSingleActiveConsumerIgnoresPriorities: a waiting consumer with a
// higher x-priority does not hold back the head of the line (the line is
// by registration order).
func TestSingleActiveConsumerIgnoresPriorities(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("sacp", true, false, false, false, amqp091.Table{"x-single-active-consumer": true})
	must(t, err)
	_, chA := b.channel()
	_, chB := b.channel()
	a, err := chA.Consume("sacp", "a", false, false, false, false, nil)
	must(t, err)
	bm, err := chB.Consume("sacp", "b", false, false, false, false, amqp091.Table{"x-priority": 10})
	must(t, err)
	onlyFirst(t, b, ch, "sacp", a, bm, 5)
}
