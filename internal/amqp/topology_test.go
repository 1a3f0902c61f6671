package amqp

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// drain returns the bodies of every message now in q, sorted.
func drain(t *testing.T, ch *amqp091.Channel, q string) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok {
			break
		}
		out = append(out, string(d.Body))
	}
	sort.Strings(out)
	return out
}

func declareQueues(t *testing.T, ch *amqp091.Channel, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := ch.QueueDeclare(n, false, false, false, false, nil)
		must(t, err)
	}
}

func TestExchangeRouting(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declareQueues(t, ch, "d1", "d2", "f1", "f2", "t1", "t2", "t3", "h1", "h2", "h3")
	must(t, ch.ExchangeDeclare("x.direct", "direct", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare("x.fanout", "fanout", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare("x.topic", "topic", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare("x.headers", "headers", false, false, false, false, nil))
	// Direct: every matching binding; a queue bound twice gets one copy.
	must(t, ch.QueueBind("d1", "red", "x.direct", false, nil))
	must(t, ch.QueueBind("d2", "red", "x.direct", false, nil))
	must(t, ch.QueueBind("d2", "blue", "x.direct", false, nil))
	publish(t, ch, "x.direct", "red", "r")
	publish(t, ch, "x.direct", "blue", "b")
	publish(t, ch, "x.direct", "green", "g")
	// Fanout.
	must(t, ch.QueueBind("f1", "", "x.fanout", false, nil))
	must(t, ch.QueueBind("f2", "ignored", "x.fanout", false, nil))
	publish(t, ch, "x.fanout", "any", "f")
	// Topic.
	must(t, ch.QueueBind("t1", "a.*.c", "x.topic", false, nil))
	must(t, ch.QueueBind("t2", "a.#", "x.topic", false, nil))
	must(t, ch.QueueBind("t3", "#.c", "x.topic", false, nil))
	must(t, ch.QueueBind("t3", "a.b.c", "x.topic", false, nil)) // same queue twice: one copy
	for _, k := range []string{"a.b.c", "a", "a.b.b.c", "x.c", "a.b"} {
		publish(t, ch, "x.topic", k, k)
	}
	// Headers.
	must(t, ch.QueueBind("h1", "", "x.headers", false, amqp091.Table{"x-match": "all", "kind": "order", "region": "eu"}))
	must(t, ch.QueueBind("h2", "", "x.headers", false, amqp091.Table{"x-match": "any", "kind": "order", "region": "eu"}))
	must(t, ch.QueueBind("h3", "", "x.headers", false, amqp091.Table{"x-match": "all-with-x", "x-tenant": "t1"}))
	pubH := func(body string, h amqp091.Table) {
		must(t, ch.Publish("x.headers", "", false, false, amqp091.Publishing{Headers: h, Body: []byte(body)}))
	}
	pubH("both", amqp091.Table{"kind": "order", "region": "eu"})
	pubH("kind", amqp091.Table{"kind": "order", "region": "us"})
	pubH("none", amqp091.Table{"kind": "refund"})
	pubH("int", amqp091.Table{"kind": "order", "region": "eu", "x-tenant": int32(1)})
	pubH("tenant", amqp091.Table{"x-tenant": "t1"})

	want := map[string]string{
		"d1": "[r]", "d2": "[b r]", "f1": "[f]", "f2": "[f]",
		"t1": "[a.b.c]", "t2": "[a a.b a.b.b.c a.b.c]", "t3": "[a.b.b.c a.b.c x.c]",
		"h1": "[both int]", "h2": "[both int kind]", "h3": "[tenant]",
	}
	for q, w := range want {
		var got []string
		poll.CheckFor(t, 5*time.Second, poll.True("messages in "+q, func() bool {
			got = append(got, drain(t, ch, q)...)
			sort.Strings(got)
			return fmt.Sprint(got) == w
		}))
	}
}

func TestTopicMatch(t *testing.T) {
	for _, c := range []struct {
		pat, key string
		ok       bool
	}{
		{"#", "", true}, {"#", "a.b", true}, {"*", "", true}, {"*", "a.b", false},
		{"a.#.b", "a.b", true}, {"a.#.b", "a.x.y.b", true}, {"a.#.b", "a.x.y", false},
		{"#.#", "a", true}, {"a.*", "a.", true}, {"*.*", "a", false},
	} {
		if got := topicMatch(strings.Split(c.pat, "."), strings.Split(c.key, ".")); got != c.ok {
			t.Errorf("%q ~ %q = %v", c.pat, c.key, got)
		}
	}
}

func TestExchangeToExchangeAndAlternate(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	declareQueues(t, ch, "e2e", "orphans", "loop")
	must(t, ch.ExchangeDeclare("up", "topic", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare("down", "fanout", false, false, false, false, nil))
	must(t, ch.ExchangeBind("down", "orders.*", "up", false, nil))
	must(t, ch.QueueBind("e2e", "", "down", false, nil))
	// A binding cycle ends.
	must(t, ch.ExchangeBind("up", "", "down", false, nil))
	publish(t, ch, "up", "orders.new", "via-e2e")
	publish(t, ch, "up", "refunds.new", "nowhere")
	must(t, ch.ExchangeUnbind("down", "orders.*", "up", false, nil))
	publish(t, ch, "up", "orders.new", "after-unbind")

	must(t, ch.ExchangeDeclare("lost", "fanout", false, false, false, false, nil))
	must(t, ch.QueueBind("orphans", "", "lost", false, nil))
	must(t, ch.ExchangeDeclare("main", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "lost"}))
	must(t, ch.QueueBind("loop", "known", "main", false, nil))
	publish(t, ch, "main", "known", "routed")
	publish(t, ch, "main", "unknown", "alternate")
	poll.CheckFor(t, 5*time.Second, poll.True("e2e", func() bool { return fmt.Sprint(drain(t, ch, "e2e")) == "[via-e2e]" }))
	poll.CheckFor(t, 5*time.Second, poll.True("AE", func() bool { return fmt.Sprint(drain(t, ch, "orphans")) == "[alternate]" }))
	if got := drain(t, ch, "loop"); fmt.Sprint(got) != "[routed]" {
		t.Fatal(got)
	}
}

func TestDeclareErrors(t *testing.T) {
	b := startBroker(t)
	c, ch := b.channel()
	reopen := func() {
		var err error
		ch, err = c.Channel()
		must(t, err)
	}
	args := amqp091.Table{"x-dead-letter-exchange": "orders.dlx"}
	_, err := ch.QueueDeclare("orders", true, false, false, false, args)
	must(t, err)
	// Integer tags are compared by class: int16 vs int32 of the same value is fine.
	_, err = ch.QueueDeclare("ttl", true, false, false, false, amqp091.Table{"x-message-ttl": int16(60000 % 32768)})
	must(t, err)
	_, err = ch.QueueDeclare("ttl", true, false, false, false, amqp091.Table{"x-message-ttl": int64(60000 % 32768), "x-unknown": "ignored"})
	must(t, err)
	_, err = ch.QueueDeclare("orders", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "orders.dlx2"})
	want := "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue 'orders' in vhost '/': received the value 'orders.dlx2' of type 'longstr' but current is the value 'orders.dlx' of type 'longstr'"
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != want {
		t.Fatalf("got %v", e)
	}
	if c.IsClosed() {
		t.Fatal("406 closed the connection")
	}
	reopen()
	_, err = ch.QueueDeclare("orders", true, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 406 || !strings.Contains(e.Reason, "received none but current is the value 'orders.dlx' of type 'longstr'") {
		t.Fatalf("got %v", e)
	}
	reopen()
	_, err = ch.QueueDeclare("orders", false, false, false, false, args)
	if e := amqpErr(t, err); e.Code != 406 || !strings.Contains(e.Reason, "inequivalent arg 'durable'") {
		t.Fatalf("got %v", e)
	}
	reopen()
	// Passive declares ignore arguments and fail with 404 on missing queues.
	_, err = ch.QueueDeclarePassive("orders", false, true, true, false, amqp091.Table{"x-queue-type": "quorum"})
	must(t, err)
	_, err = ch.QueueDeclarePassive("missing", false, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 404 || e.Reason != "NOT_FOUND - no queue 'missing' in vhost '/'" {
		t.Fatalf("got %v", e)
	}
	reopen()
	err = ch.ExchangeDeclarePassive("nox", "direct", false, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 404 || e.Reason != "NOT_FOUND - no exchange 'nox' in vhost '/'" {
		t.Fatalf("got %v", e)
	}
	reopen()
	must(t, ch.ExchangeDeclare("ex", "direct", true, false, false, false, nil))
	err = ch.ExchangeDeclare("ex", "fanout", true, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'ex' in vhost '/': received 'fanout' but current is 'direct'" {
		t.Fatalf("got %v", e)
	}
	reopen()
	err = ch.ExchangeDeclare("amq.mine", "direct", true, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 403 || e.Reason != "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'" {
		t.Fatalf("got %v", e)
	}
	reopen()
	must(t, ch.ExchangeDeclare("amq.direct", "direct", true, false, false, false, nil)) // equivalent redeclare of a built-in
	_, err = ch.QueueDeclare("amq.q", true, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 403 {
		t.Fatalf("got %v", e)
	}
	reopen()
	_, err = ch.QueueDeclare("bad", true, false, false, false, amqp091.Table{"x-message-ttl": "60000"})
	if e := amqpErr(t, err); e.Code != 406 || !strings.Contains(e.Reason, "invalid arg 'x-message-ttl'") {
		t.Fatalf("got %v", e)
	}
	reopen()
	err = ch.QueueBind("orders", "k", "", false, nil)
	if e := amqpErr(t, err); e.Code != 403 || e.Reason != "ACCESS_REFUSED - operation not permitted on the default exchange" {
		t.Fatalf("got %v", e)
	}
	reopen()
	err = ch.QueueBind("orders", "k", "nox", false, nil)
	if e := amqpErr(t, err); e.Code != 404 {
		t.Fatalf("got %v", e)
	}
	reopen()
	// Server-named queues.
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	if !strings.HasPrefix(q.Name, "amq.gen-") {
		t.Fatal(q.Name)
	}
	// x-queue-type quorum is accepted.
	_, err = ch.QueueDeclare("qq", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	must(t, err)
	// Delete if-unused / if-empty.
	publish(t, ch, "", "qq", "m")
	poll.CheckFor(t, 5*time.Second, poll.True("qq has a message", func() bool { i, _ := inspect(ch, "qq"); return i.Messages == 1 }))
	_, err = ch.QueueDelete("qq", false, true, false)
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != "PRECONDITION_FAILED - queue 'qq' in vhost '/' not empty" {
		t.Fatalf("got %v", e)
	}
	reopen()
	n, err := ch.QueueDelete("qq", false, false, false)
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d", n)
	}
	// Redeclare right after a delete (the engine keeps the name).
	_, err = ch.QueueDeclare("qq", true, false, false, false, nil)
	must(t, err)
	if i, _ := inspect(ch, "qq"); i.Messages != 0 {
		t.Fatalf("revived queue has %d messages", i.Messages)
	}
	// Exchange delete if-unused.
	must(t, ch.QueueBind("qq", "k", "ex", false, nil))
	err = ch.ExchangeDelete("ex", true, false)
	if e := amqpErr(t, err); e.Code != 406 || e.Reason != "PRECONDITION_FAILED - exchange 'ex' in vhost '/' in use" {
		t.Fatalf("got %v", e)
	}
	reopen()
	must(t, ch.ExchangeDelete("ex", false, false))
}

func TestExclusiveQueue(t *testing.T) {
	b := startBroker(t)
	c1, ch1 := b.channel()
	_, err := ch1.QueueDeclare("mine", false, false, true, false, nil)
	must(t, err)
	_, ch2 := b.channel()
	_, err = ch2.QueueDeclarePassive("mine", false, false, true, false, nil)
	if e := amqpErr(t, err); e.Code != 405 || !strings.HasPrefix(e.Reason, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost '/'") {
		t.Fatalf("got %v", e)
	}
	_, ch2 = b.channel()
	_, err = ch2.Consume("mine", "", false, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 405 {
		t.Fatalf("got %v", e)
	}
	c1.Close()
	_, ch3 := b.channel()
	poll.CheckFor(t, 5*time.Second, poll.True("exclusive queue gone", func() bool {
		_, err := ch3.QueueDeclarePassive("mine", false, false, false, false, nil)
		if err != nil {
			_, ch3 = b.channel()
			return true
		}
		return false
	}))
}

func TestQueueDeleteCancelsConsumers(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("doomed", false, false, false, false, nil)
	must(t, err)
	cancels := ch.NotifyCancel(make(chan string, 1))
	_, err = ch.Consume("doomed", "the-consumer", false, false, false, false, nil)
	must(t, err)
	_, ch2 := b.channel()
	_, err = ch2.QueueDelete("doomed", false, false, false)
	must(t, err)
	select {
	case tag := <-cancels:
		if tag != "the-consumer" {
			t.Fatal(tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel")
	}
}

func TestExclusiveConsumerAndAutoDelete(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	_, err := ch.QueueDeclare("solo", false, true, false, false, nil)
	must(t, err)
	_, err = ch.Consume("solo", "first", false, true, false, false, nil)
	must(t, err)
	_, ch2 := b.channel()
	_, err = ch2.Consume("solo", "second", false, false, false, false, nil)
	if e := amqpErr(t, err); e.Code != 403 || e.Reason != "ACCESS_REFUSED - queue 'solo' in vhost '/' in exclusive use" {
		t.Fatalf("got %v", e)
	}
	// Auto-delete: the queue goes with its last consumer.
	must(t, ch.Cancel("first", false))
	_, ch3 := b.channel()
	poll.CheckFor(t, 5*time.Second, poll.True("auto-delete", func() bool {
		_, err := ch3.QueueDeclarePassive("solo", false, true, false, false, nil)
		if err != nil {
			_, ch3 = b.channel()
			return true
		}
		return false
	}))
}

func TestQueueExpires(t *testing.T) {
	b := startBroker(t, withFakeClock())
	_, ch := b.channel()
	_, err := ch.QueueDeclare("temp", false, false, false, false, amqp091.Table{"x-expires": int32(5000)})
	must(t, err)
	b.advance(3*time.Second, 1) // the x-expires sweeper
	if _, err := ch.QueueDeclarePassive("temp", false, false, false, false, nil); err != nil {
		t.Fatal("expired early")
	}
	b.advance(3*time.Second, 0) // the sweeper deletes the queue and parks no more
	poll.CheckFor(t, 5*time.Second, poll.True("queue expired", func() bool {
		_, err := ch.QueueDeclarePassive("temp", false, false, false, false, nil)
		if err != nil {
			_, ch = b.channel()
			return true
		}
		return false
	}))
}
