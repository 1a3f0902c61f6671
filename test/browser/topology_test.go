package browser

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest"
)

// scratchDir keeps screenshots that are not in the docs: in
// $SLUICE_SCRATCH when set (to look at them), else a temporary directory.
func scratchDir(t *testing.T) string {
	if d := os.Getenv("SLUICE_SCRATCH"); d != "" {
		return d
	}
	return t.TempDir()
}

// topologyFixture is an answer of GET /sluice/v1/amqp/topology with the
// cases a drawing can get wrong: the default exchange's implicit bindings
// (not drawn), unused built-ins, a topic exchange with two bindings to one
// queue, a dead-letter exchange feeding a DLQ, a dead-letter exchange with
// nothing bound, a missing one, the default exchange as DLX, an
// exchange-to-exchange binding, a headers binding and a second vhost whose
// engine queue names differ from the AMQP ones. %d is the DLQ's ready
// count.
const topologyFixture = `{"vhosts":[
 {"name":"staging","exchanges":[{"name":"","type":"direct","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"jobs","type":"direct","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""}],
  "queues":[{"name":"jobs","engineQueue":"amq.vhost/staging/jobs","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"","deadLetterRoutingKey":"","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":2,"ready":1,"unacked":0}],
  "bindings":[{"source":"jobs","destination":"jobs","destinationType":"queue","routingKey":"run","arguments":{}}]},
 {"name":"/","exchanges":[
   {"name":"","type":"direct","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"amq.direct","type":"direct","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"amq.topic","type":"topic","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"orders","type":"topic","durable":true,"autoDelete":false,"internal":false,"alternateExchange":"orders-unrouted"},
   {"name":"orders-unrouted","type":"fanout","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"orders-dlx","type":"fanout","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"mail-dlx","type":"fanout","durable":true,"autoDelete":false,"internal":false,"alternateExchange":""},
   {"name":"events","type":"headers","durable":false,"autoDelete":true,"internal":false,"alternateExchange":""}],
  "queues":[
   {"name":"orders-work","engineQueue":"orders-work","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"orders-dlx","deadLetterRoutingKey":"","messageTTLMs":60000,"maxLength":1000,"overflow":"reject-publish","deliveryLimit":5,"consumers":3,"ready":7,"unacked":2},
   {"name":"orders-dlq","engineQueue":"orders-dlq","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"","deadLetterRoutingKey":"","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":0,"ready":%d,"unacked":0},
   {"name":"mail","engineQueue":"mail","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"mail-dlx","deadLetterRoutingKey":"","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":0,"ready":0,"unacked":0},
   {"name":"legacy","engineQueue":"legacy","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"gone-dlx","deadLetterRoutingKey":"","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":0,"ready":0,"unacked":0},
   {"name":"retry","engineQueue":"retry","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"","deadLetterRoutingKey":"retry-parking","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":0,"ready":0,"unacked":0},
   {"name":"retry-parking","engineQueue":"retry-parking","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"","deadLetterRoutingKey":"","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":0,"ready":250,"unacked":0},
   {"name":"audit","engineQueue":"audit","durable":true,"exclusive":false,"autoDelete":false,"deadLetterExchange":"","deadLetterRoutingKey":"","messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":1,"ready":0,"unacked":0}],
  "bindings":[
   {"source":"","destination":"orders-work","destinationType":"queue","routingKey":"orders-work","arguments":{}},
   {"source":"orders","destination":"orders-work","destinationType":"queue","routingKey":"order.created","arguments":{}},
   {"source":"orders","destination":"orders-work","destinationType":"queue","routingKey":"order.*.retry","arguments":{}},
   {"source":"orders","destination":"events","destinationType":"exchange","routingKey":"#","arguments":{}},
   {"source":"events","destination":"audit","destinationType":"queue","routingKey":"","arguments":{"x-match":"all","kind":"order"}},
   {"source":"orders-dlx","destination":"orders-dlq","destinationType":"queue","routingKey":"","arguments":{}}]}]}`

// TestTopologyPage draws a canned topology (every case above) and checks
// the drawing, live counts without losing focus, keyboard jumps between
// exchanges and the phone layout.
func TestTopologyPage(t *testing.T) {
	ctx, cons := newBrowser(t)
	var dlqReady atomic.Int64
	dlqReady.Store(60) // ≥ 50: warning
	topo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, topologyFixture, dlqReady.Load())
	})
	b := startBrokerWith(t, true, map[string]http.Handler{"GET /sluice/v1/amqp/topology": topo})
	do(t, ctx, "open the topology", chromedp.Navigate(b.url+"/ui/#/topology"))
	waitJS(t, ctx, "the exchanges", `document.querySelectorAll('.x-card').length > 0`, 10*time.Second)

	// "/" comes first; the default exchange's implicit binding and unused
	// built-ins are not cards.
	check := func(what, expr string) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil || !ok {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
			t.Errorf("%s: %v (%s)\npage text:\n%s", what, err, expr, text)
		}
	}
	check("vhost / first", `document.querySelector('section.vhost').dataset.vhost === '/'`)
	check("no card for the default exchange or unused built-ins",
		`!document.querySelector('[data-exchange=""]') && !document.querySelector('[data-exchange="amq.direct"]') && !document.querySelector('[data-exchange="amq.topic"]')`)
	check("unused exchanges named in one line", `document.querySelector('.idle').innerText.includes('amq.direct')`)
	check("the topic exchange's bindings", `(() => { const c = document.querySelector('[data-exchange="orders"]');
		return c.querySelector('.x-type').innerText.toLowerCase() === 'topic' && c.innerText.includes('order.created') && c.innerText.includes('order.*.retry')
			&& c.querySelectorAll('.route > .q-node[data-queue="orders-work"]').length === 1
			&& c.querySelectorAll('.route[data-dest="orders-work"] .key').length === 2; })()`)
	check("the queue links to its queue page", `document.querySelector('[data-exchange="orders"] .q-link').getAttribute('href') === '#/queue/orders-work'`)
	check("queue settings", `document.querySelector('[data-exchange="orders"] .q-settings').innerText === 'TTL 1m · max 1,000 (reject-publish) · delivery limit 5'`)
	check("counts", `document.querySelector('[data-exchange="orders"] .q-counts').innerText === '7 ready · 2 unacked · 3 consumers'`)
	check("the alternate exchange", `document.querySelector('[data-exchange="orders"]').innerText.includes('Unroutable messages go to')`)
	check("exchange-to-exchange binding", `document.querySelector('[data-exchange="orders"] .x-dest button').innerText === 'events'`)
	check("headers binding shows its arguments", `document.querySelector('[data-exchange="events"] .key').innerText === 'x-match=all, kind=order'`)
	check("DLX path: orders-work ⇢ orders-dlx → orders-dlq 60, warning",
		`(() => { const p = document.querySelector('[data-exchange="orders"] .dl-path[data-dlx="orders-dlx"]');
		const c = p && p.querySelector('.dlq-chip[data-dlq="orders-dlq"]');
		return !!c && c.querySelector('.val').innerText === '60' && c.classList.contains('level-warn') && c.innerText.toLowerCase().includes('warning'); })()`)
	check("the DLX card is flagged and names its source", `(() => { const c = document.querySelector('[data-exchange="orders-dlx"]');
		return c.classList.contains('is-dlx') && c.innerText.includes('Dead-letter exchange of orders-work')
			&& c.querySelector('.q-node[data-queue="orders-dlq"]').classList.contains('level-warn'); })()`)
	check("a DLX with nothing bound warns", `document.querySelector('.dl-path[data-dlx="mail-dlx"]').innerText.toLowerCase().includes('no queue bound')`)
	check("a missing DLX is flagged", `document.querySelector('.dl-path[data-dlx="gone-dlx"]').innerText.toLowerCase().includes('missing')`)
	check("the default exchange as DLX, critical at 250", `(() => { const p = document.querySelector('.dl-path[data-dlx=""]');
		return p.innerText.includes('retry-parking') && p.querySelector('.dlq-chip').classList.contains('level-critical'); })()`)
	check("queues without bindings listed", `document.querySelector('.by-name').innerText.includes('legacy')`)
	check("the other vhost's queue links to its engine queue",
		`document.querySelector('[data-vhost="staging"] .q-link').getAttribute('href') === '#/queue/' + encodeURIComponent('amq.vhost/staging/jobs')`)
	check("nav marks the page", `document.querySelector('[data-nav="topology"]').getAttribute('aria-current') === 'page'`)

	// Keyboard: tab to the "events" jump button, press Enter: focus moves
	// to that exchange's heading.
	for i := 0; i < 60; i++ {
		do(t, ctx, "tab", chromedp.KeyEvent(kb.Tab))
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.getAttribute('aria-label') || ''`))
		if s == "Go to exchange events" {
			break
		}
	}
	do(t, ctx, "enter", chromedp.KeyEvent(kb.Enter))
	check("focus on the events exchange", `document.activeElement.closest('[data-exchange]').dataset.exchange === 'events' && document.activeElement.tagName === 'H3'`)

	// Live counts: the DLQ grows to critical; the numbers change in place
	// and the focused link keeps focus.
	do(t, ctx, "focus the DLQ link", chromedp.Evaluate[chromedp.Void](`document.querySelector('.dlq-chip[data-dlq="orders-dlq"] a').focus()`))
	dlqReady.Store(210)
	waitJS(t, ctx, "the DLQ turns critical", `document.querySelector('.dlq-chip[data-dlq="orders-dlq"]').classList.contains('level-critical')`, 15*time.Second)
	check("focus kept across the update", `document.activeElement === document.querySelector('.dlq-chip[data-dlq="orders-dlq"] a')`)

	// Phone width: nothing wider than the screen.
	do(t, ctx, "phone", viewport(390, 844))
	do(t, ctx, "settle", chromedp.Sleep(300*time.Millisecond))
	check("no horizontal scroll at phone width", `document.documentElement.scrollWidth <= window.innerWidth`)
	screenshot(t, ctx, scratchDir(t), "topology-fixture-phone.png")
	do(t, ctx, "desktop", viewport(1280, 800))
	screenshot(t, ctx, scratchDir(t), "topology-fixture.png")

	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestTopologyAMQP declares a topology over AMQP on a real broker
// (brokertest: server.New, as `sluice server` runs) and checks the page draws it:
// the exchanges, the binding keys, the queue and its dead-letter path to
// the DLQ with its depth. It saves docs/img/topology.png.
func TestTopologyAMQP(t *testing.T) {
	ctx, cons := newBrowser(t)
	broker := brokertest.Start(t, brokertest.Options(t), nil)
	base := broker.SQSURL()

	resp, err := http.Get(base + "/sluice/v1/amqp/topology")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sluice/v1/amqp/topology: HTTP %d, want 200 (the server mounts amqp.(*Server).TopologyHandler there)", resp.StatusCode)
	}

	conn, err := amqp091.Dial(broker.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("orders", ch.ExchangeDeclare("orders", "topic", true, false, false, false, nil))
	must("orders-dlx", ch.ExchangeDeclare("orders-dlx", "fanout", true, false, false, false, nil))
	_, err = ch.QueueDeclare("orders-dlq", true, false, false, false, nil)
	must("orders-dlq", err)
	must("bind orders-dlq", ch.QueueBind("orders-dlq", "", "orders-dlx", false, nil))
	_, err = ch.QueueDeclare("orders-work", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "orders-dlx"})
	must("orders-work", err)
	must("bind order.created", ch.QueueBind("orders-work", "order.created", "orders", false, nil))
	must("bind order.*.retry", ch.QueueBind("orders-work", "order.*.retry", "orders", false, nil))
	_, err = ch.QueueDeclare("orders-audit", true, false, false, false, amqp091.Table{"x-message-ttl": int32(86400000)})
	must("orders-audit", err)
	must("bind order.#", ch.QueueBind("orders-audit", "order.#", "orders", false, nil))
	_, err = ch.QueueDeclare("billing", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "orders-dlx", "x-delivery-limit": int32(5)})
	must("billing", err)
	must("bind billing", ch.QueueBind("billing", "order.paid", "orders", false, nil))

	// Traffic: 80 orders, 60 of them rejected by the worker: the DLQ
	// reaches the warning level (50).
	must("confirm", ch.Confirm(false))
	for i := range 80 {
		key := "order.created"
		if i%4 == 3 {
			key = "order.paid"
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "orders", key, false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: fmt.Appendf(nil, `{"order": %d}`, i)})
		must("publish", err)
		if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
			t.Fatalf("publish %d not confirmed: %v", i, err)
		}
	}
	must("qos", ch.Qos(10, 0, false))
	deliveries, err := ch.Consume("orders-work", "", false, false, false, false, nil)
	must("consume", err)
	for i := range 60 {
		select {
		case d := <-deliveries:
			must("reject", d.Reject(false))
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d did not come", i)
		}
	}

	// A backlog behind the consumer: 10 unacked (the prefetch), 5 ready.
	for i := range 15 {
		must("publish", ch.PublishWithContext(context.Background(), "orders", "order.created", false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: fmt.Appendf(nil, `{"order": %d}`, 80+i)}))
	}

	do(t, ctx, "open the topology", chromedp.Navigate(base+"/ui/#/topology"))
	waitJS(t, ctx, "the orders exchange", `document.querySelector('[data-exchange="orders"]') !== null`, 10*time.Second)
	waitJS(t, ctx, "the backlog", `(document.querySelector('[data-exchange="orders"] .q-node[data-queue="orders-work"] .q-counts') || {}).innerText === '5 ready · 10 unacked · 1 consumer'`, 15*time.Second)
	waitJS(t, ctx, "the DLQ at 60", `(() => { const c = document.querySelector('[data-exchange="orders"] .dl-path[data-dlx="orders-dlx"] .dlq-chip[data-dlq="orders-dlq"]');
		return !!c && c.querySelector('.val').innerText === '60' && c.classList.contains('level-warn'); })()`, 15*time.Second)
	card := text(t, ctx, `[data-exchange="orders"]`)
	for _, want := range []string{"order.created", "order.*.retry", "order.#", "order.paid", "orders-work", "orders-audit", "billing", "orders-dlx", "orders-dlq"} {
		if !strings.Contains(card, want) {
			t.Errorf("the orders exchange does not show %q:\n%s", want, card)
		}
	}
	dlx := text(t, ctx, `[data-exchange="orders-dlx"]`)
	for _, want := range []string{"Dead-letter exchange of", "orders-work", "billing", "orders-dlq"} {
		if !strings.Contains(dlx, want) {
			t.Errorf("the DLX does not show %q:\n%s", want, dlx)
		}
	}
	// The queue link opens the queue page.
	do(t, ctx, "open orders-work", chromedp.Click(`[data-exchange="orders"] .q-node[data-queue="orders-work"] .q-link`))
	waitJS(t, ctx, "the queue page", `location.hash === '#/queue/orders-work' && document.querySelector('main h1') !== null`, 10*time.Second)
	do(t, ctx, "back", chromedp.Navigate(base+"/ui/#/topology"))
	waitJS(t, ctx, "the topology again", `document.querySelector('.dlq-chip[data-dlq="orders-dlq"] .val') !== null`, 10*time.Second)

	dir := shotDir(t)
	screenshot(t, ctx, dir, "topology.png")
	do(t, ctx, "phone", viewport(390, 844))
	do(t, ctx, "settle", chromedp.Sleep(300*time.Millisecond))
	if ok, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`)); !ok {
		t.Error("the topology scrolls sideways at phone width")
	}
	screenshot(t, ctx, dir, "topology-phone.png")
	do(t, ctx, "desktop", viewport(1280, 800))
	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
