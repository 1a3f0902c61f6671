package amqp

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
)

// writeCounter counts the durable, non-empty batches written through it.
type writeCounter struct {
	store.Store
	durable atomic.Int64
}

func (w *writeCounter) Write(b *store.Batch, durable bool) (store.Pending, error) {
	if durable && len(b.Ops) > 0 {
		w.durable.Add(1)
	}
	return w.Store.Write(b, durable)
}

// startCountingBroker starts a broker whose store counts durable writes.
func startCountingBroker(t *testing.T) (*broker, *writeCounter) {
	wc := &writeCounter{}
	b := startBroker(t, withStoreWrapper(func(s store.Store) store.Store { wc.Store = s; return wc }))
	return b, wc
}

// A no-ack consumer's deliveries are settled with one engine delete per
// batch the consumer takes, not one durable write per delivery (issue 13:
// "acks and no-ack deliveries settle in batches"); every message is
// delivered once and none is left behind.
func TestNoAckSettlesInBatches(t *testing.T) {
	b, wc := startCountingBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("noack", true, false, false, false, nil)
	must(t, err)
	const n = 200
	for i := 0; i < n; i += engine.MaxBatch {
		ms := make([]engine.Message, engine.MaxBatch)
		for j := range ms {
			ms[j].Body = fmt.Appendf(nil, "m%03d", i+j)
		}
		_, err := b.eng.Send("noack", ms)
		must(t, err)
	}
	before := wc.durable.Load()
	ds, err := ch.Consume("noack", "c", true, false, false, false, nil)
	must(t, err)
	seen := make(map[string]bool)
	timeout := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case d := <-ds:
			if seen[string(d.Body)] {
				t.Fatalf("%s delivered twice", d.Body)
			}
			seen[string(d.Body)] = true
		case <-timeout:
			t.Fatalf("%d of %d delivered", len(seen), n)
		}
	}
	poll.CheckFor(t, 5*time.Second, poll.True("every no-ack delivery to be settled", func() bool {
		info, err := b.eng.GetQueue("noack")
		must(t, err)
		return info.Visible == 0 && info.InFlight == 0
	}))
	// 200 deliveries taken 10 at a time: 20 deletes (a batch cut short
	// by a slow client is settled in two parts, so allow some more).
	if w := wc.durable.Load() - before; w > n/4 {
		t.Fatalf("%d durable writes settled %d no-ack deliveries; want at most %d", w, n, n/4)
	}
}

// A basic.nack with multiple=true and requeue=false dead-letters every
// delivery it covers in one engine write (issue 13: settlements in
// batches), in delivery order, each with its x-death.
func TestNackMultipleRejectsInOneWrite(t *testing.T) {
	b, wc := startCountingBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("dead", true, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDeclare("work", true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
	must(t, err)
	const n = 100
	for i := range n {
		must(t, ch.Publish("", "work", false, false, amqp091.Publishing{Body: fmt.Appendf(nil, "m%03d", i)}))
	}
	poll.CheckFor(t, 5*time.Second, poll.True("every publish to be queued", func() bool {
		info, err := b.eng.GetQueue("work")
		must(t, err)
		return info.Visible == n
	}))
	must(t, ch.Qos(n, 0, false))
	ds, err := ch.Consume("work", "c", false, false, false, false, nil)
	must(t, err)
	var last amqp091.Delivery
	for i := range n {
		select {
		case last = <-ds:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d delivered", i, n)
		}
	}
	before := wc.durable.Load()
	must(t, last.Nack(true, false))
	poll.CheckFor(t, 5*time.Second, poll.True("the nack to dead-letter every delivery", func() bool {
		w, err := b.eng.GetQueue("work")
		must(t, err)
		d, err := b.eng.GetQueue("dead")
		must(t, err)
		return w.InFlight == 0 && w.Visible == 0 && d.Visible == n
	}))
	if w := wc.durable.Load() - before; w != 1 {
		t.Fatalf("the nack of %d deliveries made %d durable writes; want 1", n, w)
	}
	var dead []string
	poll.CheckFor(t, 5*time.Second, poll.True("the rejected messages in the dead-letter queue", func() bool {
		for {
			d, ok, err := ch.Get("dead", true)
			must(t, err)
			if !ok {
				break
			}
			if xd, _ := d.Headers["x-death"].([]any); len(xd) != 1 {
				t.Fatalf("%s: x-death %v", d.Body, d.Headers["x-death"])
			}
			dead = append(dead, string(d.Body))
		}
		return len(dead) == n
	}))
	for i, body := range dead {
		if want := fmt.Sprintf("m%03d", i); body != want {
			t.Fatalf("dead-letter queue position %d holds %s, want %s", i, body, want)
		}
	}
}

// Acks, nacks and rejects sent together are applied in order up to an
// unknown tag, each with its own meaning (delete, requeue, dead-letter),
// and the unknown tag closes the channel with 406 as it would alone.
func TestMixedSettlementsUpToUnknownTag(t *testing.T) {
	b := startBroker(t)
	_, pub := b.channel()
	_, err := pub.QueueDeclare("mixed.dead", true, false, false, false, nil)
	must(t, err)
	_, err = pub.QueueDeclare("mixed", true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "mixed.dead"})
	must(t, err)
	for i := 1; i <= 6; i++ {
		publish(t, pub, "", "mixed", fmt.Sprint(i))
	}
	_, ch := b.channel()
	must(t, ch.Qos(6, 0, false))
	msgs, err := ch.Consume("mixed", "", false, false, false, false, nil)
	must(t, err)
	for range 6 {
		recv(t, msgs)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	must(t, ch.Ack(1, false))
	must(t, ch.Reject(2, false))
	must(t, ch.Nack(3, false, true))
	must(t, ch.Ack(4, false))
	must(t, ch.Reject(99, false))
	_ = ch.Ack(5, false) // after the unknown tag: must not apply
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 || !strings.Contains(e.Reason, "unknown delivery tag 99") {
			t.Fatalf("channel closed with %v, want 406 unknown delivery tag 99", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
	poll.CheckFor(t, 5*time.Second, poll.True("3, 5 and 6 back in the queue, 2 dead-lettered", func() bool {
		w, _ := b.eng.GetQueue("mixed")
		d, _ := b.eng.GetQueue("mixed.dead")
		return w.Visible == 3 && w.InFlight == 0 && d.Visible == 1
	}))
	var left []string
	for {
		d, ok, err := pub.Get("mixed", true)
		must(t, err)
		if !ok {
			break
		}
		left = append(left, string(d.Body))
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"3", "5", "6"}) {
		t.Fatalf("left in the queue: %v", left)
	}
	d, ok, err := pub.Get("mixed.dead", true)
	must(t, err)
	if !ok || string(d.Body) != "2" {
		t.Fatalf("dead-letter queue: %q %v", d.Body, ok)
	}
}
