package sqs_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// discardWriter is a minimal http.ResponseWriter that keeps the last body.
type discardWriter struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { return w.body.Write(b) }

// BenchmarkHotCycle measures the SQS layer (and the engine on memstore, no
// disk) for what the bench tool does per 10 messages: one SendMessageBatch
// of ten 1 KiB bodies, one ReceiveMessage of up to ten, one
// DeleteMessageBatch. One op is the three requests.
func BenchmarkHotCycle(b *testing.B) {
	eng, err := engine.Open(engine.Options{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	if _, _, err := eng.CreateQueue("bench", engine.DefaultQueueConfig(), nil); err != nil {
		b.Fatal(err)
	}
	h := sluicesqs.New(eng, sluicesqs.Options{})
	const qurl = "http://127.0.0.1:9324/000000000000/bench"

	var send strings.Builder
	send.WriteString(`{"QueueUrl":"` + qurl + `","Entries":[`)
	for i := 0; i < 10; i++ {
		if i > 0 {
			send.WriteByte(',')
		}
		fmt.Fprintf(&send, `{"Id":"%d","MessageBody":"%s"}`, i, strings.Repeat("x", 1024))
	}
	send.WriteString(`]}`)
	sendBody := []byte(send.String())
	recvBody := []byte(`{"QueueUrl":"` + qurl + `","MaxNumberOfMessages":10,"WaitTimeSeconds":0}`)

	w := &discardWriter{h: http.Header{}}
	do := func(action string, body []byte) []byte {
		r, _ := http.NewRequest("POST", "http://127.0.0.1:9324/", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/x-amz-json-1.0")
		r.Header.Set("X-Amz-Target", "AmazonSQS."+action)
		clear(w.h)
		w.body.Reset()
		h.ServeHTTP(w, r)
		if w.code != 200 {
			b.Fatalf("%s: %d %s", action, w.code, w.body.Bytes())
		}
		return w.body.Bytes()
	}
	var del []byte
	marker := []byte(`"ReceiptHandle":"`)
	b.ReportAllocs()
	b.SetBytes(10 * 1024)
	for b.Loop() {
		do("SendMessageBatch", sendBody)
		resp := do("ReceiveMessage", recvBody)
		del = append(del[:0], `{"QueueUrl":"`+qurl+`","Entries":[`...)
		for n := 0; ; n++ {
			i := bytes.Index(resp, marker)
			if i < 0 {
				break
			}
			resp = resp[i+len(marker):]
			j := bytes.IndexByte(resp, '"')
			if n > 0 {
				del = append(del, ',')
			}
			del = fmt.Appendf(del, `{"Id":"%d","ReceiptHandle":"%s"}`, n, resp[:j])
		}
		del = append(del, "]}"...)
		do("DeleteMessageBatch", del)
	}
}
