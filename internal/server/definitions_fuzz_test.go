package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDefinitionsImport posts arbitrary documents to the import endpoint of
// a memory-store broker: whatever the body, the answer is 200 or a 4xx
// with a JSON error, never a 5xx or a panic.
func FuzzDefinitionsImport(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"queues":[{"name":"a"},{"name":"b","dead_letter_queue":"a","max_receive_count":2,"retry_policy":{"strategy":"full-jitter","baseSeconds":1,"capSeconds":5}}]}`,
		`{"queues":[{"name":"f.fifo","attributes":{"FifoQueue":"true"}}]}`,
		`{"exchanges":[{"name":"x","type":"topic","durable":true,"arguments":{"alternate-exchange":"y"}}],"amqp_queues":[{"name":"q","durable":true,"arguments":{"x-max-length":10,"x-dead-letter-exchange":"x","nested":{"a":[1,2.5,"s",null,true]}}}],"bindings":[{"source":"x","destination":"q","routing_key":"a.#"}]}`,
		`{"bindings":[{"source":"amq.topic","destination":"nope","destination_type":"exchange"}]}`,
		`{"queues":[{"name":""}]}`,
		`{"amqp_queues":[{"name":"q","vhost":"/nope"}]}`,
		`[`, `null`, `{"unknown":1}`,
	} {
		f.Add([]byte(seed))
	}
	o := DefaultOptions()
	o.Store = "memory"
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	s, err := New(o, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	h := s.definitionsHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/sluice/v1/definitions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s → %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK && !bytes.Contains(rec.Body.Bytes(), []byte(`"error"`)) {
			t.Fatalf("%s → %d without a JSON error: %s", body, rec.Code, rec.Body)
		}
	})
}
