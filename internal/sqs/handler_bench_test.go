package sqs_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/httpbody"
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
	b.Run("json", func(b *testing.B) { benchHotCycle(b, false) })
	b.Run("query", func(b *testing.B) { benchHotCycle(b, true) })
}

func benchHotCycle(b *testing.B, query bool) {
	eng, err := engine.Open(engine.Options{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	if _, _, err := eng.CreateQueue("bench", engine.DefaultQueueConfig(), nil); err != nil {
		b.Fatal(err)
	}
	// A body budget, as the server always gives the handler.
	h := sluicesqs.New(eng, sluicesqs.Options{BodyBudget: httpbody.NewBudget(0, 0, nil)})
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

	marker, end := []byte(`"ReceiptHandle":"`), []byte(`"`)
	delHead, delEntry, delTail := `{"QueueUrl":"`+qurl+`","Entries":[`, `{"Id":"%d","ReceiptHandle":"%s"}`, "]}"
	if query {
		form := url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {qurl}}
		for i := 1; i <= 10; i++ {
			p := fmt.Sprintf("SendMessageBatchRequestEntry.%d.", i)
			form.Set(p+"Id", strconv.Itoa(i))
			form.Set(p+"MessageBody", strings.Repeat("x", 1024))
		}
		sendBody = []byte(form.Encode())
		recvBody = []byte("Action=ReceiveMessage&QueueUrl=" + url.QueryEscape(qurl) + "&MaxNumberOfMessages=10&WaitTimeSeconds=0")
		marker, end = []byte("<ReceiptHandle>"), []byte("<")
		delHead, delEntry, delTail = "Action=DeleteMessageBatch&QueueUrl="+url.QueryEscape(qurl), "&DeleteMessageBatchRequestEntry.%[1]d.Id=%[1]d&DeleteMessageBatchRequestEntry.%[1]d.ReceiptHandle=%[2]s", ""
	}

	w := &discardWriter{h: http.Header{}}
	do := func(action string, body []byte) []byte {
		r, _ := http.NewRequest("POST", "http://127.0.0.1:9324/", bytes.NewReader(body))
		if query {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			r.Header.Set("Content-Type", "application/x-amz-json-1.0")
			r.Header.Set("X-Amz-Target", "AmazonSQS."+action)
		}
		clear(w.h)
		w.body.Reset()
		h.ServeHTTP(w, r)
		if w.code != 200 {
			b.Fatalf("%s: %d %s", action, w.code, w.body.Bytes())
		}
		return w.body.Bytes()
	}
	var del []byte
	b.ReportAllocs()
	b.SetBytes(10 * 1024)
	for b.Loop() {
		do("SendMessageBatch", sendBody)
		resp := do("ReceiveMessage", recvBody)
		del = append(del[:0], delHead...)
		for n := 0; ; n++ {
			i := bytes.Index(resp, marker)
			if i < 0 {
				break
			}
			resp = resp[i+len(marker):]
			j := bytes.Index(resp, end)
			if n > 0 && !query {
				del = append(del, ',')
			}
			h := string(resp[:j])
			if query {
				h = url.QueryEscape(h)
			}
			del = fmt.Appendf(del, delEntry, n+1, h)
		}
		del = append(del, delTail...)
		do("DeleteMessageBatch", del)
	}
}
