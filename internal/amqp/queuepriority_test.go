package amqp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// publishPriorities publishes, with confirms, one message per priority in
// prios to queue q (body: "p<priority>-<index>"), and waits for every
// confirm.
func publishPriorities(t *testing.T, ch *amqp091.Channel, q string, prios ...uint8) {
	t.Helper()
	must(t, ch.Confirm(false))
	for i, p := range prios {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
			amqp091.Publishing{Body: []byte(fmt.Sprintf("p%d-%d", p, i)), Priority: p, DeliveryMode: amqp091.Persistent})
		must(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := dc.WaitContext(ctx)
		cancel()
		if err != nil || !ok {
			t.Fatalf("publish %d not confirmed: %v", i, err)
		}
	}
}

// getBodies takes n messages from q with basic.get, acking each, and
// returns their bodies joined by spaces.
func getBodies(t *testing.T, ch *amqp091.Channel, q string, n int) string {
	t.Helper()
	var got []string
	for range n {
		d := getOne(t, ch, q)
		got = append(got, string(d.Body))
		must(t, d.Ack(false))
	}
	return strings.Join(got, " ")
}

// TestQueuePriorities: a queue declared with x-max-priority delivers its
// ready messages highest priority first (above the maximum counting as
// the maximum), in publish order within one priority, through basic.get
// and basic.consume, with the priority property as published; the order
// holds across a restart. A queue without the argument keeps publish
// order.
func TestQueuePriorities(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("pq", true, false, false, false, amqp091.Table{"x-max-priority": int32(10)})
	must(t, err)
	_, err = ch.QueueDeclare("plain", true, false, false, false, nil)
	must(t, err)
	publishPriorities(t, ch, "pq", 0, 5, 9, 12, 5, 1)
	publishPriorities(t, ch, "plain", 0, 5, 9)

	if s := getBodies(t, ch, "plain", 3); s != "p0-0 p5-1 p9-2" {
		t.Fatalf("queue without priorities: %s", s)
	}

	d := getOne(t, ch, "pq")
	if string(d.Body) != "p12-3" || d.Priority != 12 {
		t.Fatalf("first get: %q priority %d, want p12-3 priority 12", d.Body, d.Priority)
	}
	must(t, d.Ack(false))
	poll.CheckFor(t, 5*time.Second, poll.True("the ack applied", func() bool {
		info, _ := b.eng.GetQueue(engineName("/", "pq"))
		return info.InFlight == 0 && info.Visible == 5
	}))

	b.restart()
	_, ch = b.channel()
	must(t, ch.Qos(1, 0, false))
	ds, err := ch.Consume("pq", "", false, false, false, false, nil)
	must(t, err)
	var got []string
	for range 5 {
		d := recv(t, ds)
		got = append(got, string(d.Body))
		must(t, d.Ack(false))
	}
	if s := strings.Join(got, " "); s != "p9-2 p5-1 p5-4 p1-5 p0-0" {
		t.Fatalf("after a restart, consumed %s, want p9-2 p5-1 p5-4 p1-5 p0-0", s)
	}
}

// TestQueuePriorityRequeue: a rejected message goes back ahead of lower
// priorities, and a higher priority published while a consumer holds
// lower ones is delivered next.
func TestQueuePriorityRequeue(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("pq", true, false, false, false, amqp091.Table{"x-max-priority": int64(3)})
	must(t, err)
	publishPriorities(t, ch, "pq", 1, 1, 0)
	d := getOne(t, ch, "pq") // p1-0
	must(t, d.Reject(true))
	poll.CheckFor(t, 5*time.Second, poll.True("the reject applied", func() bool {
		info, _ := b.eng.GetQueue(engineName("/", "pq"))
		return info.InFlight == 0
	}))
	publishPriorities(t, ch, "pq", 2)
	if s := getBodies(t, ch, "pq", 4); s != "p2-0 p1-0 p1-1 p0-2" {
		t.Fatalf("got %s, want p2-0 p1-0 p1-1 p0-2", s)
	}
}

// TestQueuePriorityArgument: x-max-priority is a non-negative integer up to
// 255, a redeclare must repeat it (RabbitMQ's 406s), and a queue created
// over SQS cannot be given it.
func TestQueuePriorityArgument(t *testing.T) {
	b := startBroker(t)
	for _, c := range []struct {
		v    any
		want string
	}{
		{int32(256), "max_value_exceeded,256"},
		{int32(-1), "value_negative"},
		{"ten", "unacceptable_type"},
	} {
		_, ch := b.channel()
		_, err := ch.QueueDeclare("bad", true, false, false, false, amqp091.Table{"x-max-priority": c.v})
		e := amqpErr(t, err)
		if e.Code != 406 || !strings.Contains(e.Reason, c.want) {
			t.Fatalf("x-max-priority %v: %d %s, want 406 with %s", c.v, e.Code, e.Reason, c.want)
		}
	}
	_, ch := b.channel()
	_, err := ch.QueueDeclare("pq", true, false, false, false, amqp091.Table{"x-max-priority": int32(5)})
	must(t, err)
	_, err = ch.QueueDeclare("pq", true, false, false, false, amqp091.Table{"x-max-priority": int32(5)})
	must(t, err)
	_, err = ch.QueueDeclare("pq", true, false, false, false, amqp091.Table{"x-max-priority": int32(6)})
	if e := amqpErr(t, err); e.Code != 406 {
		t.Fatalf("redeclare with another x-max-priority: %v", e)
	}

	// A queue created over SQS cannot become a priority queue by a
	// declare (its messages are in arrival order); without the argument
	// the declare adopts it as before.
	if _, _, err := b.eng.CreateQueue("sqs-made", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	_, ch = b.channel()
	_, err = ch.QueueDeclare("sqs-made", true, false, false, false, amqp091.Table{"x-max-priority": int32(5)})
	if e := amqpErr(t, err); e.Code != 406 || !strings.Contains(e.Reason, "x-max-priority") {
		t.Fatalf("x-max-priority on an SQS queue: %v", e)
	}
	if cfg, _ := b.eng.Config("sqs-made"); cfg.MaxPriority != 0 {
		t.Fatalf("the SQS queue's MaxPriority became %d", cfg.MaxPriority)
	}
	_, ch = b.channel()
	_, err = ch.QueueDeclare("sqs-made", true, false, false, false, nil)
	must(t, err)
}

// TestQueuePriorityDeepBacklog: 400 messages of random priorities into a
// queue whose engine keeps a window of 16 in memory, a restart, then one
// consumer with prefetch 1: highest priority first, publish order within
// one, across the part of the backlog that was only on disk.
func TestQueuePriorityDeepBacklog(t *testing.T) {
	b := startBroker(t, withReadyWindow(16))
	_, ch := b.channel()
	_, err := ch.QueueDeclare("deep", true, false, false, false, amqp091.Table{"x-max-priority": int32(4)})
	must(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	prios := make([]uint8, 400)
	byBand := make([][]string, 5)
	for i := range prios {
		prios[i] = uint8(rng.IntN(6)) // 5 counts as 4
		band := min(int(prios[i]), 4)
		byBand[band] = append(byBand[band], fmt.Sprintf("p%d-%d", prios[i], i))
	}
	publishPriorities(t, ch, "deep", prios...)
	var want []string
	for band := 4; band >= 0; band-- {
		want = append(want, byBand[band]...)
	}
	b.restart()
	_, ch = b.channel()
	must(t, ch.Qos(1, 0, false))
	ds, err := ch.Consume("deep", "", false, false, false, false, nil)
	must(t, err)
	var got []string
	for range want {
		d := recv(t, ds)
		got = append(got, string(d.Body))
		must(t, d.Ack(false))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("consumed\n%v\nwant\n%v", got, want)
	}
}
