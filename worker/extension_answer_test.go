package worker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
)

// TestPostFailureAnswers: how the worker reads each kind of answer to a
// failure report. Only a JSON 200 with a deadLettered field (true or
// false) is the extension's outcome; a foreign JSON 200 or a null
// deadLettered says the endpoint has no extension.
func TestPostFailureAnswers(t *testing.T) {
	at := time.Date(2026, 11, 24, 21, 30, 0, 5, time.UTC)
	for _, c := range []struct {
		name    string
		status  int
		body    string
		want    Outcome
		present bool
		err     error
		anyErr  bool
	}{
		{name: "dead-lettered", status: 200, body: `{"deadLettered":true,"target":"orders-dlq"}`,
			want: Outcome{DeadLettered: true, Target: "orders-dlq", Reported: true}, present: true},
		{name: "retried", status: 200, body: `{"deadLettered":false,"visibleAt":"2026-11-24T21:30:00.000000005Z"}`,
			want: Outcome{VisibleAt: at, Reported: true}, present: true},
		{name: "foreign 200", status: 200, body: `{"ok":true}`},
		{name: "null deadLettered", status: 200, body: `{"deadLettered":null}`},
		{name: "no dead-letter queue", status: 400, body: `{"error":{"code":"NoDeadLetterQueue","message":"m"}}`,
			present: true, err: ErrNoDeadLetterQueue},
		{name: "lease lost", status: 400, body: `{"error":{"code":"ReceiptHandleInvalid","message":"m"}}`,
			present: true, err: ErrLeaseLost},
		{name: "other extension error", status: 403, body: `{"error":{"code":"AccessDenied","message":"m"}}`,
			present: true, anyErr: true},
		{name: "not found", status: 404, body: `{"error":{"code":"NotFound","message":"m"}}`},
		{name: "bad gateway", status: 502, body: `{}`, anyErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			out, present, err := postFailure(context.Background(), srv.Client(), srv.URL, api.FailureReport{Queue: "orders", ReceiptHandle: "r"})
			if out != c.want || present != c.present {
				t.Errorf("got %+v present=%v, want %+v present=%v", out, present, c.want, c.present)
			}
			switch {
			case c.err != nil:
				if !errors.Is(err, c.err) {
					t.Errorf("err = %v, want %v", err, c.err)
				}
			case c.anyErr:
				if err == nil {
					t.Error("err = nil, want an error")
				}
			case err != nil:
				t.Errorf("err = %v, want nil", err)
			}
		})
	}
}
