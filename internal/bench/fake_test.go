package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSQS is an in-memory stand-in for the broker with just the four actions
// the load generator uses, so RunSQS can be tested without the server. It has
// no visibility timeout: received messages are gone until deleted.
type fakeSQS struct {
	mu       sync.Mutex
	queue    []string // bodies
	inflight map[string]string
	next     int
	arrived  chan struct{} // closed and replaced on every send
	deletes  int
}

func newFakeSQS() *fakeSQS {
	return &fakeSQS{inflight: map[string]string{}, arrived: make(chan struct{})}
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Content-Type") != "application/x-amz-json-1.0" {
		http.Error(w, "content type", http.StatusBadRequest)
		return
	}
	var req struct {
		QueueName       string
		QueueUrl        string
		WaitTimeSeconds int
		Entries         []struct{ Id, MessageBody, ReceiptHandle string }
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	type entry struct{ Id string }
	var resp any
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.CreateQueue":
		resp = map[string]string{"QueueUrl": "http://" + r.Host + "/000000000000/" + req.QueueName}
	case "AmazonSQS.SendMessageBatch":
		var ok []entry
		f.mu.Lock()
		for _, e := range req.Entries {
			f.queue = append(f.queue, e.MessageBody)
			ok = append(ok, entry{e.Id})
		}
		close(f.arrived)
		f.arrived = make(chan struct{})
		f.mu.Unlock()
		resp = map[string]any{"Successful": ok}
	case "AmazonSQS.ReceiveMessage":
		deadline := time.NewTimer(time.Duration(req.WaitTimeSeconds) * time.Second)
		defer deadline.Stop()
		type msg struct{ MessageId, ReceiptHandle, Body string }
		var msgs []msg
		for {
			f.mu.Lock()
			for len(f.queue) > 0 && len(msgs) < 10 {
				f.next++
				h := "h" + strconv.Itoa(f.next)
				f.inflight[h] = f.queue[0]
				msgs = append(msgs, msg{h, h, f.queue[0]})
				f.queue = f.queue[1:]
			}
			arrived := f.arrived
			f.mu.Unlock()
			if len(msgs) > 0 {
				break
			}
			select {
			case <-arrived:
				continue
			case <-deadline.C:
			case <-r.Context().Done():
			}
			break
		}
		if len(msgs) == 0 {
			resp = struct{}{}
		} else {
			resp = map[string]any{"Messages": msgs}
		}
	case "AmazonSQS.DeleteMessageBatch":
		var ok []entry
		f.mu.Lock()
		for _, e := range req.Entries {
			delete(f.inflight, e.ReceiptHandle)
			ok = append(ok, entry{e.Id})
			f.deletes++
		}
		f.mu.Unlock()
		resp = map[string]any{"Successful": ok}
	default:
		w.Header().Set("x-amzn-query-error", "AWS.SimpleQueueService.UnsupportedOperation;Sender")
		w.WriteHeader(http.StatusBadRequest)
		resp = map[string]string{"__type": "com.amazonaws.sqs#UnsupportedOperation", "message": "no"}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(resp)
}

func TestRunSQSAgainstFake(t *testing.T) {
	fake := newFakeSQS()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	// A message of an earlier run must be deleted and not counted.
	fake.queue = append(fake.queue, "left over from yesterday")

	o := DefaultSQSOptions()
	o.Endpoint, o.Messages, o.Size, o.Producers, o.Consumers = srv.URL, 1234, 200, 3, 2
	var out strings.Builder
	res, err := RunSQS(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if res.Sent != 1234 || res.Received != 1234 || res.Deleted != 1234 || res.Stale != 1 {
		t.Fatalf("sent/received/deleted/stale = %d/%d/%d/%d, want 1234/1234/1234/1", res.Sent, res.Received, res.Deleted, res.Stale)
	}
	if res.Latency.Count != 1234 || res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 {
		t.Fatalf("latency %+v", res.Latency)
	}
	if len(res.Errors) != 0 {
		t.Fatalf("errors %v", res.Errors)
	}
	if !strings.Contains(out.String(), "deleted") || res.Throughput <= 0 {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestRunSQSRateAndDuration(t *testing.T) {
	fake := newFakeSQS()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	o := DefaultSQSOptions()
	o.Endpoint, o.Duration, o.Rate, o.Batch, o.Size, o.JSON = srv.URL, 500*time.Millisecond, 2000, 5, 64, true
	var out strings.Builder
	res, err := RunSQS(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	// 2000 msg/s for 0.5 s is 1000 messages. The pacer must never exceed
	// that (plus one batch per producer for the phase spread); a loaded
	// machine may make it fall well short.
	if res.Sent < 250 || res.Sent > 1000+uint64(o.Producers*o.Batch) {
		t.Fatalf("sent %d at 2000 msg/s for 0.5 s", res.Sent)
	}
	if res.Deleted != res.Sent {
		t.Fatalf("deleted %d of %d", res.Deleted, res.Sent)
	}
	var back SQSResult
	if err := json.Unmarshal([]byte(out.String()), &back); err != nil || back.Sent != res.Sent {
		t.Fatalf("JSON output %q: %v", out.String(), err)
	}
}

func TestRunSQSReportsErrorCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-amzn-query-error", "AWS.SimpleQueueService.NonExistentQueue;Sender")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}`))
	}))
	defer srv.Close()
	o := DefaultSQSOptions()
	o.Endpoint = srv.URL
	_, err := RunSQS(context.Background(), o, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "AWS.SimpleQueueService.NonExistentQueue") {
		t.Fatalf("err = %v", err)
	}
}

// TestRunSQSSendOnly: with -consumers 0 the run sends its messages and
// leaves them in the queue (a backlog for another test to drain).
func TestRunSQSSendOnly(t *testing.T) {
	fake := newFakeSQS()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	o := DefaultSQSOptions()
	o.Endpoint, o.Messages, o.Size, o.Producers, o.Consumers = srv.URL, 500, 64, 2, 0
	var out strings.Builder
	res, err := RunSQS(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	left := len(fake.queue)
	fake.mu.Unlock()
	if res.Sent != 500 || res.Received != 0 || res.Deleted != 0 || left != 500 {
		t.Fatalf("sent/received/deleted = %d/%d/%d, %d left in the queue; want 500/0/0, 500 left", res.Sent, res.Received, res.Deleted, left)
	}
	if res.SendRate <= 0 {
		t.Fatalf("send rate %v", res.SendRate)
	}
}
