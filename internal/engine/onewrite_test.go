package engine

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
)

// TestSendManyStoresInEveryQueue: a SendMany to several queues stores each
// share in its queue (with per-message results as Send's), reports a
// missing queue without stopping the others, and refuses a queue named
// twice.
func TestSendManyStoresInEveryQueue(t *testing.T) {
	f := newFixture(t)
	f.create("a", func(c *QueueConfig) { c.MaxMessageSize = 1024 })
	f.create("b", nil)
	f.create("c.fifo", fifoCfg)
	res, err := f.e.SendMany([]QueueSend{
		{Queue: "b", Msgs: []Message{body("b1"), body("b2")}},
		{Queue: "missing", Msgs: []Message{body("x")}},
		{Queue: "a", Msgs: []Message{body("a1"), {Body: make([]byte, 2000)}}},
		{Queue: "c.fifo", Msgs: []Message{{Body: []byte("c1"), GroupID: "g", DedupID: "1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || len(res[0].Results) != 2 || res[0].Err != nil || !errors.Is(res[1].Err, ErrQueueNotFound) {
		t.Fatalf("results %+v", res)
	}
	var tooLarge *MessageTooLargeError
	if res[2].Results[0].Err != nil || !errors.As(res[2].Results[1].Err, &tooLarge) {
		t.Fatalf("queue a: %+v", res[2].Results)
	}
	if r := res[3].Results[0]; r.Err != nil || r.SequenceNumber == "" {
		t.Fatalf("fifo result %+v", r)
	}
	for q, want := range map[string]int{"a": 1, "b": 2, "c.fifo": 1} {
		if got := bodies(f.recv(q, 10, time.Minute)); len(got) != want {
			t.Fatalf("%s: received %v, want %d", q, got, want)
		}
	}
	if _, err := f.e.SendMany([]QueueSend{{Queue: "a", Msgs: []Message{body("1")}}, {Queue: "a", Msgs: []Message{body("2")}}}); err == nil {
		t.Fatal("a queue named twice was accepted")
	}
	if info, _ := f.e.GetQueue("a"); info.Visible+info.InFlight != 1 {
		t.Fatalf("the refused call stored something: %+v", info)
	}
}

// TestSendManyIsOneDurableWrite: a publish routed to three queues is one
// batch and one fsync: while that fsync is held, exactly one durable write
// waits and it carries the messages of all three queues; a power cut then
// loses all three, and a released sync keeps all three.
func TestSendManyIsOneDurableWrite(t *testing.T) {
	for _, cut := range []bool{false, true} {
		pf := newPowerFixture(t, time.Hour)
		for _, q := range []string{"a", "b", "c"} {
			pf.create(q, nil)
		}
		var mu sync.Mutex
		var batches []store.Batch
		pf.ps.afterWrite = func(b *store.Batch) {
			mu.Lock()
			batches = append(batches, copyBatch(b))
			mu.Unlock()
		}
		pf.ps.holdSyncs()
		done := make(chan error, 1)
		go func() {
			_, err := pf.e.SendMany([]QueueSend{
				{Queue: "a", Msgs: []Message{body("m")}},
				{Queue: "b", Msgs: []Message{body("m")}},
				{Queue: "c", Msgs: []Message{body("m")}},
			})
			done <- err
		}()
		// The write hook runs as Write returns, just after the sync is
		// held: wait for both.
		poll.CheckFor(t, 10*time.Second, poll.True("SendMany's durable write to reach the store", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return pf.ps.held() == 1 && len(batches) > 0
		}))
		mu.Lock()
		contents := map[uint32]int{}
		for _, b := range batches {
			for _, op := range b.Ops {
				if op.Kind == store.OpSet && len(op.Key) == 14 && op.Key[0] == prefixMessage && op.Key[13] == kindContent {
					contents[uint32(op.Key[1])<<24|uint32(op.Key[2])<<16|uint32(op.Key[3])<<8|uint32(op.Key[4])]++
				}
			}
		}
		n := len(batches)
		mu.Unlock()
		if n != 1 || len(contents) != 3 {
			t.Fatalf("%d writes, content records per queue %v; want one write with a message for each of 3 queues", n, contents)
		}
		if cut {
			pf.powerCut()
			for _, q := range []string{"a", "b", "c"} {
				if info, _ := pf.e.GetQueue(q); info.Visible != 0 {
					t.Fatalf("after a power cut during the sync, %s holds %d messages", q, info.Visible)
				}
			}
			continue
		}
		pf.ps.releaseSyncs(nil)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		pf.powerCut()
		for _, q := range []string{"a", "b", "c"} {
			if info, _ := pf.e.GetQueue(q); info.Visible != 1 {
				t.Fatalf("after the acknowledged SendMany and a power cut, %s holds %d messages, want 1", q, info.Visible)
			}
		}
	}
}

// TestSendManyConcurrentOverlappingQueues: SendMany calls naming the same
// queues in different orders, racing receivers that dead-letter into one
// of those queues, neither deadlock nor lose a message.
func TestSendManyConcurrentOverlappingQueues(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("a", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1} })
	f.create("b", nil)
	orders := [][]string{{"a", "b", "dlq"}, {"dlq", "b", "a"}, {"b", "dlq", "a"}}
	const rounds = 200
	var wg sync.WaitGroup
	for w := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				var sends []QueueSend
				for _, q := range orders[w] {
					sends = append(sends, QueueSend{Queue: q, Msgs: []Message{body("m")}})
				}
				if _, err := f.e.SendMany(sends); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// A receiver of "a" with a zero lease: every second receive of a
	// message dead-letters it into "dlq" while SendMany holds dlq's lock.
	stop := make(chan struct{})
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = f.e.Receive(t.Context(), "a", ReceiveRequest{Max: 10, Visibility: 0, VisibilitySet: true})
		}
	}()
	wg.Wait()
	close(stop)
	<-recvDone
	a, _ := f.e.GetQueue("a")
	b, _ := f.e.GetQueue("b")
	d, _ := f.e.GetQueue("dlq")
	total := len(orders) * rounds
	if b.Visible != total || a.Visible+a.InFlight+d.Visible+d.InFlight != 2*total {
		t.Fatalf("a %d+%d, b %d, dlq %d+%d; want b=%d and a+dlq=%d", a.Visible, a.InFlight, b.Visible, d.Visible, d.InFlight, total, 2*total)
	}
}

// TestCreateQueueWithMetaIsOneWrite: a queue and its front-end metadata
// are one batch: while its fsync is held one durable write waits, holding
// both; a power cut loses both, a released sync keeps both; an existing
// queue writes no metadata; a bad namespace is refused before anything.
func TestCreateQueueWithMetaIsOneWrite(t *testing.T) {
	for _, cut := range []bool{false, true} {
		pf := newPowerFixture(t, time.Hour)
		pf.ps.holdSyncs()
		done := make(chan error, 1)
		go func() {
			_, created, err := pf.e.CreateQueueWithMeta("q", DefaultQueueConfig(), nil, []MetaRecord{{Namespace: "amqp.queue", Key: "/\x00q", Value: []byte("rec")}})
			if err == nil && !created {
				err = errors.New("not created")
			}
			done <- err
		}()
		poll.CheckFor(t, 10*time.Second, poll.True("the create's durable write to reach the store", func() bool { return pf.ps.held() == 1 }))
		meta := func() int {
			n := 0
			if err := pf.e.ScanMeta("amqp.queue", func(string, []byte) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if cut {
			pf.powerCut()
			if _, err := pf.e.GetQueue("q"); !errors.Is(err, ErrQueueNotFound) || meta() != 0 {
				t.Fatalf("after a power cut during the create's sync: queue %v, %d metadata records; want neither", err, meta())
			}
			continue
		}
		pf.ps.releaseSyncs(nil)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		pf.powerCut()
		if _, err := pf.e.GetQueue("q"); err != nil || meta() != 1 {
			t.Fatalf("after the acknowledged create and a power cut: queue %v, %d metadata records; want both", err, meta())
		}
		if _, created, err := pf.e.CreateQueueWithMeta("q", DefaultQueueConfig(), nil, []MetaRecord{{Namespace: "amqp.queue", Key: "other", Value: []byte("x")}}); err != nil || created || meta() != 1 {
			t.Fatalf("existing queue: created %v, err %v, %d records", created, err, meta())
		}
		if _, _, err := pf.e.CreateQueueWithMeta("r", DefaultQueueConfig(), nil, []MetaRecord{{Namespace: ""}}); err == nil {
			t.Fatal("an empty namespace was accepted")
		}
		if _, err := pf.e.GetQueue("r"); !errors.Is(err, ErrQueueNotFound) {
			t.Fatalf("a refused create made the queue: %v", err)
		}
	}
}

// TestSnapshotReadsEveryQueue: Snapshot lists every queue's info in name
// order, with the counts GetQueue gives, and marks each as existing.
func TestSnapshotReadsEveryQueue(t *testing.T) {
	f := newFixture(t)
	f.create("b", nil)
	f.create("a", nil)
	f.send("b", body("1"), body("2"))
	s := f.e.Snapshot()
	if len(s.Infos) != 2 || s.Infos[0].Name != "a" || s.Infos[1].Name != "b" || s.Infos[1].Visible != 2 {
		t.Fatalf("infos %+v", s.Infos)
	}
	if !s.Exists["a"] || !s.Exists["b"] || len(s.Unread) != 0 {
		t.Fatalf("exists %v unread %v", s.Exists, s.Unread)
	}
}
