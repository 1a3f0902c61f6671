package admin

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

func TestManageQueues(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	code, body := f.do("POST", "/sluice/v1/queues", NewQueueRequest{Name: "orders", DeadLetterQueue: "dlq", MaxReceiveCount: 4, VisibilityTimeoutSeconds: 60})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var q api.Queue
	if err := json.Unmarshal(body, &q); err != nil || q.DeadLetterQueue != "dlq" || q.MaxReceiveCount != 4 || q.Config.VisibilitySeconds != 60 {
		t.Fatalf("created %s", body)
	}
	for _, tc := range []struct {
		req  NewQueueRequest
		code int
		want string
	}{
		{NewQueueRequest{Name: "orders"}, 409, "QueueAlreadyExists"},
		{NewQueueRequest{Name: "bad name"}, 400, "letters, digits"},
		{NewQueueRequest{Name: strings.Repeat("a", 76) + ".fifo", FIFO: true}, 400, "letters, digits"},
		{NewQueueRequest{Name: "x", DeadLetterQueue: "dlq", OwnDeadLetterQueue: true}, 400, "not both"},
		{NewQueueRequest{Name: "x", MaxReceiveCount: 3}, 400, "go together"},
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

// TestCreateRoutesShareOneLogic: POST /sluice/v1/queues (the dashboard's
// form) and PUT /sluice/v1/queues/{name} (sluice queues create) create
// queues through one code path: the same name rule (the SQS one, shared
// with the SQS front-end), the same errors, and for the same choice of
// dead-letter queue the same configuration and tags.
func TestCreateRoutesShareOneLogic(t *testing.T) {
	f := newFixture(t)
	// Own DLQ: PUT's default, POST's ownDeadLetterQueue.
	var put api.CreateQueueResponse
	f.doJSON("PUT", "/sluice/v1/queues/a", api.CreateQueueRequest{MaxReceiveCount: 4, VisibilityTimeoutSeconds: 60}, http.StatusCreated, &put)
	var post api.Queue
	f.doJSON("POST", "/sluice/v1/queues", NewQueueRequest{Name: "b", OwnDeadLetterQueue: true, MaxReceiveCount: 4, VisibilityTimeoutSeconds: 60}, http.StatusCreated, &post)
	if put.Queue.DeadLetterQueue != "a-dlq" || post.DeadLetterQueue != "b-dlq" || post.MaxReceiveCount != 4 {
		t.Fatalf("own DLQs: PUT %+v, POST %+v", put.Queue, post)
	}
	sameConfig := func(x, y string) {
		t.Helper()
		cx, err1 := f.eng.Config(x)
		cy, err2 := f.eng.Config(y)
		if err1 != nil || err2 != nil {
			t.Fatalf("config %s, %s: %v %v", x, y, err1, err2)
		}
		a, b := *cx, *cy
		if a.DeadLetter != nil && b.DeadLetter != nil {
			a.DeadLetter, b.DeadLetter = nil, nil
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s and %s differ:\n%+v\n%+v", x, y, a, b)
		}
	}
	sameConfig("a", "b")
	sameConfig("a-dlq", "b-dlq")
	if c, _ := f.eng.Config("b-dlq"); c.Retention != DLQRetention {
		t.Errorf("POST's own DLQ keeps messages %v, want %v", c.Retention, DLQRetention)
	}
	if c, _ := f.eng.Config("b"); c.Visibility != 60*time.Second || c.DeadLetter.MaxReceiveCount != 4 {
		t.Errorf("POST's queue: %+v", c)
	}
	// No DLQ, a FIFO queue: the same through both.
	f.doJSON("PUT", "/sluice/v1/queues/c.fifo", map[string]any{"fifo": true, "deadLetterQueue": false}, http.StatusCreated, nil)
	f.doJSON("POST", "/sluice/v1/queues", NewQueueRequest{Name: "d.fifo", FIFO: true}, http.StatusCreated, nil)
	sameConfig("c.fifo", "d.fifo")
	// The same errors, with the same codes.
	long := strings.Repeat("n", engine.MaxQueueNameLength)
	f.create("h-dlq", nil)
	for _, tc := range []struct {
		name       string
		put        any
		post       NewQueueRequest
		status     int
		code, text string
	}{
		{"bad name", api.CreateQueueRequest{}, NewQueueRequest{Name: "bad name"}, 400, "InvalidRequest", "letters, digits"},
		{"a.b", api.CreateQueueRequest{}, NewQueueRequest{Name: "a.b"}, 400, "InvalidRequest", "letters, digits"},
		{long + "x", api.CreateQueueRequest{}, NewQueueRequest{Name: long + "x"}, 400, "InvalidRequest", "letters, digits"},
		{"e.fifo", api.CreateQueueRequest{}, NewQueueRequest{Name: "e.fifo"}, 400, "InvalidRequest", ".fifo"},
		{"a", api.CreateQueueRequest{}, NewQueueRequest{Name: "a", OwnDeadLetterQueue: true}, 409, "QueueAlreadyExists", "queue a already exists"},
		{"a-dlq", map[string]any{"deadLetterQueue": false}, NewQueueRequest{Name: "a-dlq"}, 409, "QueueAlreadyExists", "a-dlq"},
		// The queue's name is free, its own DLQ's is not: nothing is created.
		{"h", api.CreateQueueRequest{}, NewQueueRequest{Name: "h", OwnDeadLetterQueue: true}, 409, "QueueAlreadyExists", "queue h-dlq already exists"},
		{long, api.CreateQueueRequest{}, NewQueueRequest{Name: long, OwnDeadLetterQueue: true}, 400, "InvalidRequest", "too long for its own dead-letter queue"},
		{"f", api.CreateQueueRequest{MaxReceiveCount: 1001}, NewQueueRequest{Name: "f", OwnDeadLetterQueue: true, MaxReceiveCount: 1001}, 400, "InvalidRequest", "maxReceiveCount"},
		{"g", api.CreateQueueRequest{VisibilityTimeoutSeconds: 43201}, NewQueueRequest{Name: "g", VisibilityTimeoutSeconds: 43201}, 400, "InvalidRequest", "visibilityTimeoutSeconds"},
	} {
		for route, do := range map[string]func() api.ErrorBody{
			"PUT": func() api.ErrorBody {
				return f.wantError("PUT", "/sluice/v1/queues/"+url.PathEscape(tc.name), tc.put, tc.status, tc.code)
			},
			"POST": func() api.ErrorBody { return f.wantError("POST", "/sluice/v1/queues", tc.post, tc.status, tc.code) },
		} {
			if e := do(); !strings.Contains(e.Error.Message, tc.text) {
				t.Errorf("%s %q: %q, want it to mention %q", route, tc.name, e.Error.Message, tc.text)
			}
		}
		if _, err := f.eng.Config(tc.name); err == nil && tc.name != "a" && tc.name != "a-dlq" {
			t.Errorf("%q: created although refused", tc.name)
		}
	}
}
