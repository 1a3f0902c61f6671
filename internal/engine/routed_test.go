package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// recordingRouter is routeTo that also keeps what it was asked.
type recordingRouter struct {
	routeTo
	mu    sync.Mutex
	asked []DeadLetter
	from  []string
}

func (r *recordingRouter) RouteDeadLetter(source string, dl *DeadLetter) ([]string, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, *dl)
	r.from = append(r.from, source)
	return r.names, r.env
}

// TestRoutedElsewhere: a dead letter of a Routed queue on an engine that
// routes elsewhere (a cluster shard other than shard 0) leaves its source
// as a route transfer, not through its own router; the routing engine
// (shard 0) imports it with its router's targets and envelope: a copy into
// its own queue, a transfer to a queue held on a third engine; a retried
// import adds nothing; and the message ends in both targets, dropped
// nowhere. Only queues marked RoutedElsewhere are routed so.
func TestRoutedElsewhere(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := &fixture{t: t, st: newTestStore(t), clk: clk}
	src.opts = func(o *Options) {
		o.RouteElsewhere = true
		o.DeadLetterRouter = routeTo{names: []string{"wrong"}} // never asked
	}
	src.open()
	src.create("wrong", nil)
	router := &recordingRouter{routeTo: routeTo{names: []string{"here", "dlq", "nowhere"}, env: []byte("x-death")}}
	zero := &fixture{t: t, st: newTestStore(t), clk: clk}
	zero.opts = func(o *Options) {
		o.DeadLetterRouter = router
		o.QueueHeldElsewhere = func(name string) bool { return name == "dlq" }
	}
	zero.open()
	zero.create("here", nil)
	dst := &fixture{t: t, st: newTestStore(t), clk: clk}
	dst.open()
	dst.create("dlq", nil)

	src.create("amqp", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Routed: true, RoutedElsewhere: true} })
	// A Routed queue not marked as routed elsewhere (an AMQP queue
	// without a dead-letter exchange, with a delivery limit) is routed
	// by this engine's router, as on a single node.
	src.create("local", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Routed: true} })
	src.restart() // the mark is in the queue's record
	src.send("local", body("local"))
	if d := src.recv("local", 1, 30*time.Second); len(d) != 1 {
		t.Fatal("no message")
	} else if _, err := src.e.Reject("local", []string{d[0].ReceiptHandle}, Failure{}); err != nil {
		t.Fatal(err)
	}
	if got := src.recv("wrong", 10, -1); len(got) != 1 || src.e.TransfersPending() != 0 {
		t.Fatalf("a queue without the mark: its own router's target holds %d, %d transfers", len(got), src.e.TransfersPending())
	}
	sent := src.send("amqp", Message{Body: []byte("rejected"), Envelope: []byte("original")})
	d := src.recv("amqp", 1, 30*time.Second)
	if _, err := src.e.Reject("amqp", []string{d[0].ReceiptHandle}, Failure{}); err != nil {
		t.Fatal(err)
	}
	if got := src.recv("wrong", 10, -1); len(got) != 0 {
		t.Fatalf("the source's own router was used: %+v", got)
	}
	if src.e.TransfersPending() != 1 {
		t.Fatalf("pending transfers %d, want 1", src.e.TransfersPending())
	}
	info, _ := src.e.GetQueue("amqp")
	if info.Visible+info.InFlight != 0 || info.Dropped != 0 {
		t.Fatalf("source %+v", info)
	}
	// The route transfer survives a restart of its source.
	src.restart()
	ts, err := src.e.Transfers(nil, 10, 1<<20)
	if err != nil || len(ts) != 1 || !ts[0].Route || ts[0].Target != "" || ts[0].Source != "amqp" || ts[0].Reason != ReasonTerminal {
		t.Fatalf("route transfers %+v %v", ts, err)
	}
	// Imported twice (a mover that died before ending it): once.
	for range 2 {
		if nowhere, err := zero.e.ImportRouted(ts); err != nil || len(nowhere) != 0 {
			t.Fatal(nowhere, err)
		}
	}
	if err := src.e.EndTransfers([]TransferID{ts[0].ID}); err != nil {
		t.Fatal(err)
	}
	if len(router.asked) != 1 || router.from[0] != "amqp" || string(router.asked[0].Envelope) != "original" ||
		router.asked[0].ReceiveCount != 1 || router.asked[0].MessageID != sent[0].MessageID || router.asked[0].Reason != ReasonTerminal {
		t.Fatalf("the router was asked %+v from %v", router.asked, router.from)
	}
	here := zero.recv("here", 10, -1)
	if len(here) != 1 || string(here[0].Body) != "rejected" || string(here[0].Envelope) != "x-death" ||
		here[0].DeadLetter == nil || here[0].DeadLetter.SourceQueue != "amqp" {
		t.Fatalf("the routing engine's target holds %+v", here)
	}
	if zero.e.TransfersPending() != 1 {
		t.Fatalf("routing engine's pending transfers %d, want 1 (for dlq)", zero.e.TransfersPending())
	}
	zero.restart()
	if moveAll(t, zero.e, dst.e) != 1 {
		t.Fatal("want the transfer to dlq")
	}
	got := dst.recv("dlq", 10, -1)
	if len(got) != 1 || string(got[0].Body) != "rejected" || string(got[0].Envelope) != "x-death" {
		t.Fatalf("dlq holds %+v", got)
	}
}

// TestRoutedNowhereIsDropped: a route transfer its router routes nowhere
// is imported as dropped (its import recorded, so a retry adds nothing and
// the mover can end it) and named to the caller, whose source's engine
// counts it; a transfer that is not a route transfer is refused.
func TestRoutedNowhereIsDropped(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := &fixture{t: t, st: newTestStore(t), clk: clk}
	src.opts = func(o *Options) { o.RouteElsewhere = true }
	src.open()
	src.create("amqp", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Routed: true, RoutedElsewhere: true, MaxReceiveCount: 1}
	})
	zero := &fixture{t: t, st: newTestStore(t), clk: clk}
	zero.opts = func(o *Options) { o.DeadLetterRouter = routeTo{} }
	zero.open()
	zero.create("here", nil)

	src.send("amqp", body("x"))
	d := src.recv("amqp", 1, 30*time.Second)
	if out, err := src.e.ReportFailure("amqp", d[0].ReceiptHandle, Failure{}); err != nil || !out.DeadLettered {
		t.Fatalf("report: %+v %v", out, err)
	}
	ts, err := src.e.Transfers(nil, 10, 1<<20)
	if err != nil || len(ts) != 1 || !ts[0].Route {
		t.Fatalf("route transfers %+v %v", ts, err)
	}
	if nowhere, err := zero.e.ImportRouted(ts); err != nil || len(nowhere) != 1 || nowhere[0] != 0 {
		t.Fatalf("routed nowhere: %v, %v; want transfer 0", nowhere, err)
	}
	// The source's engine counts it as dropped, as a dead letter routed
	// nowhere there is.
	src.e.CountRoutedNowhere("amqp", ts[0].Reason)
	src.e.CountRoutedNowhere("gone", ts[0].Reason) // no such queue: nothing
	if info, _ := src.e.GetQueue("amqp"); info.Dropped != 1 {
		t.Fatalf("source's dropped count %d, want 1", info.Dropped)
	}
	if _, err := zero.st.Get(importKey(ts[0].ID)); err != nil {
		t.Fatalf("no import record for a transfer routed nowhere: %v", err)
	}
	if got := zero.recv("here", 10, -1); len(got) != 0 {
		t.Fatalf("routed nowhere, yet here holds %+v", got)
	}
	ts[0].Route = false
	if _, err := zero.e.ImportRouted(ts); err == nil {
		t.Fatal("a transfer with a target was routed")
	}
}

// waitingRouter is a recordingRouter that is a RouteWaiter, not ready
// until told.
type waitingRouter struct {
	recordingRouter
	ready atomic.Bool
}

func (r *waitingRouter) RouteReady() bool { return r.ready.Load() }

// TestRouteLaterWaitsForItsRouter: on an engine that routes its own route
// transfers (Options.RouteLater: a cluster's shard 0), a dead letter of a
// Routed queue whose router is not ready (its topology still restoring
// bindings to queues of other shards) leaves its source as a route
// transfer, without asking the router; once the router is ready the
// engine's own ImportRouted gives it its targets, and later dead letters
// are routed at once. An engine without RouteLater (a single node) asks
// its router whether or not it says it is ready.
func TestRouteLaterWaitsForItsRouter(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	router := &waitingRouter{recordingRouter: recordingRouter{routeTo: routeTo{names: []string{"dlq"}, env: []byte("x-death")}}}
	zero := &fixture{t: t, st: newTestStore(t), clk: clk}
	zero.opts = func(o *Options) {
		o.DeadLetterRouter = router
		o.RouteLater = true
	}
	zero.open()
	zero.create("dlq", nil)
	zero.create("amqp", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Routed: true} })
	reject := func(f *fixture, body string) {
		t.Helper()
		f.send("amqp", Message{Body: []byte(body), Envelope: []byte("original")})
		d := f.recv("amqp", 1, 30*time.Second)
		if len(d) != 1 {
			t.Fatal("no message")
		}
		if _, err := f.e.Reject("amqp", []string{d[0].ReceiptHandle}, Failure{}); err != nil {
			t.Fatal(err)
		}
	}
	reject(zero, "early")
	if n := len(router.asked); n != 0 {
		t.Fatalf("a router not ready was asked %d times", n)
	}
	if got := zero.recv("dlq", 10, -1); len(got) != 0 || zero.e.TransfersPending() != 1 {
		t.Fatalf("dlq holds %d, %d transfers pending; want 0 and the route transfer", len(got), zero.e.TransfersPending())
	}
	if info, _ := zero.e.GetQueue("amqp"); info.Visible+info.InFlight != 0 || info.Dropped != 0 {
		t.Fatalf("source %+v", info)
	}
	zero.restart() // the route transfer is durable
	ts, err := zero.e.Transfers(nil, 10, 1<<20)
	if err != nil || len(ts) != 1 || !ts[0].Route || ts[0].Source != "amqp" {
		t.Fatalf("route transfers %+v %v", ts, err)
	}
	router.ready.Store(true)
	if nowhere, err := zero.e.ImportRouted(ts); err != nil || len(nowhere) != 0 {
		t.Fatal(nowhere, err)
	}
	if err := zero.e.EndTransfers([]TransferID{ts[0].ID}); err != nil {
		t.Fatal(err)
	}
	got := zero.recv("dlq", 10, -1)
	if len(got) != 1 || string(got[0].Body) != "early" || string(got[0].Envelope) != "x-death" || got[0].DeadLetter == nil {
		t.Fatalf("dlq holds %+v", got)
	}
	if len(router.asked) != 1 || string(router.asked[0].Envelope) != "original" {
		t.Fatalf("the router was asked %+v", router.asked)
	}
	reject(zero, "ready")
	if got := zero.recv("dlq", 10, -1); len(got) != 1 || string(got[0].Body) != "ready" || zero.e.TransfersPending() != 0 {
		t.Fatalf("a dead letter once ready: dlq holds %+v, %d transfers pending", got, zero.e.TransfersPending())
	}

	single := &fixture{t: t, st: newTestStore(t), clk: clk}
	unready := &waitingRouter{recordingRouter: recordingRouter{routeTo: routeTo{names: []string{"dlq"}}}}
	single.opts = func(o *Options) { o.DeadLetterRouter = unready }
	single.open()
	single.create("dlq", nil)
	single.create("amqp", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Routed: true} })
	reject(single, "single")
	if got := single.recv("dlq", 10, -1); len(got) != 1 || single.e.TransfersPending() != 0 {
		t.Fatalf("without RouteLater: dlq holds %d, %d transfers pending; want it routed at once", len(got), single.e.TransfersPending())
	}
}
