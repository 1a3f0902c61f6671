package amqp

import (
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// death returns the delivery's x-death entries.
func deaths(t *testing.T, d amqp091.Delivery) []amqp091.Table {
	t.Helper()
	arr, ok := d.Headers["x-death"].([]interface{})
	if !ok {
		t.Fatalf("x-death is %T, not an array: %v", d.Headers["x-death"], d.Headers)
	}
	out := make([]amqp091.Table, len(arr))
	for i, e := range arr {
		out[i] = e.(amqp091.Table)
	}
	return out
}

func checkDeath(t *testing.T, got amqp091.Table, want amqp091.Table) {
	t.Helper()
	g := amqp091.Table{}
	for k, v := range got {
		if k == "time" {
			if _, ok := v.(time.Time); !ok {
				t.Errorf("time is %T", v)
			}
			if w, ok := want["time"]; ok && !v.(time.Time).Equal(w.(time.Time)) {
				t.Errorf("time %v, want %v", v, w)
			}
			continue
		}
		g[k] = v
	}
	w := amqp091.Table{}
	for k, v := range want {
		if k != "time" {
			w[k] = v
		}
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("x-death entry\n got %#v\nwant %#v", g, w)
	}
}

func TestDeadLetterRejected(t *testing.T) {
	b := startBroker(t, withFakeClock())
	now := b.fake.Now()
	_, ch := b.channel()
	must(t, ch.ExchangeDeclare("dlx", "direct", true, false, false, false, nil))
	_, err := ch.QueueDeclare("dlq", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("dlq", "work", "dlx", false, nil))
	_, err = ch.QueueDeclare("work", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"})
	must(t, err)
	must(t, ch.Publish("", "work", false, false, amqp091.Publishing{Body: []byte("poison"), Expiration: "600000",
		Headers: amqp091.Table{"CC": []interface{}{"cc-key"}, "app": "kept",
			"x-death": []interface{}{amqp091.Table{"count": int64(9), "queue": "forged", "reason": "rejected"}}}}))
	d := getOne(t, ch, "work")
	must(t, d.Reject(false))
	dl := getOne(t, ch, "dlq")
	if dl.Exchange != "dlx" || dl.RoutingKey != "work" || dl.Expiration != "" || dl.Headers["app"] != "kept" || string(dl.Body) != "poison" {
		t.Fatalf("dead letter %+v", dl)
	}
	ds := deaths(t, dl)
	if len(ds) != 1 {
		t.Fatalf("x-death %v", ds)
	}
	checkDeath(t, ds[0], amqp091.Table{"count": int64(1), "reason": "rejected", "queue": "work", "time": now,
		"exchange": "", "routing-keys": []interface{}{"work", "cc-key"}, "original-expiration": "600000"})
	for k, v := range map[string]string{"x-first-death-queue": "work", "x-first-death-reason": "rejected", "x-first-death-exchange": "",
		"x-last-death-queue": "work", "x-last-death-reason": "rejected", "x-last-death-exchange": ""} {
		if dl.Headers[k] != v {
			t.Errorf("%s = %v, want %q", k, dl.Headers[k], v)
		}
	}
	// nack(requeue=false) with multiple dead-letters too; no DLX drops.
	_, err = ch.QueueDeclare("plain", false, false, false, false, nil)
	must(t, err)
	publish(t, ch, "", "plain", "x")
	must(t, getOne(t, ch, "plain").Nack(false, false))
	if i, _ := inspect(ch, "plain"); i.Messages != 0 {
		t.Fatal("rejected message without DLX still there")
	}
}

func TestDeadLetterExpiredAndRetryLadder(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	// work --reject--> retry (TTL 1s) --expired--> work again: a retry
	// ladder, not a cycle, because a consumer rejected it.
	_, err := ch.QueueDeclare("retry", true, false, false, false, amqp091.Table{
		"x-message-ttl": int32(1000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})
	must(t, err)
	_, err = ch.QueueDeclare("work", true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
	must(t, err)
	publish(t, ch, "", "work", "job")
	for round := 1; round <= 2; round++ {
		d := getOne(t, ch, "work")
		if round == 2 {
			ds := deaths(t, d)
			if len(ds) != 2 {
				t.Fatalf("round 2 x-death %v", ds)
			}
			checkDeath(t, ds[0], amqp091.Table{"count": int64(1), "reason": "expired", "queue": "retry", "exchange": "", "routing-keys": []interface{}{"retry"}})
			checkDeath(t, ds[1], amqp091.Table{"count": int64(1), "reason": "rejected", "queue": "work", "exchange": "", "routing-keys": []interface{}{"work"}})
			if d.Headers["x-first-death-reason"] != "rejected" || d.Headers["x-last-death-reason"] != "expired" || d.Headers["x-last-death-queue"] != "retry" {
				t.Fatalf("first/last %v", d.Headers)
			}
		}
		must(t, d.Reject(false))
		poll.CheckFor(t, 5*time.Second, poll.True("message in retry", func() bool { i, _ := inspect(ch, "retry"); return i.Messages == 1 }))
		b.advance(1100*time.Millisecond, 1)
	}
	d := getOne(t, ch, "work")
	ds := deaths(t, d)
	if len(ds) != 2 {
		t.Fatalf("x-death %v", ds)
	}
	// One entry per (queue, reason), counted, most recent first.
	if ds[0]["queue"] != "retry" || ds[0]["count"] != int64(2) || ds[1]["queue"] != "work" || ds[1]["count"] != int64(2) {
		t.Fatalf("x-death %v", ds)
	}
}

func TestDeadLetterCycleDropped(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	// The classic accidental loop: DLX "" without a routing key and a TTL.
	_, err := ch.QueueDeclare("loop", true, false, false, false, amqp091.Table{
		"x-message-ttl": int32(500), "x-dead-letter-exchange": ""})
	must(t, err)
	// A fanout DLX reaching the source and another queue: only the
	// source is dropped.
	must(t, ch.ExchangeDeclare("fan", "fanout", true, false, false, false, nil))
	_, err = ch.QueueDeclare("a", true, false, false, false, amqp091.Table{"x-message-ttl": int32(500), "x-dead-letter-exchange": "fan"})
	must(t, err)
	_, err = ch.QueueDeclare("other", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("a", "", "fan", false, nil))
	must(t, ch.QueueBind("other", "", "fan", false, nil))
	publish(t, ch, "", "loop", "l")
	publish(t, ch, "", "a", "m")
	b.advance(time.Second, 1)
	d := getOne(t, ch, "other")
	if ds := deaths(t, d); len(ds) != 1 || ds[0]["reason"] != "expired" || ds[0]["queue"] != "a" {
		t.Fatalf("x-death %v", ds)
	}
	b.advance(time.Second, 1)
	for _, q := range []string{"loop", "a"} {
		if i, _ := inspect(ch, q); i.Messages != 0 {
			t.Fatalf("%s still holds %d messages: the cycle was not broken", q, i.Messages)
		}
	}
}

func TestDeadLetterMaxLenAndDeliveryLimit(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	_, err := ch.QueueDeclare("dlq", true, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDeclare("short", true, false, false, false, amqp091.Table{
		"x-max-length": int8(1), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
	must(t, err)
	publish(t, ch, "", "short", "oldest")
	publish(t, ch, "", "short", "newest")
	d := getOne(t, ch, "dlq")
	if string(d.Body) != "oldest" {
		t.Fatal(string(d.Body))
	}
	checkDeath(t, deaths(t, d)[0], amqp091.Table{"count": int64(1), "reason": "maxlen", "queue": "short", "exchange": "", "routing-keys": []interface{}{"short"}})
	must(t, d.Ack(false))

	_, err = ch.QueueDeclare("limited", true, false, false, false, amqp091.Table{
		"x-queue-type": "quorum", "x-delivery-limit": int32(1), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
	must(t, err)
	publish(t, ch, "", "limited", "flaky")
	must(t, getOne(t, ch, "limited").Nack(false, true))
	d = getOne(t, ch, "limited")
	if d.Headers["x-delivery-count"] != int64(1) {
		t.Fatalf("x-delivery-count %v", d.Headers["x-delivery-count"])
	}
	must(t, d.Nack(false, true)) // over the limit: dead-lettered, not requeued
	d = getOne(t, ch, "dlq")
	checkDeath(t, deaths(t, d)[0], amqp091.Table{"count": int64(1), "reason": "delivery_limit", "queue": "limited", "exchange": "", "routing-keys": []interface{}{"limited"}})
	if i, _ := inspect(ch, "limited"); i.Messages != 0 {
		t.Fatal("message still in limited")
	}
}

func TestDeadLetterMissingDLXDrops(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("src", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": "does-not-exist"})
	must(t, err)
	publish(t, ch, "", "src", "x")
	must(t, getOne(t, ch, "src").Reject(false))
	poll.CheckFor(t, 5*time.Second, poll.True("dropped", func() bool {
		info, _ := b.eng.GetQueue("src")
		return info.Visible+info.InFlight == 0 && info.Dropped == 1
	}))
}
