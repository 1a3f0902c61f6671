package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// The behaviours RabbitMQ's own priority queue suite pins
// (deps/rabbit/test/priority_queue_SUITE.erl: matching, drop, reject,
// ackfold, dropwhile_fetchwhile, purge, straight_through), each checked
// here with amqp091-go against Sluice.

// publishAll publishes one message per priority in prios to q on a
// confirming channel (body "p<priority>-<index>") and returns how many
// were acked and nacked.
func publishAll(t *testing.T, ch *amqp091.Channel, q string, prios ...uint8) (acked, nacked int) {
	t.Helper()
	must(t, ch.Confirm(false))
	var dcs []*amqp091.DeferredConfirmation
	for i, p := range prios {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
			amqp091.Publishing{Body: []byte(fmt.Sprintf("p%d-%d", p, i)), Priority: p})
		must(t, err)
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := dc.WaitContext(ctx)
		cancel()
		if err != nil {
			t.Fatalf("publish %d: no confirm: %v", i, err)
		}
		if ok {
			acked++
		} else {
			nacked++
		}
	}
	return acked, nacked
}

// drainGet takes every message from q with basic.get (acking each) until
// the queue answers empty, and returns the bodies joined by spaces.
func drainGet(t *testing.T, ch *amqp091.Channel, q string) string {
	t.Helper()
	var got []string
	for {
		d, ok, err := ch.Get(q, false)
		must(t, err)
		if !ok {
			return strings.Join(got, " ")
		}
		got = append(got, string(d.Body))
		must(t, d.Ack(false))
	}
}

func declarePQ(t *testing.T, ch *amqp091.Channel, q string, args amqp091.Table) {
	t.Helper()
	if args == nil {
		args = amqp091.Table{}
	}
	if _, ok := args["x-max-priority"]; !ok {
		args["x-max-priority"] = int32(3)
	}
	_, err := ch.QueueDeclare(q, true, false, false, false, args)
	must(t, err)
}

func TestPrioritySuiteMatching(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	// A priority above the maximum counts as the maximum; none is 0.
	declarePQ(t, ch, "matching", amqp091.Table{"x-max-priority": int32(5)})
	publishAll(t, ch, "matching", 0, 0, 5, 10, 0)
	if s := drainGet(t, ch, "matching"); s != "p5-2 p10-3 p0-0 p0-1 p0-4" {
		t.Fatalf("got %s", s)
	}
}

// TestPrioritySuiteDrop: x-max-length with the default overflow drops from
// the head, and the head of a priority queue is its highest priority:
// RabbitMQ's suite says so ("according to the spec even if not likely to
// be what the user wants").
func TestPrioritySuiteDrop(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declarePQ(t, ch, "drop", amqp091.Table{"x-max-length": int64(4)})
	publishAll(t, ch, "drop", 1, 2, 3, 1, 2, 3, 1, 2, 3)
	if s := drainGet(t, ch, "drop"); s != "p2-7 p1-0 p1-3 p1-6" {
		t.Fatalf("got %s, want p2-7 p1-0 p1-3 p1-6 (priorities 2 1 1 1)", s)
	}
}

// TestPrioritySuiteReject: with reject-publish overflow the first four
// are kept and the rest refused (nacked), then delivered by priority.
func TestPrioritySuiteReject(t *testing.T) {
	for _, overflow := range []string{"reject-publish", "reject-publish-dlx"} {
		t.Run(overflow, func(t *testing.T) {
			b := startBroker(t)
			_, ch := b.channel()
			q := "reject-" + overflow
			declarePQ(t, ch, q, amqp091.Table{"x-max-length": int64(4), "x-overflow": overflow})
			acked, nacked := publishAll(t, ch, q, 1, 2, 3, 1, 2, 3, 1, 2, 3)
			if acked != 4 || nacked != 5 {
				t.Fatalf("acked %d, nacked %d, want 4 and 5", acked, nacked)
			}
			if s := drainGet(t, ch, q); s != "p3-2 p2-1 p1-0 p1-3" {
				t.Fatalf("got %s", s)
			}
		})
	}
}

// TestPrioritySuiteAckfold: a multiple nack without requeue dead-letters
// what the channel holds, in delivery order, to a queue without
// priorities.
func TestPrioritySuiteAckfold(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("ackfold2", true, false, false, false, nil)
	must(t, err)
	declarePQ(t, ch, "ackfold1", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "ackfold2"})
	publishAll(t, ch, "ackfold1", 1, 2, 3)
	var got []string
	var last amqp091.Delivery
	for range 3 {
		last = getOne(t, ch, "ackfold1")
		got = append(got, string(last.Body))
	}
	if s := strings.Join(got, " "); s != "p3-2 p2-1 p1-0" {
		t.Fatalf("got %s", s)
	}
	must(t, last.Nack(true, false))
	poll.CheckFor(t, 5*time.Second, poll.True("three dead letters", func() bool {
		q, err := inspect(ch, "ackfold2")
		return err == nil && q.Messages == 3
	}))
	if s := drainGet(t, ch, "ackfold2"); s != "p3-2 p2-1 p1-0" {
		t.Fatalf("dead-letter queue: %s", s)
	}
}

// TestPrioritySuiteTTL: messages of every priority expire by x-message-ttl,
// dead-lettered or not.
func TestPrioritySuiteTTL(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	for i, args := range []amqp091.Table{
		{"x-message-ttl": int64(1)},
		{"x-message-ttl": int64(1), "x-dead-letter-exchange": "amq.fanout"},
	} {
		q := fmt.Sprintf("ttl%d", i)
		declarePQ(t, ch, q, args)
		publishAll(t, ch, q, 1, 2, 3, 1, 2, 3, 1, 2, 3)
		poll.CheckFor(t, 5*time.Second, poll.True("every message expired", func() bool {
			_, ok, err := ch.Get(q, true)
			must(t, err)
			return !ok
		}))
	}
}

func TestPrioritySuitePurge(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declarePQ(t, ch, "purge", nil)
	publishAll(t, ch, "purge", 1, 2, 3)
	n, err := ch.QueuePurge("purge", false)
	must(t, err)
	if n != 3 {
		t.Fatalf("purged %d", n)
	}
	if s := drainGet(t, ch, "purge"); s != "" {
		t.Fatalf("after a purge: %s", s)
	}
}

// TestPrioritySuiteStraightThrough: a consumer waiting on an empty
// priority queue gets each message as it is published, acking or not.
func TestPrioritySuiteStraightThrough(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declarePQ(t, ch, "straight", nil)
	for _, noAck := range []bool{false, true} {
		ds, err := ch.Consume("straight", "c", noAck, false, false, false, nil)
		must(t, err)
		for _, p := range []uint8{1, 2, 3} {
			must(t, ch.PublishWithContext(context.Background(), "", "straight", false, false, amqp091.Publishing{Body: []byte{'0' + p}, Priority: p}))
			d := recv(t, ds)
			if d.Priority != p || string(d.Body) != string([]byte{'0' + p}) {
				t.Fatalf("no-ack %t: got %q priority %d, want priority %d", noAck, d.Body, d.Priority, p)
			}
			if !noAck {
				must(t, d.Ack(false))
			}
		}
		must(t, ch.Cancel("c", false))
	}
	if s := drainGet(t, ch, "straight"); s != "" {
		t.Fatalf("left: %s", s)
	}
}
