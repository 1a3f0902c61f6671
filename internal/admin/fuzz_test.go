package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// Fuzz properties, for every decoder: no panic, never a 5xx for bad input,
// and every error is the JSON error body.

// fuzzHandler is a handler on a real engine with a fake clock, queues q,
// dlq (q's dead-letter queue) and f.fifo, one dead-lettered message, and
// the receipt handle of one message in flight.
func fuzzHandler(f *testing.F) (*Handler, string) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Clock: clk})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { eng.Close() })
	cfg := engine.DefaultQueueConfig()
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	_, _, err = eng.CreateQueue("dlq", cfg, nil)
	must(err)
	cfg.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 3}
	_, _, err = eng.CreateQueue("q", cfg, nil)
	must(err)
	fifo := engine.DefaultQueueConfig()
	fifo.FIFO = true
	_, _, err = eng.CreateQueue("f.fifo", fifo, nil)
	must(err)
	_, err = eng.Send("q", []engine.Message{{Body: []byte("a")}, {Body: []byte("b")}})
	must(err)
	d, err := eng.Receive(f.Context(), "q", engine.ReceiveRequest{Max: 2, WaitSet: true})
	must(err)
	_, err = eng.ReportFailure("q", d[0].ReceiptHandle, engine.Failure{ErrorClass: "KeyError", Terminal: true})
	must(err)
	return New(eng, Options{Clock: clk}), d[1].ReceiptHandle
}

func checkResponse(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d for bad input: %s", rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var e api.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("status %d without a JSON error: %q", rec.Code, rec.Body)
		}
	}
}

func serve(h *Handler, method, target, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/", strings.NewReader(body))
	path, query, _ := strings.Cut(target, "?")
	req.URL.Path, req.URL.RawQuery = path, query
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func FuzzFailureReport(f *testing.F) {
	h, handle := fuzzHandler(f)
	f.Add(`{"queue":"q","receiptHandle":"` + handle + `","errorClass":"Timeout","retryAfterSeconds":5}`)
	f.Add(`{"queueUrl":"http://127.0.0.1:9324/000000000000/q","receiptHandle":"` + handle + `","terminal":true,"trace":"x"}`)
	f.Add(`{"queue":"q","receiptHandle":"x","retryAfterSeconds":1e308}`)
	f.Add(`{"queueUrl":"::::","receiptHandle":"x"}`)
	f.Add(`{"queue":"q","receiptHandle":"AAAA","retryAfterSeconds":-0}`)
	f.Add(`[]`)
	f.Add(`{"queue":"q"} trailing`)
	f.Fuzz(func(t *testing.T, body string) {
		checkResponse(t, serve(h, "POST", "/sluice/v1/failures", body))
	})
}

func FuzzFilterQuery(f *testing.F) {
	h, _ := fuzzHandler(f)
	f.Add("errorClass=KeyError&limit=10")
	f.Add("sentAfter=2026-01-01T00:00:00Z&sentBefore=2027-01-01T00:00:00.5%2B02:00")
	f.Add("attribute=a%3Db%3Dc&id=00000000-0000-4000-8000-000000000000")
	f.Add("cursor=18446744073709551615&limit=1000")
	f.Add("reason=terminal&sourceQueue=q&id=&id=x")
	f.Add("%zz=1&;;")
	f.Fuzz(func(t *testing.T, query string) {
		for _, path := range []string{"/sluice/v1/queues/dlq/messages", "/sluice/v1/queues/dlq/export"} {
			checkResponse(t, serve(h, "GET", path+"?"+query, ""))
		}
	})
}

// FuzzFilterBody covers the JSON filters of delete and redrive (dry run,
// so that nothing moves).
func FuzzFilterBody(f *testing.F) {
	h, _ := fuzzHandler(f)
	f.Add(`{"errorClass":"Nope","ids":["00000000-0000-4000-8000-000000000000"]}`)
	f.Add(`{"sentAfter":"2026-01-01T00:00:00Z","attribute":{"name":""}}`)
	f.Add(`{"reason":"terminal","sentBefore":"not a time"}`)
	f.Fuzz(func(t *testing.T, filter string) {
		checkResponse(t, serve(h, "POST", "/sluice/v1/queues/dlq/redrive", `{"dryRun":true,"filter":`+filter+`}`))
		checkResponse(t, serve(h, "POST", "/sluice/v1/queues/dlq/messages:delete", `{"filter":`+filter+`}`))
	})
}

func FuzzImportLine(f *testing.F) {
	h, _ := fuzzHandler(f)
	f.Add(`{"id":"0e4a4a5e-27f4-4c6e-9d0f-5d3c1a2b3c4d","body":"hello","receiveCount":3,"deadLetter":{"sourceQueue":"q","reason":"terminal","attempts":3}}`)
	f.Add(`{"id":"0E4A4A5E-27F4-4C6E-9D0F-5D3C1A2B3C4D","body":"/w==","bodyEncoding":"base64","groupId":"g"}`)
	f.Add(`{"id":"0e4a4a5e-27f4-4c6e-9d0f-5d3c1a2b3c4d","body":"x","attributes":[{"name":"a","dataType":"Binary.x","binaryValue":"AQI="}]}`)
	f.Add(`{"id":"0e4a4a5e-27f4-4c6e-9d0f-5d3c1a2b3c4d","body":"x","receiveCount":-1}`)
	f.Add(`{"id":"0e4a4a5e-27f4-4c6e-9d0f-5d3c1a2b3c4d","body":"x","sentAt":"0001-01-01T00:00:00Z","lastFailure":{"trace":"` + strings.Repeat("é", 100) + `"}}`)
	f.Add(`{"id":"0e4a4a5e-27f4-4c6e-9d0f-5d3c1a2b3c4d","body":"x","priority":7,"envelope":"AQABeAEBawAAAA=="}`)
	f.Fuzz(func(t *testing.T, line string) {
		for _, q := range []string{"dlq", "f.fifo"} {
			rec := serve(h, "POST", "/sluice/v1/queues/"+q+"/import", line)
			checkResponse(t, rec)
			if rec.Code == http.StatusOK {
				var res api.ImportResult
				if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Imported > strings.Count(line, "\n")+1 {
					t.Fatalf("import answer %q", rec.Body)
				}
			}
		}
	})
}
