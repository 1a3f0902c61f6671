package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestManageQueues(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	code, body := f.do("POST", "/sluice/v1/queues", NewQueueRequest{Name: "orders", DeadLetterQueue: "dlq", MaxReceiveCount: 4, VisibilityTimeoutSeconds: 60})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var q Queue
	if err := json.Unmarshal(body, &q); err != nil || q.DeadLetterQueue != "dlq" || q.MaxReceiveCount != 4 || q.Config.VisibilitySeconds != 60 {
		t.Fatalf("created %s", body)
	}
	for _, tc := range []struct {
		req  NewQueueRequest
		code int
		want string
	}{
		{NewQueueRequest{Name: "orders"}, 409, "QueueExists"},
		{NewQueueRequest{Name: "bad name"}, 400, "letters, digits"},
		{NewQueueRequest{Name: "f.fifo"}, 400, ".fifo"},
		{NewQueueRequest{Name: "x", DeadLetterQueue: "nope", MaxReceiveCount: 3}, 400, "DeadLetterQueueNotFound"},
		{NewQueueRequest{Name: "x", DeadLetterQueue: "dlq"}, 400, "go together"},
	} {
		if code, body := f.do("POST", "/sluice/v1/queues", tc.req); code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("%+v: %d %s", tc.req, code, body)
		}
	}

	code, body = f.do("POST", "/sluice/v1/queues/orders/messages", SendRequest{Body: `{"id":"o-1"}`, Attributes: map[string]string{"tenant": "acme"}})
	if code != http.StatusCreated || !strings.Contains(string(body), "messageId") {
		t.Fatalf("send: %d %s", code, body)
	}
	if info, _ := f.eng.GetQueue("orders"); info.Visible != 1 {
		t.Fatalf("not sent: %+v", info)
	}
	if code, body := f.do("POST", "/sluice/v1/queues/orders/messages", SendRequest{}); code != 400 {
		t.Fatalf("empty body: %d %s", code, body)
	}
	code, body = f.do("POST", "/sluice/v1/queues", NewQueueRequest{Name: "g.fifo", FIFO: true})
	if code != http.StatusCreated {
		t.Fatalf("fifo: %d %s", code, body)
	}
	if code, body := f.do("POST", "/sluice/v1/queues/g.fifo/messages", SendRequest{Body: "x"}); code != 400 || !strings.Contains(string(body), "groupId") {
		t.Fatalf("fifo without group: %d %s", code, body)
	}
	if code, body := f.do("POST", "/sluice/v1/queues/g.fifo/messages", SendRequest{Body: "x", GroupID: "g", DeduplicationID: "d"}); code != 201 || !strings.Contains(string(body), "sequenceNumber") {
		t.Fatalf("fifo send: %d %s", code, body)
	}

	code, body = f.do("POST", "/sluice/v1/queues/orders/purge", nil)
	if code != 200 || !strings.Contains(string(body), `"purged":1`) {
		t.Fatalf("purge: %d %s", code, body)
	}
	if code, body := f.do("POST", "/sluice/v1/queues/orders/purge", nil); code != 409 || !strings.Contains(string(body), "PurgeInProgress") {
		t.Fatalf("second purge: %d %s", code, body)
	}
	if code, body := f.do("DELETE", "/sluice/v1/queues/orders", nil); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if _, err := f.eng.GetQueue("orders"); err == nil {
		t.Fatal("queue still there")
	}
	if code, _ := f.do("DELETE", "/sluice/v1/queues/orders", nil); code != 404 {
		t.Fatalf("delete again: %d", code)
	}
}
