package amqp

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestConsumeDeepBacklogKeptOnDisk: with a ready window of 16, a queue of
// 600 published messages keeps most of them only in the store. A consumer
// receives every one exactly once across a restart; the
// deliveries it held unacknowledged at the restart come back marked
// redelivered, and no other does.
func TestConsumeDeepBacklogKeptOnDisk(t *testing.T) {
	const n, held = 600, 30
	b := startBroker(t, withReadyWindow(16))
	_, ch := b.channel()
	_, err := ch.QueueDeclare("deep", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, n))
	for i := 0; i < n; i++ {
		must(t, ch.PublishWithContext(context.Background(), "", "deep", false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf("m%04d", i))}))
	}
	for i := 0; i < n; i++ {
		if c := <-confirms; !c.Ack {
			t.Fatalf("publish %d nacked", c.DeliveryTag)
		}
	}
	if q, err := ch.QueueDeclarePassive("deep", true, false, false, false, nil); err != nil || q.Messages != n {
		t.Fatalf("declare-ok counts %d messages (%v), want %d", q.Messages, err, n)
	}
	// Take some without acknowledging them, then restart.
	_, c1 := b.channel()
	must(t, c1.Qos(held, 0, false))
	ds, err := c1.Consume("deep", "", false, false, false, false, nil)
	must(t, err)
	unacked := map[string]bool{}
	for i := 0; i < held; i++ {
		unacked[string(recv(t, ds).Body)] = true
	}
	b.restart()

	_, c2 := b.channel()
	if q, err := c2.QueueDeclarePassive("deep", true, false, false, false, nil); err != nil || q.Messages != n {
		t.Fatalf("after restart declare-ok counts %d messages (%v), want %d", q.Messages, err, n)
	}
	must(t, c2.Qos(50, 0, false))
	ds, err = c2.Consume("deep", "", false, false, false, false, nil)
	must(t, err)
	seen := map[string]int{}
	for len(seen) < n {
		d := recv(t, ds)
		body := string(d.Body)
		seen[body]++
		if seen[body] > 1 {
			t.Fatalf("%s delivered twice", body)
		}
		if d.Redelivered != unacked[body] {
			t.Fatalf("%s: redelivered %v, held unacknowledged at the restart %v", body, d.Redelivered, unacked[body])
		}
		must(t, d.Ack(false))
	}
	noDelivery(t, ds, 50*time.Millisecond)
}
