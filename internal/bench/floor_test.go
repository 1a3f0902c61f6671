package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestTransportFloorServer is a measuring hook, not a test. With
// SLUICE_FLOOR_SERVER=DIR it serves, until SIGTERM or SIGINT, the four SQS
// actions `sluice bench sqs` uses over net/http, doing as little as a
// server can and still answer them: the request body is read into a
// reused buffer, scanned for its entries' ids, bodies and receipt handles
// (no JSON decoder, no MD5, no store, no fsync), bodies are kept in memory
// and received at most once, and each answer is written as one buffer of
// the size a real one has. Its ready file is DIR/ready.json ({"sqs":
// "host:port", "pid": N}). The server CPU that `sluice bench sqs -pid`
// reports for it is what net/http and the bytes themselves cost at that
// load: the floor under any server on net/http, Sluice's included
// (docs/benchmarks.md, "The transport's floor").
func TestTransportFloorServer(t *testing.T) {
	dir := os.Getenv("SLUICE_FLOOR_SERVER")
	if dir == "" {
		t.Skip("set SLUICE_FLOOR_SERVER=DIR to run the transport-floor server")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := json.Marshal(map[string]any{"sqs": ln.Addr().String(), "pid": os.Getpid()})
	if err := os.WriteFile(filepath.Join(dir, "ready.json"), ready, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &floorSQS{arrived: make(chan struct{})}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// floorSQS is TestTransportFloorServer's handler.
type floorSQS struct {
	bufs    sync.Pool // *[]byte: request bodies and answers
	mu      sync.Mutex
	queue   [][]byte // bodies not yet received
	next    uint64
	arrived chan struct{} // closed and replaced on every send
}

// md5Placeholder stands for the 32 hex digits of an MD5 in an answer, so
// that answers are as long as a real server's.
const md5Placeholder = "00000000000000000000000000000000"

func (f *floorSQS) buf() *[]byte {
	if p, ok := f.bufs.Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, 0, 16<<10)
	return &b
}

func (f *floorSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in := f.buf()
	defer f.bufs.Put(in)
	body := (*in)[:0]
	for {
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)]
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	*in = body
	out := f.buf()
	defer f.bufs.Put(out)
	resp := (*out)[:0]
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.CreateQueue", "AmazonSQS.GetQueueUrl":
		name := fieldValues(body, `"QueueName":"`)
		resp = append(resp, `{"QueueUrl":"http://`...)
		resp = append(resp, r.Host...)
		resp = append(resp, "/000000000000/"...)
		if len(name) > 0 {
			resp = append(resp, name[0]...)
		}
		resp = append(resp, `"}`...)
	case "AmazonSQS.PurgeQueue":
		f.mu.Lock()
		f.queue = nil
		f.mu.Unlock()
		resp = append(resp, "{}"...)
	case "AmazonSQS.SendMessageBatch":
		ids, bodies := fieldValues(body, `"Id":"`), fieldValues(body, `"MessageBody":"`)
		f.mu.Lock()
		for _, b := range bodies {
			f.queue = append(f.queue, append([]byte(nil), b...))
		}
		close(f.arrived)
		f.arrived = make(chan struct{})
		start := f.next
		f.next += uint64(len(ids))
		f.mu.Unlock()
		resp = append(resp, `{"Successful":[`...)
		for i, id := range ids {
			if i > 0 {
				resp = append(resp, ',')
			}
			resp = append(resp, `{"Id":"`...)
			resp = append(resp, id...)
			resp = append(resp, `","MessageId":"`...)
			resp = appendID(resp, start+uint64(i))
			resp = append(resp, `","MD5OfMessageBody":"`+md5Placeholder+`"}`...)
		}
		resp = append(resp, "]}"...)
	case "AmazonSQS.ReceiveMessage":
		wait := time.Duration(0)
		if v := fieldNumber(body, `"WaitTimeSeconds":`); v > 0 {
			wait = time.Duration(v) * time.Second
		}
		var msgs [][]byte
		var first uint64
		deadline := time.Now().Add(wait)
		for {
			f.mu.Lock()
			k := min(len(f.queue), 10)
			msgs, f.queue = f.queue[:k:k], f.queue[k:]
			first = f.next
			f.next += uint64(k)
			arrived := f.arrived
			f.mu.Unlock()
			left := time.Until(deadline)
			if len(msgs) > 0 || left <= 0 {
				break
			}
			timer := time.NewTimer(left)
			select {
			case <-arrived:
			case <-timer.C:
			case <-r.Context().Done():
			}
			timer.Stop()
			if r.Context().Err() != nil {
				break
			}
		}
		resp = append(resp, `{"Messages":[`...)
		for i, m := range msgs {
			if i > 0 {
				resp = append(resp, ',')
			}
			resp = append(resp, `{"MessageId":"`...)
			resp = appendID(resp, first+uint64(i))
			resp = append(resp, `","ReceiptHandle":"`...)
			for range 4 { // a real handle is about 150 bytes
				resp = appendID(resp, first+uint64(i))
			}
			resp = append(resp, `","MD5OfBody":"`+md5Placeholder+`","Body":"`...)
			resp = append(resp, m...)
			resp = append(resp, `"}`...)
		}
		resp = append(resp, "]}"...)
	case "AmazonSQS.DeleteMessageBatch":
		resp = append(resp, `{"Successful":[`...)
		for i, id := range fieldValues(body, `"Id":"`) {
			if i > 0 {
				resp = append(resp, ',')
			}
			resp = append(resp, `{"Id":"`...)
			resp = append(resp, id...)
			resp = append(resp, `"}`...)
		}
		resp = append(resp, "]}"...)
	default:
		w.Header().Set("x-amzn-query-error", "AWS.SimpleQueueService.UnsupportedOperation;Sender")
		w.WriteHeader(http.StatusBadRequest)
		resp = append(resp, `{"__type":"com.amazonaws.sqs#UnsupportedOperation","message":"not in the floor server"}`...)
	}
	*out = resp
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
	_, _ = w.Write(resp) // a broken connection ends the request anyway
}

// fieldValues returns the string values that follow each occurrence of
// prefix (a JSON key, colon and opening quote) in body, up to their
// closing quote. The bench's values hold no escapes.
func fieldValues(body []byte, prefix string) [][]byte {
	var out [][]byte
	for {
		i := bytes.Index(body, []byte(prefix))
		if i < 0 {
			return out
		}
		body = body[i+len(prefix):]
		j := bytes.IndexByte(body, '"')
		if j < 0 {
			return out
		}
		out = append(out, body[:j])
		body = body[j+1:]
	}
}

// fieldNumber returns the non-negative integer after prefix in body, 0
// when there is none.
func fieldNumber(body []byte, prefix string) int {
	i := bytes.Index(body, []byte(prefix))
	if i < 0 {
		return 0
	}
	n := 0
	for _, c := range body[i+len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// appendID appends a message id of 36 characters (a UUID's length) for n.
func appendID(b []byte, n uint64) []byte {
	var x [16]byte
	putHex(x[:], n)
	b = append(b, "00000000-0000-4000-8000-"...)
	return append(b, x[4:]...)
}
