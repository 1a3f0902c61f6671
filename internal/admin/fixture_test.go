package admin

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// fixture is a real engine over memstore with a fake clock, and the admin
// handler mounted as the server mounts it, behind a real HTTP listener.
type fixture struct {
	t   *testing.T
	st  *memstore.Store
	clk *clock.Fake
	eng *engine.Engine
	srv *httptest.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, st: memstore.New(), clk: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	eng, err := engine.Open(engine.Options{Store: f.st, Clock: f.clk})
	if err != nil {
		t.Fatal(err)
	}
	f.eng = eng
	mux := http.NewServeMux()
	mux.Handle(api.Prefix, New(eng, Options{Clock: f.clk}))
	mux.HandleFunc("/sluice/v1/alerts", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "alerts") })
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() { f.srv.Close(); eng.Close() })
	return f
}

func (f *fixture) create(name string, mod func(*engine.QueueConfig)) {
	f.t.Helper()
	cfg := engine.DefaultQueueConfig()
	if mod != nil {
		mod(&cfg)
	}
	if _, _, err := f.eng.CreateQueue(name, cfg, nil); err != nil {
		f.t.Fatalf("create %s: %v", name, err)
	}
}

// withDLQ creates "dlq" and "q" dead-lettering into it after maxReceives.
func (f *fixture) withDLQ(maxReceives int) {
	f.create("dlq", nil)
	f.create("q", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: maxReceives}
	})
}

func (f *fixture) send(queue string, msgs ...engine.Message) []string {
	f.t.Helper()
	res, err := f.eng.Send(queue, msgs)
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []string
	for _, r := range res {
		if r.Err != nil {
			f.t.Fatal(r.Err)
		}
		ids = append(ids, r.MessageID)
	}
	return ids
}

func (f *fixture) receive(queue string, n int) []engine.Delivery {
	f.t.Helper()
	d, err := f.eng.Receive(f.t.Context(), queue, engine.ReceiveRequest{Max: n, WaitSet: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// poison sends n messages to q and dead-letters each with a terminal
// failure report over HTTP, with error class class. It returns their ids.
func (f *fixture) poison(n int, class string) []string {
	f.t.Helper()
	var ids []string
	for range n {
		ids = append(ids, f.send("q", engine.Message{Body: []byte("order " + class)})...)
		f.clk.Advance(time.Millisecond)
	}
	for _, d := range f.receive("q", n) {
		var out api.FailureOutcome
		f.doJSON("POST", "/sluice/v1/failures", api.FailureReport{
			Queue: "q", ReceiptHandle: d.ReceiptHandle, ErrorClass: class, Terminal: true,
		}, http.StatusOK, &out)
		if !out.DeadLettered {
			f.t.Fatalf("not dead-lettered: %+v", out)
		}
	}
	return ids
}

// do sends a request; body may be nil, a string (sent as is) or a value
// encoded as JSON.
func (f *fixture) do(method, path string, body any) (int, []byte) {
	f.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, r)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, data
}

// doJSON sends a request, checks the status and decodes the answer into
// out (when not nil).
func (f *fixture) doJSON(method, path string, body any, status int, out any) {
	f.t.Helper()
	code, data := f.do(method, path, body)
	if code != status {
		f.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			f.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

// wantError checks an error response's status and code.
func (f *fixture) wantError(method, path string, body any, status int, code string) api.ErrorBody {
	f.t.Helper()
	got, data := f.do(method, path, body)
	var e api.ErrorBody
	if err := json.Unmarshal(data, &e); err != nil || got != status || e.Error.Code != code || e.Error.Message == "" {
		f.t.Fatalf("%s %s: %d %s; want %d with code %s", method, path, got, data, status, code)
	}
	return e
}

// stepUntil advances the fake clock until cond holds. Before each step it
// waits until cond holds or the engine's scheduler and the move task are
// parked on the clock (poll.AdvanceUntil), so each step finds the task
// done with the last one. cond may be called more than once per step.
func (f *fixture) stepUntil(what string, step time.Duration, cond func() bool) {
	f.t.Helper()
	poll.AdvanceUntil(f.t, f.clk, step, 2, what, cond)
}

func (f *fixture) task(id string) api.Task {
	f.t.Helper()
	var tk api.Task
	f.doJSON("GET", "/sluice/v1/tasks/"+id, nil, http.StatusOK, &tk)
	return tk
}
