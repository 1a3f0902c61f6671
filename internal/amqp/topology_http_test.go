package amqp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTopologyHandler(t *testing.T) {
	b := startBroker(t)
	_, ch := b.channel()
	must(t, ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, map[string]any{"alternate-exchange": "ae"}))
	_, err := ch.QueueDeclare("q", true, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDeclare("work", true, false, false, false, map[string]any{
		"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead", "x-message-ttl": int32(60000),
		"x-max-length": int64(0), "x-overflow": "reject-publish", "x-queue-type": "quorum"})
	must(t, err)
	must(t, ch.QueueBind("q", "a.#", "amq.topic", false, nil))
	must(t, ch.QueueBind("q", "", "amq.headers", false, map[string]any{"x-match": "any", "n": int16(3), "f": 1.5, "arr": []any{"a", true}}))
	must(t, ch.ExchangeBind("dlx", "k", "amq.direct", false, nil))
	publish(t, ch, "", "q", "one")
	publish(t, ch, "", "q", "two")
	getOne(t, ch, "q") // one unacked
	msgs, err := ch.Consume("q", "", false, false, false, false, nil)
	must(t, err)
	recv(t, msgs) // two unacked

	srv := httptest.NewServer(b.srv.TopologyHandler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	must(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var doc struct {
		Vhosts []struct {
			Name      string           `json:"name"`
			Exchanges []map[string]any `json:"exchanges"`
			Queues    []map[string]any `json:"queues"`
			Bindings  []map[string]any `json:"bindings"`
		} `json:"vhosts"`
	}
	must(t, json.Unmarshal(body, &doc))
	if len(doc.Vhosts) != 1 || doc.Vhosts[0].Name != "/" {
		t.Fatalf("vhosts: %s", body)
	}
	v := doc.Vhosts[0]
	js := func(x any) string { b, _ := json.Marshal(x); return string(b) }
	if got := js(v.Exchanges[0]); got != `{"alternateExchange":"","autoDelete":false,"durable":true,"internal":false,"name":"","type":"direct"}` {
		t.Fatalf("default exchange %s", got)
	}
	var dlx map[string]any
	for _, x := range v.Exchanges {
		if x["name"] == "dlx" {
			dlx = x
		}
	}
	if js(dlx) != `{"alternateExchange":"ae","autoDelete":false,"durable":true,"internal":false,"name":"dlx","type":"fanout"}` {
		t.Fatalf("dlx %s", js(dlx))
	}
	if len(v.Queues) != 2 {
		t.Fatalf("queues %s", js(v.Queues))
	}
	if got := js(v.Queues[0]); got != `{"autoDelete":false,"consumers":1,"deadLetterExchange":"","deadLetterRoutingKey":"","deliveryLimit":null,"durable":true,"engineQueue":"q","exclusive":false,"maxLength":null,"messageTTLMs":null,"name":"q","overflow":"","ready":0,"unacked":2}` {
		t.Fatalf("q %s", got)
	}
	if got := js(v.Queues[1]); got != `{"autoDelete":false,"consumers":0,"deadLetterExchange":"dlx","deadLetterRoutingKey":"dead","deliveryLimit":4,"durable":true,"engineQueue":"work","exclusive":false,"maxLength":0,"messageTTLMs":60000,"name":"work","overflow":"reject-publish","ready":0,"unacked":0}` {
		t.Fatalf("work %s", got)
	}
	want := []string{
		`{"arguments":{},"destination":"dlx","destinationType":"exchange","routingKey":"k","source":"amq.direct"}`,
		`{"arguments":{"arr":["a",true],"f":1.5,"n":3,"x-match":"any"},"destination":"q","destinationType":"queue","routingKey":"","source":"amq.headers"}`,
		`{"arguments":{},"destination":"q","destinationType":"queue","routingKey":"a.#","source":"amq.topic"}`,
	}
	if len(v.Bindings) != len(want) {
		t.Fatalf("bindings %s", js(v.Bindings))
	}
	for i, w := range want {
		if got := js(v.Bindings[i]); got != w {
			t.Fatalf("binding %d: %s, want %s", i, got, w)
		}
	}
	// The exact key order and nulls of the contract, on the wire.
	if !json.Valid(body) || !strings.Contains(string(body), `"messageTTLMs":null,"maxLength":null,"overflow":"","deliveryLimit":null,"consumers":1,"ready":0,"unacked":2}`) {
		t.Fatalf("wire form: %s", body)
	}
	res, err = http.Post(srv.URL, "application/json", nil)
	must(t, err)
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d", res.StatusCode)
	}
}
