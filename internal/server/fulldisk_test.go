package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/cockroachdb/pebble/v2/vfs"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// faultOptions are a server's options with its store on the real disk
// through a FaultFS that faults only the WAL and the space probe (a
// MANIFEST fault would make pebble stop the test process).
func faultOptions(t *testing.T, amqpListen string) (Options, *pebblestore.FaultFS) {
	t.Helper()
	fs := pebblestore.NewFaultFS(vfs.Default)
	fs.OnlyWAL(true)
	o := DefaultOptions()
	o.DataDir, o.StoreFS = t.TempDir(), fs
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", amqpListen
	return o, fs
}

// TestSuperviseRestartsAfterFullDisk (docs/reliability.md, gap 1b): a
// write that finds the disk full fails the store; the server refuses
// sends and answers /health 503 while the disk stays full; once space is
// back, Supervise restarts it in place on the same addresses: an AMQP
// connection of the failed server's is closed with 320, a new one to the
// same address publishes with confirms, an SQS client's send is
// acknowledged, and every send acknowledged before the fault is there.
func TestSuperviseRestartsAfterFullDisk(t *testing.T) {
	o, fs := faultOptions(t, "127.0.0.1:0")
	var cur atomic.Pointer[Server]
	starts := atomic.Int32{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Supervise(ctx, o, nil, func(s *Server) { cur.Store(s); starts.Add(1) })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Supervise: %v", err)
		}
	}()
	// started is called once New has bound the listeners: a request
	// waits in the backlog until Run accepts it.
	poll.CheckFor(t, 10*time.Second, poll.True("the server started", func() bool { return cur.Load() != nil }))
	first := cur.Load()
	addr, amqpAddr := first.SQSAddr(), first.AMQPAddr()
	health := func() int { c, _ := rawRequest(t, http.MethodGet, "http://"+addr+"/health", "", nil); return c }
	poll.CheckFor(t, 10*time.Second, poll.True("/health 200", func() bool { return health() == http.StatusOK }))

	eng := first.Engine()
	if _, _, err := eng.CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	const before = 50
	for i := range before {
		if _, err := eng.Send("q", []engine.Message{{Body: []byte(fmt.Sprint("m", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))

	fs.FailWrites(syscall.ENOSPC)
	if _, err := eng.Send("q", []engine.Message{{Body: []byte("on a full disk")}}); err == nil {
		t.Fatal("a send on a full disk was acknowledged")
	}
	if h := health(); h != http.StatusServiceUnavailable {
		t.Fatalf("/health on a full disk: %d, want 503", h)
	}

	fs.Heal()
	poll.CheckFor(t, 30*time.Second, poll.True("a second server", func() bool { return starts.Load() == 2 }))
	s := cur.Load()
	if s.SQSAddr() != addr || s.AMQPAddr() != amqpAddr {
		t.Fatalf("restarted on %s and %s, want the same addresses %s and %s", s.SQSAddr(), s.AMQPAddr(), addr, amqpAddr)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced {
			t.Fatalf("the failed server's AMQP connection ended with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the failed server's AMQP connection was not closed by the restart")
	}
	poll.CheckFor(t, 10*time.Second, poll.True("/health 200 after the restart", func() bool { return health() == http.StatusOK }))

	// Real clients on the same addresses.
	if _, err := client(addr).SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String("http://" + addr + "/000000000000/q"), MessageBody: aws.String("after")}); err != nil {
		t.Fatalf("SQS send after space returned: %v", err)
	}
	conn2, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatalf("AMQP dial after the restart: %v", err)
	}
	defer conn2.Close()
	ch, err := conn2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirm := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("after over amqp"), DeliveryMode: 2}); err != nil {
		t.Fatal(err)
	}
	if c := <-confirm; !c.Ack {
		t.Fatal("AMQP publish after the restart not confirmed")
	}

	eng = s.Engine()
	got := map[string]bool{}
	for len(got) < before+2 {
		ds, err := eng.Receive(context.Background(), "q", engine.ReceiveRequest{Max: 10, WaitSet: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			got[string(d.Body)] = true
		}
	}
	for i := range before {
		if !got[fmt.Sprint("m", i)] {
			t.Fatalf("acknowledged message m%d lost across the in-place restart (got %d)", i, len(got))
		}
	}
	if got["on a full disk"] {
		t.Log("the refused send's message was stored after all (allowed: it was never acknowledged)")
	}
	for _, b := range []string{"after", "after over amqp"} {
		if !got[b] {
			t.Fatalf("%q, acknowledged after the restart, is missing", b)
		}
	}
}

// TestSuperviseStaysDownAfterOtherFailures: a failed sync is not a full
// disk; Supervise does not restart the server however long it waits.
func TestSuperviseStaysDownAfterOtherFailures(t *testing.T) {
	o, fs := faultOptions(t, "")
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Engine().CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	fs.FailSyncs(syscall.ENOSPC)
	if _, err := s.Engine().Send("q", []engine.Message{{Body: []byte("x")}}); err == nil {
		t.Fatal("a send whose sync failed was acknowledged")
	}
	fs.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), 3*diskPollInterval)
	defer cancel()
	if s.AwaitSpaceAfterFullDisk(ctx) {
		t.Fatal("a failed sync was taken for a full disk to restart after")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal(ctx.Err())
	}
}

// TestHealthSeesAStoreFailureNoRequestMet: the store can fail in work of
// its own (pebble flushing a memtable onto a full disk) while no request
// writes; /health, /ready and sluice_store_failed say so at once, not at
// the next write.
func TestHealthSeesAStoreFailureNoRequestMet(t *testing.T) {
	o, fs := faultOptions(t, "")
	s := startWith(t, func(opts *Options) { *opts = o })
	get := func(path string) (int, string) {
		return rawRequest(t, http.MethodGet, "http://"+s.SQSAddr()+path, "", nil)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("/health 200", func() bool { c, _ := get("/health"); return c == http.StatusOK }))

	// A write of the store's own, as a background flush is: the engine's
	// writes have not met the failure.
	fs.FailWrites(syscall.ENOSPC)
	var b store.Batch
	b.Set([]byte("background"), []byte("x"))
	if p, err := s.st.Write(&b, true); err == nil {
		_ = p.Wait()
	}
	for _, path := range []string{"/health", "/ready"} {
		if c, body := get(path); c != http.StatusServiceUnavailable {
			t.Errorf("%s after the store failed: %d %s, want 503", path, c, body)
		}
	}
	if _, body := get("/metrics"); !strings.Contains(body, "sluice_store_failed 1") {
		t.Errorf("/metrics after the store failed does not say sluice_store_failed 1")
	}
}
