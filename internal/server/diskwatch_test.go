package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

// TestRestartAtDiskWatermark (issue #10, hole 9): a broker stopped with its
// disk at the watermark starts again, and from its first request refuses
// what the watermark refuses (sends, imports, new move tasks) while
// consumers drain: receives and deletes work. When space returns, sends
// are accepted with no restart.
func TestRestartAtDiskWatermark(t *testing.T) {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	o.MinFreeDisk = 1 << 30
	var free atomic.Uint64
	free.Store(10 << 30)
	o.freeBytes = func(string) (uint64, error) { return free.Load(), nil }

	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := s.Engine()
	for _, name := range []string{"q", "dlq"} {
		if _, _, err := eng.CreateQueue(name, engine.DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.UpdateQueue("q", func(c *engine.QueueConfig) error {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 3}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Send("q", []engine.Message{{Body: []byte("backlog")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Send("dlq", []engine.Message{{Body: []byte("dead")}}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	free.Store(100 << 20) // the disk filled up while the broker was down
	s, err = New(o, nil, nil)
	if err != nil {
		t.Fatalf("restart at the watermark: %v", err)
	}
	eng = s.Engine()
	if _, err := eng.Send("q", []engine.Message{{Body: []byte("new")}}); !errors.Is(err, engine.ErrDiskFull) {
		t.Fatalf("first send after a restart at the watermark: %v, want ErrDiskFull", err)
	}
	if _, err := eng.StartMoveTask(engine.MoveTaskSpec{Source: "dlq"}); !errors.Is(err, engine.ErrDiskFull) {
		t.Fatalf("move task at the watermark: %v, want ErrDiskFull", err)
	}
	d, err := eng.Receive(context.Background(), "q", engine.ReceiveRequest{Max: 10, WaitSet: true})
	if err != nil || len(d) != 1 {
		t.Fatalf("receive at the watermark: %v %v", d, err)
	}
	if errs, err := eng.Delete("q", []string{d[0].ReceiptHandle}); err != nil || errs[0] != nil {
		t.Fatalf("delete at the watermark: %v %v", err, errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	free.Store(10 << 30)
	poll.CheckFor(t, 20*time.Second, func() error {
		_, err := eng.Send("q", []engine.Message{{Body: []byte("new")}})
		if err != nil && !errors.Is(err, engine.ErrDiskFull) {
			t.Fatalf("send after space returned: %v", err)
		}
		return err // ErrDiskFull until the watcher sees the space
	})
}

// TestDropCountersExported: the counts of dropped records and refused AMQP
// publishes are on /metrics.
func TestDropCountersExported(t *testing.T) {
	s := startWith(t, func(*Options) {})
	resp, err := http.Get("http://" + s.SQSAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"sluice_recovery_dropped_records_total 0", "sluice_amqp_refused_publishes_total 0"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}
