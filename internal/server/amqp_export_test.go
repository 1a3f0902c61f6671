package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/api"
)

// TestAMQPExportImportKeepsProperties: messages published over AMQP,
// exported from their queue as JSONL and imported into another, are
// delivered from there with the properties and priority they were
// published with; an import whose envelope was tampered with is refused
// whole.
func TestAMQPExportImportKeepsProperties(t *testing.T) {
	s := startWith(t, func(*Options) {})
	ch := amqpChannel(t, s)
	if _, err := ch.QueueDeclare("src", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("dst", true, false, false, false, amqp091.Table{"x-max-priority": int32(9)}); err != nil {
		t.Fatal(err)
	}
	published := []amqp091.Publishing{{
		ContentType: "text/plain", Priority: 2, DeliveryMode: 2, MessageId: "low",
		Headers: amqp091.Table{"k": "v", "n": int32(5), "nested": amqp091.Table{"a": true}},
		Body:    []byte("low"),
	}, {
		ContentType: "application/json", ContentEncoding: "gzip", Priority: 7, DeliveryMode: 2,
		CorrelationId: "c-1", ReplyTo: "replies", MessageId: "high", Type: "t", AppId: "app", UserId: "guest",
		Timestamp: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
		Body:      []byte(`{"x":1}`),
	}}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range published {
		dc, err := ch.PublishWithDeferredConfirm("", "src", false, false, p)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("confirm: %v %v", ok, err)
		}
	}

	base := "http://" + s.SQSAddr() + "/sluice/v1/queues/"
	resp, err := http.Get(base + "src/export")
	if err != nil {
		t.Fatal(err)
	}
	export, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export %d %s", resp.StatusCode, export)
	}
	lines := strings.Split(strings.TrimSpace(string(export)), "\n")
	if len(lines) != 2 {
		t.Fatalf("export:\n%s", export)
	}
	var first api.Message
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.Priority != 2 || len(first.Envelope) == 0 {
		t.Fatalf("exported without priority or envelope: %s", lines[0])
	}

	post := func(body []byte) (int, string) {
		t.Helper()
		resp, err := http.Post(base+"dst/import", "application/x-ndjson", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// An envelope whose properties do not decode: nothing is imported.
	bad := first
	bad.Envelope = append(append([]byte(nil), first.Envelope...), 0xff)
	badLine, _ := json.Marshal(bad)
	if code, body := post(append(append([]byte(lines[1]), '\n'), badLine...)); code != http.StatusBadRequest || !strings.Contains(body, "line 2") || !strings.Contains(body, "envelope") {
		t.Fatalf("tampered envelope: %d %s", code, body)
	}
	if q, err := ch.QueueDeclarePassive("dst", true, false, false, false, amqp091.Table{"x-max-priority": int32(9)}); err != nil || q.Messages != 0 {
		t.Fatalf("a refused import stored messages: %+v %v", q, err)
	}

	if code, body := post(export); code != http.StatusOK {
		t.Fatalf("import %d %s", code, body)
	}
	// dst orders by priority: the second published comes first.
	for _, want := range []amqp091.Publishing{published[1], published[0]} {
		d, ok, err := ch.Get("dst", true)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if string(d.Body) != string(want.Body) {
			t.Fatalf("got %s, want %s", d.Body, want.Body)
		}
		if d.ContentType != want.ContentType || d.ContentEncoding != want.ContentEncoding || d.Priority != want.Priority ||
			d.DeliveryMode != want.DeliveryMode || d.CorrelationId != want.CorrelationId || d.ReplyTo != want.ReplyTo ||
			d.MessageId != want.MessageId || d.Type != want.Type || d.AppId != want.AppId || d.UserId != want.UserId ||
			!d.Timestamp.Equal(want.Timestamp) || d.Exchange != "" || d.RoutingKey != "src" {
			t.Fatalf("properties changed by the round trip:\n got %+v\nwant %+v", d, want)
		}
		for k, v := range want.Headers {
			if !reflect.DeepEqual(d.Headers[k], v) {
				t.Fatalf("header %s: got %#v, want %#v (all: %v)", k, d.Headers[k], v, d.Headers)
			}
		}
	}
}
