package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// prio is a message with body s sent with priority p.
func prio(s string, p uint8) Message { return Message{Body: []byte(s), Priority: p} }

// sendPriorities sends a (0), b (3), c (7), d (3), e (5), f (0) to q.
func sendPriorities(f *fixture, q string) {
	f.t.Helper()
	f.send(q, prio("a", 0), prio("b", 3), prio("c", 7), prio("d", 3), prio("e", 5), prio("f", 0))
}

func priorityQueue(c *QueueConfig) { c.MaxPriority = 5 }

// TestPriorityOrder: a priority queue delivers its ready messages highest
// priority first, a priority above the queue's maximum counting as the
// maximum, and in arrival order within one priority; a queue without
// priorities keeps arrival order for the same sends. The order holds
// across a restart (the priority is in the content record).
func TestPriorityOrder(t *testing.T) {
	f := newFixture(t)
	f.create("pq", priorityQueue)
	f.create("plain", nil)
	sendPriorities(f, "pq")
	sendPriorities(f, "plain")
	if got := fmt.Sprint(bodies(f.recv("plain", 10, 30*time.Second))); got != "[a b c d e f]" {
		t.Fatalf("queue without priorities: %s", got)
	}
	ds := f.recv("pq", 10, 30*time.Second)
	if got := fmt.Sprint(bodies(ds)); got != "[c e b d a f]" {
		t.Fatalf("priority queue: %s, want [c e b d a f]", got)
	}
	if ds[0].Priority != 7 {
		t.Fatalf("delivery priority %d, want the 7 it was sent with", ds[0].Priority)
	}

	f.create("pq2", priorityQueue)
	sendPriorities(f, "pq2")
	f.restart()
	if got := fmt.Sprint(bodies(f.recv("pq2", 10, 30*time.Second))); got != "[c e b d a f]" {
		t.Fatalf("after a restart: %s", got)
	}
}

// TestPriorityReturns: a message whose lease ends goes back to the end of
// its own priority, not behind lower ones; a nack with requeue puts it
// back at its place in its priority.
func TestPriorityReturns(t *testing.T) {
	f := newFixture(t)
	f.create("pq", priorityQueue)
	sendPriorities(f, "pq")
	first := f.recv("pq", 1, time.Second) // c
	if got := fmt.Sprint(bodies(first)); got != "[c]" {
		t.Fatalf("first: %s", got)
	}
	f.clk.Advance(2 * time.Second) // c's lease ends: behind e, ahead of b
	ds := f.recv("pq", 10, 30*time.Second)
	if got := fmt.Sprint(bodies(ds)); got != "[e c b d a f]" {
		t.Fatalf("after c's lease ended: %s, want [e c b d a f]", got)
	}
	// Nack b and a: b goes back ahead of every lower priority, a
	// ahead of f (its original place).
	var handles []string
	for _, d := range ds {
		if s := string(d.Body); s == "b" || s == "a" {
			handles = append(handles, d.ReceiptHandle)
		}
	}
	if errs, err := f.e.Nack("pq", handles); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("nack: %v %v", err, errs)
	}
	f.send("pq", prio("g", 0), prio("h", 4))
	if got := fmt.Sprint(bodies(f.recv("pq", 10, 30*time.Second))); got != "[h b a g]" {
		t.Fatalf("after the nack: %s, want [h b a g]", got)
	}
}

// TestPriorityCopies: a dead-letter copy keeps its priority, and a
// priority dead-letter queue orders by it.
func TestPriorityCopies(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", priorityQueue)
	f.create("work", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
	})
	f.send("work", prio("low", 1), prio("high", 5))
	// The work queue has no priorities: arrival order. The second
	// receive dead-letters both.
	if got := fmt.Sprint(bodies(f.recv("work", 10, time.Second))); got != "[low high]" {
		t.Fatalf("work: %s", got)
	}
	f.clk.Advance(2 * time.Second)
	f.recv("work", 10, time.Second)
	ds := f.recvCopies("dlq", 2, 30*time.Second)
	if got := fmt.Sprint(bodies(ds)); got != "[high low]" {
		t.Fatalf("dead-letter queue: %s, want [high low]", got)
	}
	if ds[0].Priority != 5 || ds[1].Priority != 1 {
		t.Fatalf("copies' priorities %d, %d", ds[0].Priority, ds[1].Priority)
	}
}

// TestPriorityCopiesAheadOfColdBacklog: dead-letter copies into a
// priority queue whose backlog is on disk come ahead of it, by priority,
// whether they stayed in memory or went cold behind two windows of
// waiting messages, and across a restart that leaves them all past the
// first window: a copy writes a priority record as a send does.
func TestPriorityCopiesAheadOfColdBacklog(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			coldStores(t, func(t *testing.T, f *coldFixture) {
				f.create("dlq", priorityQueue)
				f.create("work", func(c *QueueConfig) {
					c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
				})
				f.sendN("dlq", 0, 300) // priority 0: all but the window cold
				n := 3 * coldWindow
				var want []string
				for i := 0; i < n; i += 8 {
					var batch []Message
					for j := i; j < i+8; j++ {
						p := uint8(1 + j%2*3) // 1 and 4
						batch = append(batch, prio(fmt.Sprintf("%d-%03d", p, j), p))
					}
					f.send("work", batch...)
				}
				for p := 4; p >= 1; p -= 3 {
					for j := range n {
						if 1+j%2*3 == p {
							want = append(want, fmt.Sprintf("%d-%03d", p, j))
						}
					}
				}
				for i := range 300 {
					want = append(want, fmt.Sprintf("m%05d", i))
				}
				// The first receive leases every message, the second,
				// once the leases ended, dead-letters them all.
				for got := 0; got < n; {
					got += len(f.recv("work", 10, time.Second))
				}
				f.clk.Advance(2 * time.Second)
				if ds := f.recv("work", 10, time.Second); len(ds) != 0 {
					t.Fatalf("work still delivers %d", len(ds))
				}
				poll.CheckFor(t, 10*time.Second, func() error {
					if info, _ := f.e.GetQueue("dlq"); info.Visible != n+300 {
						return fmt.Errorf("%d in the dead-letter queue, want %d", info.Visible, n+300)
					}
					return nil
				})
				if restart {
					f.restartCold()
				}
				got := f.drainBodies("dlq")
				// Within a band the copies come in the order they
				// reached the dead-letter queue, which the lease
				// expiries decide: compare each band as a set.
				if len(got) == len(want) {
					for _, band := range [][2]int{{0, n / 2}, {n / 2, n}} {
						slices.Sort(got[band[0]:band[1]])
						slices.Sort(want[band[0]:band[1]])
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("received (%d)\n%v\nwant (%d)\n%v", len(got), got, len(want), want)
				}
				if n := countKeys(t, f.st, prefixPriority); n != 0 {
					t.Fatalf("%d priority records left on an empty queue", n)
				}
			})
		})
	}
}

// TestPriorityInFlightAcrossRestarts: a message that was in flight, in
// memory, when a receive's scan passed its priority record keeps the
// record, so after its lease ends and another restart leaves it past the
// first window, it still comes ahead of the backlog.
func TestPriorityInFlightAcrossRestarts(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("pq", priorityQueue)
		f.sendN("pq", 0, 100)
		f.send("pq", prio("high", 3))
		ds := f.recv("pq", 1, 30*time.Second)
		if len(ds) != 1 || string(ds[0].Body) != "high" {
			t.Fatalf("first receive: %v", bodies(ds))
		}
		f.restartCold() // high: cold, and in flight
		// Its handle brings it into memory, still in flight; the
		// next receive scans the priority records from the start.
		if errs, err := f.e.ChangeVisibility("pq", []VisibilityChange{{ReceiptHandle: ds[0].ReceiptHandle, Timeout: 10 * time.Second}}); err != nil || errors.Join(errs...) != nil {
			t.Fatalf("change visibility: %v %v", err, errs)
		}
		second := f.recv("pq", 1, 30*time.Second)
		if got := bodies(second); fmt.Sprint(got) != "[m00000]" {
			t.Fatalf("second receive: %v", got)
		}
		f.del("pq", second[0].ReceiptHandle)
		f.clk.Advance(11 * time.Second) // high's lease ends
		f.restartCold()
		want := []string{"high"}
		for i := 1; i < 100; i++ {
			want = append(want, fmt.Sprintf("m%05d", i))
		}
		if got := f.drainBodies("pq"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("received (%d)\n%v\nwant (%d)\n%v", len(got), got, len(want), want)
		}
	})
}

// TestPriorityDropHead: a length limit with drop-head overflow drops a
// priority queue's head, which is its highest priority (RabbitMQ's
// priority_queue_SUITE "drop"), also when those messages wait on disk
// behind a deeper backlog, and across message groups.
func TestPriorityDropHead(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("pq", func(c *QueueConfig) { c.MaxPriority, c.MaxLength = 5, 135 })
		f.sendN("pq", 0, 90) // priority 0, past the window: cold
		var want []string
		for i := 0; i < 40; i += 10 { // priority 1: in memory up to two windows, then cold
			var batch []Message
			for j := i; j < i+10; j++ {
				batch = append(batch, prio(fmt.Sprintf("p1-%02d", j), 1))
				want = append(want, fmt.Sprintf("p1-%02d", j))
			}
			f.send("pq", batch...)
		}
		var urgent []Message
		for i := range 5 {
			urgent = append(urgent, prio(fmt.Sprintf("u%d", i), 3))
		}
		f.send("pq", urgent...) // two windows wait: on disk
		f.sendN("pq", 90, 5)    // five over the limit
		for i := range 95 {
			want = append(want, fmt.Sprintf("m%05d", i))
		}
		if got := f.drainBodies("pq"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("received (%d)\n%v\nwant the five of priority 3 dropped (%d)\n%v", len(got), got, len(want), want)
		}
	})
	t.Run("groups", func(t *testing.T) {
		f := newFixture(t)
		f.create("pq", func(c *QueueConfig) { c.MaxPriority, c.MaxLength = 5, 2 })
		f.send("pq", Message{Body: []byte("a-low"), GroupID: "a"})
		f.send("pq", Message{Body: []byte("b-high"), GroupID: "b", Priority: 4})
		f.send("pq", Message{Body: []byte("a-low2"), GroupID: "a"})
		if got := fmt.Sprint(bodies(f.recv("pq", 10, time.Minute))); got != "[a-low a-low2]" {
			t.Fatalf("got %s, want the priority 4 message dropped", got)
		}
	})
}

// TestPriorityCopyRacesConfigUpdate: a dead-letter copy reads its target's
// settings (priority levels in writeCopy, message TTL) under the source's
// lock only, so a configuration update of the target must not write what
// the copy reads; under -race this fails if it does.
func TestPriorityCopyRacesConfigUpdate(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", priorityQueue)
	f.create("work", func(c *QueueConfig) {
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			if err := f.e.UpdateQueue("dlq", func(c *QueueConfig) error {
				c.Visibility = time.Duration(10+i%5) * time.Second
				return nil
			}); err != nil {
				t.Errorf("update: %v", err)
				return
			}
		}
	}()
	for i := range 50 {
		f.send("work", prio(fmt.Sprint(i), uint8(i%6)))
		ds := f.recv("work", 1, time.Minute)
		if len(ds) != 1 {
			t.Fatalf("receive %d: %d messages", i, len(ds))
		}
		if errs, err := f.e.Reject("work", []string{ds[0].ReceiptHandle}, Failure{}); err != nil || errors.Join(errs...) != nil {
			t.Fatalf("reject: %v %v", err, errs)
		}
	}
	<-done
	if info, _ := f.e.GetQueue("dlq"); info.Visible != 50 {
		t.Fatalf("%d dead letters, want 50", info.Visible)
	}
}

// TestPriorityConfig: MaxPriority is 0–255 and cannot change; a FIFO queue
// ignores it.
func TestPriorityConfig(t *testing.T) {
	f := newFixture(t)
	cfg := DefaultQueueConfig()
	cfg.MaxPriority = 256
	if _, _, err := f.e.CreateQueue("bad", cfg, nil); err == nil || !strings.Contains(err.Error(), "MaxPriority") {
		t.Fatalf("MaxPriority 256: %v", err)
	}
	f.create("pq", priorityQueue)
	err := f.e.UpdateQueue("pq", func(c *QueueConfig) error { c.MaxPriority = 9; return nil })
	if err == nil {
		t.Fatal("MaxPriority changed")
	}
	if err := f.e.UpdateQueue("pq", func(c *QueueConfig) error { c.Visibility = time.Minute; return nil }); err != nil {
		t.Fatalf("another setting of a priority queue: %v", err)
	}
	info, _ := f.e.GetQueue("pq")
	if info.Config.MaxPriority != 5 {
		t.Fatalf("MaxPriority %d after an update", info.Config.MaxPriority)
	}
	f.restart()
	info, _ = f.e.GetQueue("pq")
	if info.Config.MaxPriority != 5 {
		t.Fatalf("MaxPriority %d after a restart", info.Config.MaxPriority)
	}

	f.create("q.fifo", func(c *QueueConfig) { c.FIFO, c.ContentBasedDedup, c.MaxPriority = true, true, 5 })
	f.send("q.fifo", Message{Body: []byte("a"), GroupID: "g"}, Message{Body: []byte("b"), GroupID: "g", Priority: 5})
	if got := fmt.Sprint(bodies(f.recv("q.fifo", 10, 30*time.Second))); got != "[a b]" {
		t.Fatalf("FIFO queue: %s", got)
	}
}

// drainBodies receives everything from q, ten at a time, deleting each,
// and checks the memory the engine holds on the way.
func (f *coldFixture) drainBodies(q string) []string {
	f.t.Helper()
	var got []string
	for {
		ds := f.recv(q, 10, 30*time.Second)
		if len(ds) == 0 {
			return got
		}
		var handles []string
		for _, d := range ds {
			got = append(got, string(d.Body))
			handles = append(handles, d.ReceiptHandle)
		}
		f.del(q, handles...)
		if held := f.e.MemoryHeld(); held > coldMemBound {
			f.t.Fatalf("after %d received: %d bytes held, bound %d", len(got), held, coldMemBound)
		}
	}
}

// TestPriorityAheadOfColdBacklog: on a priority queue whose backlog is
// mostly on disk, every message comes highest priority first and by
// arrival within one, whether the higher priorities stayed in memory or
// went to disk behind more than two windows of waiting messages, and
// across a restart that leaves them all past the first window. Memory
// stays bounded by a few windows.
func TestPriorityAheadOfColdBacklog(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			coldStores(t, func(t *testing.T, f *coldFixture) {
				f.create("pq", priorityQueue)
				f.sendN("pq", 0, 500) // priority 0: all but the window cold
				var want []string
				var urgent []Message
				for i := range 3 * coldWindow { // a window in memory, two on disk
					urgent = append(urgent, prio(fmt.Sprintf("u%02d", i), 2))
				}
				for i := 0; i < len(urgent); i += 10 {
					f.send("pq", urgent[i:min(i+10, len(urgent))]...)
				}
				f.send("pq", prio("late", 3))
				want = append(want, "late")
				for _, m := range urgent {
					want = append(want, string(m.Body))
				}
				for i := range 500 {
					want = append(want, fmt.Sprintf("m%05d", i))
				}
				if restart {
					f.restartCold()
				}
				got := f.drainBodies("pq")
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("received (%d)\n%v\nwant (%d)\n%v", len(got), got, len(want), want)
				}
				if n := countKeys(t, f.st, prefixPriority); n != 0 {
					t.Fatalf("%d priority records left on an empty queue", n)
				}
			})
		})
	}
}

// TestPriorityRandomDeep: 600 messages of random priorities through a
// queue whose window is 16, with a restart after the sends and consumers
// taking in the middle: highest priority first, arrival order within one.
func TestPriorityRandomDeep(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("pq", priorityQueue)
		rng := rand.New(rand.NewPCG(1, 2))
		byBand := make([][]string, 6)
		for i := 0; i < 600; i += 10 {
			var batch []Message
			for j := i; j < i+10; j++ {
				p := uint8(rng.IntN(8)) // 6 and 7 count as 5
				body := fmt.Sprintf("%d-%03d", p, j)
				batch = append(batch, prio(body, p))
				band := min(int(p), 5)
				byBand[band] = append(byBand[band], body)
			}
			f.send("pq", batch...)
		}
		var want []string
		for band := 5; band >= 0; band-- {
			want = append(want, byBand[band]...)
		}
		f.restartCold()
		got := f.drainBodies("pq")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("received (%d)\n%v\nwant (%d)\n%v", len(got), got, len(want), want)
		}
	})
}

func countKeys(t *testing.T, st store.Store, prefix byte) int {
	t.Helper()
	n := 0
	if err := st.Scan([]byte{prefix}, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBandTailsRandom: random appends, requeues and removals on a list
// indexed by band keep it ordered by band, highest first, with pushBand's
// messages by arrival and insertFromFront's by sequence within a band,
// and the index naming each band's last message.
func TestBandTailsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	l := list{bands: newBandTails(4)}
	in := map[*message]bool{}
	seq := uint64(0)
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(in) == 0:
			seq++
			m := &message{seq: seq, prio: uint8(rng.IntN(7))}
			l.pushBand(m)
			in[m] = true
		case op < 7:
			for m := range in { // requeue one
				l.remove(m)
				l.insertFromFront(m)
				break
			}
		default:
			for m := range in {
				l.remove(m)
				delete(in, m)
				break
			}
		}
		n := 0
		last := make([]*message, 5)
		for m := l.head; m != nil; m = m.next {
			n++
			if m.next != nil && l.bands.band(m.next) > l.bands.band(m) {
				t.Fatalf("step %d: band %d before band %d", step, l.bands.band(m), l.bands.band(m.next))
			}
			last[l.bands.band(m)] = m
		}
		if n != len(in) || l.n != n {
			t.Fatalf("step %d: %d linked, n %d, want %d", step, n, l.n, len(in))
		}
		for b := range last {
			if last[b] != l.bands.last[b] {
				t.Fatalf("step %d: band %d's last is wrong", step, b)
			}
		}
	}
}

// BenchmarkPriorityBacklog: one message's life (send, receive, delete, in
// batches of 10, random priorities 0-9) on a queue holding a standing
// backlog of 10,000 such messages, beyond the default ready window, in
// pebble, with
// and without x-max-priority: what ordering by priority costs.
func BenchmarkPriorityBacklog(b *testing.B) {
	for _, maxPrio := range []int{0, 9} {
		b.Run(fmt.Sprintf("max=%d", maxPrio), func(b *testing.B) {
			st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			e, err := Open(Options{Store: st})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			cfg := DefaultQueueConfig()
			cfg.MaxPriority = maxPrio
			if _, _, err := e.CreateQueue("q", cfg, nil); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			payload := make([]byte, 1024)
			batch := make([]Message, 10)
			fill := func() {
				for i := range batch {
					batch[i] = Message{Body: payload, Priority: uint8(rng.IntN(10))}
				}
			}
			for range 1000 {
				fill()
				if _, err := e.Send("q", batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += 10 {
				fill()
				sendReceiveDelete(b, e, "q", batch)
			}
		})
	}
}

// TestPriorityModel drives a priority queue whose window is 16 with
// random sends, receives that delete or nack what they get, and (in one
// mode) restarts, keeping at most 40 messages queued so that fewer than
// three windows ever wait (priority.go's bound), and checks every receive
// against a model: the highest priorities first, sequence order within
// one (a nack puts a message back at its place). Part of the queue is on
// disk most of the time. (Run with 40 seeds by hand when it was written:
// all passed.)
func TestPriorityModel(t *testing.T) {
	seeds := uint64(4)
	if testing.Short() {
		seeds = 1 // make race
	}
	for _, mode := range []string{"nacks", "restarts"} {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				coldStores(t, func(t *testing.T, f *coldFixture) {
					f.create("pq", priorityQueue)
					rng := rand.New(rand.NewPCG(seed, 11))
					type entry struct {
						band int
						i    int
					}
					var ready []entry // the model, in delivery order
					insert := func(e entry) {
						at := len(ready)
						for k, r := range ready {
							if r.band < e.band || r.band == e.band && r.i > e.i {
								at = k
								break
							}
						}
						ready = append(ready[:at], append([]entry{e}, ready[at:]...)...)
					}
					next := 0
					for step := range 600 {
						switch op := rng.IntN(10); {
						case op < 4 && len(ready) < 30:
							var batch []Message
							for range 1 + rng.IntN(10) {
								p := rng.IntN(8)
								batch = append(batch, prio(fmt.Sprintf("%d", next), uint8(p)))
								insert(entry{min(p, 5), next})
								next++
							}
							f.send("pq", batch...)
						case op == 9 && mode == "restarts":
							f.restartCold()
						default:
							k := 1 + rng.IntN(10)
							ds := f.recv("pq", k, 30*time.Second)
							// A receive may return fewer than it asked for
							// while a refill is not due (as SQS may), never
							// none while messages are ready.
							want := len(ds)
							if want > k || want > len(ready) || want == 0 && len(ready) > 0 {
								t.Fatalf("step %d: received %d of %d asked, %d ready", step, want, k, len(ready))
							}
							nack := mode == "nacks" && rng.IntN(3) == 0
							var handles []string
							for j, d := range ds {
								if got := fmt.Sprint(ready[j].i); string(d.Body) != got {
									t.Fatalf("step %d: receive %d got %s, want %s (ready %v)", step, j, d.Body, got, ready)
								}
								handles = append(handles, d.ReceiptHandle)
							}
							taken := append([]entry(nil), ready[:want]...)
							ready = ready[want:]
							if nack {
								if errs, err := f.e.Nack("pq", handles); err != nil || errors.Join(errs...) != nil {
									t.Fatalf("nack: %v %v", err, errs)
								}
								for _, e := range taken {
									insert(e)
								}
							} else {
								f.del("pq", handles...)
							}
						}
					}
				})
			})
		}
	}
}
