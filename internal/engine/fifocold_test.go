package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Tests of a FIFO queue's cold backlog (cold.go), on the memory store and
// on pebble, with a window of coldWindow messages.

// fifoColdMsgBound is how many messages a FIFO queue with a window of
// coldWindow may hold in memory while a consumer drains it ten at a time:
// under half a window before a refill, one window a refill loads, and a
// batch in flight.
const fifoColdMsgBound = 2*coldWindow + 10

// held is the number of messages q holds in memory.
func (f *coldFixture) held(name string) int {
	f.t.Helper()
	q, err := f.e.lockQueue(name)
	if err != nil {
		f.t.Fatal(err)
	}
	defer f.e.unlockAndInsertCopies(q)
	return len(q.msgs)
}

// createFIFO creates a FIFO queue with content-based deduplication.
func (f *coldFixture) createFIFO(name string, mod func(*QueueConfig)) {
	f.t.Helper()
	f.create(name, func(c *QueueConfig) {
		c.FIFO, c.ContentBasedDedup = true, true
		if mod != nil {
			mod(c)
		}
	})
}

// groupOrder checks that a FIFO queue's deliveries come, per group, in the
// order they were sent, each exactly once. Bodies are "<group>/<n>".
type groupOrder struct {
	t    *testing.T
	next map[string]int
	n    int
}

func (o *groupOrder) see(d Delivery) {
	o.t.Helper()
	var g string
	var n int
	if _, err := fmt.Sscanf(string(d.Body), "g%s", &g); err != nil {
		o.t.Fatalf("body %q: %v", d.Body, err)
	}
	if _, err := fmt.Sscanf(g[3:], "%d", &n); err != nil {
		o.t.Fatalf("body %q: %v", d.Body, err)
	}
	g = g[:2]
	if d.GroupID != "g"+g {
		o.t.Fatalf("body %q in group %q", d.Body, d.GroupID)
	}
	if want := o.next[g]; n != want {
		o.t.Fatalf("group %s: got message %d, want %d (received %d so far)", g, n, want, o.n)
	}
	o.next[g] = n + 1
	o.n++
}

// fifoBody is message n of group g: "gGG/NNNNN".
func fifoBody(g, n int) Message {
	return Message{Body: []byte(fmt.Sprintf("g%02d/%05d", g, n)), GroupID: fmt.Sprintf("g%02d", g)}
}

// TestFIFOColdBacklogDrainWithRestarts: 3,000 messages in 30 groups
// through a FIFO queue whose window is 16, drained with two restarts, one
// of them with a batch in flight that is deleted by its pre-restart
// receipt handles. Every message is delivered exactly once and, per group,
// in order; the counts include the cold part; the queue holds at most
// about two windows and a batch of messages at every step, and its
// accounted memory stays bounded once the deduplication window has passed.
func TestFIFOColdBacklogDrainWithRestarts(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		const n, groups = 3000, 30
		f.createFIFO("q.fifo", nil)
		for i := 0; i < n; i += 10 {
			var batch []Message
			for j := i; j < i+10; j++ {
				batch = append(batch, fifoBody(j%groups, j/groups))
			}
			res := f.send("q.fifo", batch...)
			if res[9].SequenceNumber == "" {
				t.Fatalf("send %d: no sequence number", i)
			}
			if h := f.held("q.fifo"); h > coldWindow {
				t.Fatalf("after %d sends: %d messages held", i+10, h)
			}
		}
		if got := f.count("q.fifo"); got != n {
			t.Fatalf("count %d, want %d", got, n)
		}
		// The deduplication entries (separate records, on disk, dedup.go)
		// expire; what memory holds is bounded by the window.
		f.clk.Advance(DedupWindow + time.Second)
		if got := f.count("q.fifo"); got != n {
			t.Fatalf("count %d after the dedup window, want %d", got, n)
		}
		if mem := f.e.MemoryHeld(); mem > coldMemBound {
			t.Fatalf("%d bytes held, bound %d", mem, coldMemBound)
		}
		order := &groupOrder{t: t, next: map[string]int{}}
		deleted := 0
		step := 0
		for deleted < n {
			step++
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("nothing received with %d of %d deleted (count %d)", deleted, n, f.count("q.fifo"))
			}
			var hs []string
			for _, m := range d {
				order.see(m)
				hs = append(hs, m.ReceiptHandle)
			}
			if step == 100 {
				// A restart with this batch in flight: it stays
				// leased (its groups locked) and its pre-restart
				// handles delete it.
				f.restartCold()
				if got := f.count("q.fifo"); got != n-deleted {
					t.Fatalf("after restart: count %d, want %d", got, n-deleted)
				}
				info, _ := f.e.GetQueue("q.fifo")
				if info.InFlight != len(d) {
					t.Fatalf("after restart: %d in flight, want %d", info.InFlight, len(d))
				}
			}
			for _, err := range f.del("q.fifo", hs...) {
				if err != nil {
					t.Fatalf("delete: %v", err)
				}
			}
			deleted += len(d)
			if step == 200 {
				f.restartCold()
			}
			if got := f.count("q.fifo"); got != n-deleted {
				t.Fatalf("after %d deletes: count %d", deleted, got)
			}
			if h := f.held("q.fifo"); h > fifoColdMsgBound {
				t.Fatalf("after %d deletes: %d messages held, bound %d", deleted, h, fifoColdMsgBound)
			}
			if mem := f.e.MemoryHeld(); mem > coldMemBound {
				t.Fatalf("after %d deletes: %d bytes held, bound %d", deleted, mem, coldMemBound)
			}
		}
		if order.n != n {
			t.Fatalf("received %d, want %d", order.n, n)
		}
		if d := f.recv("q.fifo", 10, time.Hour); len(d) != 0 {
			t.Fatalf("left over: %v", bodies(d))
		}
		if q := f.e.queues["q.fifo"]; q.cold.on {
			t.Fatal("drained queue still cold")
		}
	})
}

// TestFIFOColdGroupLockAcrossRefill: a group's head is in flight while the
// rest of the group is cold; refills (and a restart) load the group's later
// messages behind it, and none of them is delivered until the head is
// deleted; then they come in order.
func TestFIFOColdGroupLockAcrossRefill(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", nil)
		// g00: 0–2 hot, 3–39 cold, behind 60 messages of g01.
		f.send("q.fifo", fifoBody(0, 0), fifoBody(0, 1), fifoBody(0, 2))
		for i := 0; i < 60; i++ {
			f.send("q.fifo", fifoBody(1, i))
		}
		for i := 3; i < 40; i++ {
			f.send("q.fifo", fifoBody(0, i))
		}
		order := &groupOrder{t: t, next: map[string]int{}}
		head := f.recv("q.fifo", 1, time.Hour)
		if len(head) != 1 || string(head[0].Body) != "g00/00000" {
			t.Fatalf("first receive: %v", bodies(head))
		}
		order.see(head[0])
		others := 0
		for others < 60 {
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("nothing received after %d of g01", others)
			}
			for _, m := range d {
				if m.GroupID != "g01" {
					t.Fatalf("%s delivered while g00/00000 is in flight", m.Body)
				}
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
				others++
			}
			if others == 30 {
				f.restartCold()
			}
		}
		// g01 is drained; the window now holds g00's later messages,
		// locked behind its head.
		if d := f.recv("q.fifo", 10, time.Hour); len(d) != 0 {
			t.Fatalf("delivered while the group's head is in flight: %v", bodies(d))
		}
		if h := f.held("q.fifo"); h < coldWindow/2 {
			t.Fatalf("window not refilled: %d held", h)
		}
		f.del("q.fifo", head[0].ReceiptHandle)
		for order.next["00"] < 40 {
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("g00 stuck at %d", order.next["00"])
			}
			for _, m := range d {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
		}
		if got := f.count("q.fifo"); got != 0 {
			t.Fatalf("count %d", got)
		}
	})
}

// TestFIFOColdRedeliveryKeepsGroupOrder: the head of a group whose later
// messages are cold comes back after its lease expires and after a failure
// report (with its retry backoff), across a restart, before any later
// message of its group.
func TestFIFOColdRedeliveryKeepsGroupOrder(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", nil)
		f.send("q.fifo", fifoBody(0, 0))
		for i := 0; i < 30; i++ {
			f.send("q.fifo", fifoBody(1, i))
		}
		for i := 1; i < 20; i++ {
			f.send("q.fifo", fifoBody(0, i))
		}
		d := f.recv("q.fifo", 1, 30*time.Second)
		if len(d) != 1 || string(d[0].Body) != "g00/00000" {
			t.Fatalf("first receive: %v", bodies(d))
		}
		// Drain g01, which brings g00's later messages into memory.
		for got := 0; got < 30; {
			batch := f.recv("q.fifo", 10, time.Hour)
			if len(batch) == 0 {
				t.Fatalf("g01 stuck at %d", got)
			}
			for _, m := range batch {
				if m.GroupID != "g01" {
					t.Fatalf("%s while g00/00000 is in flight", m.Body)
				}
				f.del("q.fifo", m.ReceiptHandle)
				got++
			}
		}
		// The lease expires: the head comes back, alone (Max 1).
		f.clk.Advance(31 * time.Second)
		d = f.recv("q.fifo", 1, time.Hour)
		if len(d) != 1 || string(d[0].Body) != "g00/00000" || d[0].ReceiveCount != 2 {
			t.Fatalf("after expiry: %v", d)
		}
		// A failure report schedules a retry: the group stays locked
		// while it waits, across a restart.
		out, err := f.e.ReportFailure("q.fifo", d[0].ReceiptHandle, Failure{ErrorClass: "Timeout"})
		if err != nil || out.DeadLettered {
			t.Fatalf("report: %+v %v", out, err)
		}
		f.restartCold()
		if got := f.recv("q.fifo", 10, time.Hour); len(got) != 0 {
			t.Fatalf("delivered while the head waits out its retry: %v", bodies(got))
		}
		var again []Delivery
		for i := 0; len(again) == 0; i++ {
			if i == 3600 {
				t.Fatal("no retry within an hour")
			}
			f.clk.Advance(time.Second)
			again = f.recv("q.fifo", 1, time.Hour)
		}
		if string(again[0].Body) != "g00/00000" || again[0].ReceiveCount != 3 {
			t.Fatalf("retry: %s (receive count %d)", again[0].Body, again[0].ReceiveCount)
		}
		f.del("q.fifo", again[0].ReceiptHandle)
		order := &groupOrder{t: t, next: map[string]int{"00": 1}}
		for order.next["00"] < 20 {
			batch := f.recv("q.fifo", 10, time.Hour)
			if len(batch) == 0 {
				t.Fatalf("g00 stuck at %d", order.next["00"])
			}
			for _, m := range batch {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
		}
	})
}

// TestFIFOColdDeadLetterKeepsOrder: messages of one group, most of them
// cold, are dead-lettered one by one (max receive count 1) into a FIFO
// dead-letter queue that goes cold too; the dead-letter queue delivers
// them in the source's order, across a restart.
func TestFIFOColdDeadLetterKeepsOrder(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		const n = 60
		f.createFIFO("dlq.fifo", nil)
		f.createFIFO("q.fifo", func(c *QueueConfig) {
			c.DeadLetter = &DeadLetterPolicy{Target: "dlq.fifo", MaxReceiveCount: 1}
		})
		for i := 0; i < n; i++ {
			f.send("q.fifo", fifoBody(0, i))
		}
		// Each receive dead-letters the expired head and leases the
		// next message.
		for i := 0; i <= n; i++ {
			d := f.recv("q.fifo", 1, time.Second)
			if i < n && (len(d) != 1 || string(d[0].Body) != string(fifoBody(0, i).Body)) {
				t.Fatalf("receive %d: %v", i, bodies(d))
			}
			f.clk.Advance(2 * time.Second)
			if i == n/2 {
				f.restartCold()
			}
		}
		if got := f.count("q.fifo"); got != 0 {
			t.Fatalf("source count %d", got)
		}
		if got := f.count("dlq.fifo"); got != n {
			t.Fatalf("dead-letter queue count %d", got)
		}
		if h := f.held("dlq.fifo"); h > coldWindow {
			t.Fatalf("dead-letter queue holds %d messages", h)
		}
		f.restartCold()
		order := &groupOrder{t: t, next: map[string]int{}}
		for order.n < n {
			d := f.recv("dlq.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("dead-letter queue stuck at %d", order.n)
			}
			for _, m := range d {
				order.see(m)
				f.del("dlq.fifo", m.ReceiptHandle)
			}
		}
	})
}

// TestFIFOColdPurgeAndDeleteQueue: a purge removes the cold part too (and,
// as on SQS, the deduplication cache); a deleted cold FIFO queue leaves no
// records.
func TestFIFOColdPurgeAndDeleteQueue(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", nil)
		for i := 0; i < 300; i++ {
			f.send("q.fifo", fifoBody(i%7, i/7))
		}
		if err := f.e.PurgeQueue("q.fifo"); err != nil {
			t.Fatal(err)
		}
		if got := f.count("q.fifo"); got != 0 {
			t.Fatalf("after purge: count %d", got)
		}
		f.send("q.fifo", fifoBody(0, 0))
		if d := bodies(f.recv("q.fifo", 10, time.Hour)); fmt.Sprint(d) != "[g00/00000]" {
			t.Fatalf("after purge: %v", d)
		}
		f.restartCold()
		if got := f.count("q.fifo"); got != 1 {
			t.Fatalf("after purge and restart: count %d", got)
		}
		f.createFIFO("gone.fifo", nil)
		for i := 0; i < 300; i++ {
			f.send("gone.fifo", fifoBody(i%7, i/7))
		}
		if err := f.e.DeleteQueue("gone.fifo"); err != nil {
			t.Fatal(err)
		}
		f.restartCold()
		if f.e.RecoveryDropped() != 0 {
			t.Fatalf("recovery dropped %d records", f.e.RecoveryDropped())
		}
		if got := f.count("q.fifo"); got != 1 {
			t.Fatalf("after deleting the other queue: count %d", got)
		}
	})
}

// TestFIFOColdDedup: resending the deduplication id of a cold message
// within the deduplication window is accepted without storing it again
// (the original message id and sequence number), before and after a
// restart; once the window has passed it is a new message.
func TestFIFOColdDedup(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", func(c *QueueConfig) { c.FIFO = true })
		var first []SendResult
		for i := 0; i < 100; i++ {
			m := fifoBody(i%3, i/3)
			m.DedupID = fmt.Sprint("d", i)
			first = append(first, f.send("q.fifo", m)...)
		}
		if q := f.e.queues["q.fifo"]; !q.cold.on || q.msgs[80] != nil {
			t.Fatal("message 80 is not cold")
		}
		resend := func(i int) SendResult {
			m := fifoBody(i%3, i/3)
			m.DedupID = fmt.Sprint("d", i)
			return f.send("q.fifo", m)[0]
		}
		check := func(when string) {
			t.Helper()
			r := resend(80)
			if r.MessageID != first[80].MessageID || r.SequenceNumber != first[80].SequenceNumber || first[80].SequenceNumber == "" {
				t.Fatalf("%s: resend got %+v, first %+v", when, r, first[80])
			}
			if got := f.count("q.fifo"); got != 100 {
				t.Fatalf("%s: count %d", when, got)
			}
		}
		check("before restart")
		f.restartCold()
		check("after restart")
		f.clk.Advance(DedupWindow + time.Second)
		if r := resend(80); r.MessageID == first[80].MessageID {
			t.Fatal("deduplicated after the window")
		}
		if got := f.count("q.fifo"); got != 101 {
			t.Fatalf("after the window: count %d", got)
		}
	})
}

// TestFIFOColdQueueDelay: on a FIFO queue with DelaySeconds, messages sent
// while it is cold go cold delayed and count as delayed; refills load them
// delayed, and they come in per-group order once the delay has passed.
func TestFIFOColdQueueDelay(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", func(c *QueueConfig) { c.Delay = 10 * time.Second })
		for i := 0; i < 100; i++ {
			f.send("q.fifo", fifoBody(i%4, i/4))
		}
		if h := f.held("q.fifo"); h > coldWindow {
			t.Fatalf("%d messages held", h)
		}
		if d := f.recv("q.fifo", 10, time.Hour); len(d) != 0 {
			t.Fatalf("delivered during the delay: %v", bodies(d))
		}
		if h := f.held("q.fifo"); h > 2*coldWindow {
			t.Fatalf("%d messages held after a receive", h)
		}
		// The cold messages count as delayed while their delay runs,
		// then as visible.
		if info, _ := f.e.GetQueue("q.fifo"); info.Delayed != 100 || info.Visible != 0 {
			t.Fatalf("during the delay: %d visible, %d delayed", info.Visible, info.Delayed)
		}
		f.clk.Advance(11 * time.Second)
		if info, _ := f.e.GetQueue("q.fifo"); info.Delayed != 0 || info.Visible != 100 {
			t.Fatalf("after the delay: %d visible, %d delayed", info.Visible, info.Delayed)
		}
		order := &groupOrder{t: t, next: map[string]int{}}
		for order.n < 100 {
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("stuck at %d", order.n)
			}
			for _, m := range d {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
			if h := f.held("q.fifo"); h > fifoColdMsgBound {
				t.Fatalf("%d messages held", h)
			}
			if info, _ := f.e.GetQueue("q.fifo"); info.Visible != 100-order.n || info.Delayed != 0 {
				t.Fatalf("after %d deletes: %d visible, %d delayed", order.n, info.Visible, info.Delayed)
			}
		}
	})
}

// TestFIFOColdLookAheadPastLockedGroups: the window (16) holds only
// messages of group g00, whose head is in flight. Receives look past the
// window and deliver the other groups' messages (at most
// lookAheadPerGroup of a group at a time, each group in order), never a
// later g00 message, across a restart; memory stays bounded. Once g00's
// head is deleted, g00 drains in order.
func TestFIFOColdLookAheadPastLockedGroups(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", nil)
		for i := 0; i < 40; i++ {
			f.send("q.fifo", fifoBody(0, i))
		}
		// Groups 1–4, interleaved, then more of g00, then more of them.
		const per = 30
		for i := 0; i < per; i++ {
			for g := 1; g <= 4; g++ {
				f.send("q.fifo", fifoBody(g, i))
			}
			if i == per/2 {
				for j := 40; j < 50; j++ {
					f.send("q.fifo", fifoBody(0, j))
				}
			}
		}
		order := &groupOrder{t: t, next: map[string]int{}}
		head := f.recv("q.fifo", 1, time.Hour)
		if len(head) != 1 || string(head[0].Body) != "g00/00000" {
			t.Fatalf("first receive: %v", bodies(head))
		}
		order.see(head[0])
		others := 0
		for step := 0; others < 4*per; step++ {
			if step > 1000 {
				t.Fatalf("stuck with %d of %d other messages received", others, 4*per)
			}
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("nothing received past the locked window (%d of %d other messages received)", others, 4*per)
			}
			var hs []string
			for _, m := range d {
				if m.GroupID == "g00" {
					t.Fatalf("%s delivered while g00/00000 is in flight", m.Body)
				}
				order.see(m)
				hs = append(hs, m.ReceiptHandle)
				others++
			}
			if step == 5 {
				f.restartCold() // the batch stays in flight; its handles still delete
			}
			for _, err := range f.del("q.fifo", hs...) {
				if err != nil {
					t.Fatalf("delete: %v", err)
				}
			}
			if h := f.held("q.fifo"); h > 3*coldWindow+10 {
				t.Fatalf("%d messages held, bound %d", h, 3*coldWindow+10)
			}
			// Deleted look-ahead messages lie above the stuck
			// window's boundary: nothing of them stays in memory.
			q, err := f.e.lockQueue("q.fifo")
			if err != nil {
				t.Fatal(err)
			}
			gone := len(q.cold.gone)
			f.e.unlockAndInsertCopies(q)
			if gone != 0 {
				t.Fatalf("%d entries for dropped messages kept after their deletes were written", gone)
			}
		}
		if d := f.recv("q.fifo", 10, time.Hour); len(d) != 0 {
			t.Fatalf("delivered while g00/00000 is in flight: %v", bodies(d))
		}
		f.del("q.fifo", head[0].ReceiptHandle)
		for order.next["00"] < 50 {
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("g00 stuck at %d", order.next["00"])
			}
			for _, m := range d {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
		}
		if got := f.count("q.fifo"); got != 0 {
			t.Fatalf("count %d", got)
		}
		if q := f.e.queues["q.fifo"]; q.cold.on || len(q.cold.gone) != 0 {
			t.Fatalf("drained: cold %v, %d gone entries", q.cold.on, len(q.cold.gone))
		}
	})
}

// TestFIFOColdRedriveIntoColdQueue: a move task from a cold FIFO
// dead-letter queue into a cold FIFO queue: the moved messages go cold
// behind the queue's backlog, and the queue delivers every group in order
// (its own messages, then the moved ones, in the dead-letter queue's
// order), with memory bounded.
func TestFIFOColdRedriveIntoColdQueue(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("dlq.fifo", nil)
		f.createFIFO("q.fifo", func(c *QueueConfig) {
			c.DeadLetter = &DeadLetterPolicy{Target: "dlq.fifo", MaxReceiveCount: 5}
		})
		for i := 0; i < 40; i++ {
			f.send("q.fifo", fifoBody(0, i))
		}
		for i := 0; i < 30; i++ {
			f.send("dlq.fifo", fifoBody(0, 40+i), fifoBody(1, i))
		}
		tk, err := f.e.StartMoveTask(MoveTaskSpec{Source: "dlq.fifo", Destination: "q.fifo", Rate: MaxMoveRate})
		if err != nil || tk.ToMove != 60 {
			t.Fatalf("start %+v %v", tk, err)
		}
		f.fixture.stepUntil("the move", 50*time.Millisecond, func() bool {
			cur, _ := f.e.GetMoveTask(tk.ID)
			return cur.Status == TaskCompleted
		})
		if c, d := f.count("q.fifo"), f.count("dlq.fifo"); c != 100 || d != 0 {
			t.Fatalf("after the move: q %d, dlq %d", c, d)
		}
		if h := f.held("q.fifo"); h > 2*coldWindow {
			t.Fatalf("%d messages held after the move", h)
		}
		f.restartCold()
		order := &groupOrder{t: t, next: map[string]int{}}
		for order.n < 100 {
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("stuck at %d", order.n)
			}
			for _, m := range d {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
		}
		if order.next["00"] != 70 || order.next["01"] != 30 {
			t.Fatalf("drained %v", order.next)
		}
	})
}

// TestFIFOColdImportFollowsColdBacklog: messages imported into a cold FIFO
// queue (a dead-letter queue restored from an export) come after the cold
// messages of their group, not before them.
func TestFIFOColdImportFollowsColdBacklog(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", nil)
		for i := 0; i < 40; i++ {
			f.send("q.fifo", fifoBody(0, i))
		}
		var views []View
		for i := 40; i < 45; i++ {
			views = append(views, View{Delivery: Delivery{MessageID: FormatID(newID()), Body: fifoBody(0, i).Body, GroupID: "g00"}})
		}
		if n, err := f.e.Import("q.fifo", views); err != nil || n != 5 {
			t.Fatalf("import: %d %v", n, err)
		}
		if h := f.held("q.fifo"); h > coldWindow {
			t.Fatalf("%d messages held after the import", h)
		}
		order := &groupOrder{t: t, next: map[string]int{}}
		for order.n < 45 {
			d := f.recv("q.fifo", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("stuck at %d", order.n)
			}
			for _, m := range d {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
		}
	})
}

// TestFIFOColdRetention: cold FIFO messages past their retention are
// dropped when a receive reaches them; the group's later, unexpired
// messages are then delivered in order.
func TestFIFOColdRetention(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.createFIFO("q.fifo", func(c *QueueConfig) { c.Retention = time.Minute })
		for i := 0; i < 100; i++ {
			f.send("q.fifo", fifoBody(i%2, i/2))
		}
		f.clk.Advance(30 * time.Second)
		for i := 100; i < 120; i++ {
			f.send("q.fifo", fifoBody(i%2, i/2))
		}
		f.clk.Advance(31 * time.Second)
		order := &groupOrder{t: t, next: map[string]int{"00": 50, "01": 50}}
		for i := 0; i < 10 && order.n < 20; i++ {
			for _, m := range f.recv("q.fifo", 10, time.Hour) {
				order.see(m)
				f.del("q.fifo", m.ReceiptHandle)
			}
		}
		info, _ := f.e.GetQueue("q.fifo")
		if order.n != 20 || info.Expired != 100 || info.Visible+info.InFlight != 0 {
			t.Fatalf("received %d; after retention: %+v", order.n, info)
		}
	})
}

// TestFIFOColdRandomWorkload: a seeded random mix of sends (one group
// much busier than the others), receives of 1–10 messages, deletes,
// leases kept, released (visibility 0) or left to expire, and restarts,
// over a FIFO queue with a window of 16. At every receive, each delivered
// message's earlier messages of its group that are not deleted must be in
// the same batch, before it (the group lock and per-group order, look-ahead
// included); memory stays bounded by the window plus what is in flight;
// at the end every message has been deleted exactly once.
func TestFIFOColdRandomWorkload(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		rng := rand.New(rand.NewPCG(13, 6))
		f.createFIFO("q.fifo", func(c *QueueConfig) { c.Retention = 14 * 24 * time.Hour })
		const groups = 12
		sent := make([]int, groups)                // messages sent per group
		deleted := map[string]bool{}               // bodies deleted
		leased := map[string]string{}              // body → latest receipt handle
		undeleted := func(g, below int) []string { // bodies of g before below not deleted
			var out []string
			for k := 0; k < below; k++ {
				if b := string(fifoBody(g, k).Body); !deleted[b] {
					out = append(out, b)
				}
			}
			return out
		}
		total := 0
		for step := 0; step < 2500; step++ {
			switch r := rng.IntN(100); {
			case r < 35:
				var batch []Message
				for i := rng.IntN(10); i >= 0; i-- {
					g := 0
					if rng.IntN(2) == 0 {
						g = 1 + rng.IntN(groups-1)
					}
					batch = append(batch, fifoBody(g, sent[g]))
					sent[g]++
				}
				f.send("q.fifo", batch...)
				total += len(batch)
			case r < 90:
				d := f.recv("q.fifo", 1+rng.IntN(10), 30*time.Second)
				inBatch := map[string]bool{}
				for _, m := range d {
					var g, n int
					if _, err := fmt.Sscanf(string(m.Body), "g%02d/%05d", &g, &n); err != nil {
						t.Fatal(err)
					}
					for _, b := range undeleted(g, n) {
						if !inBatch[b] {
							t.Fatalf("step %d: %s delivered while %s (earlier in its group) is not deleted and not before it in the batch", step, m.Body, b)
						}
					}
					if deleted[string(m.Body)] {
						t.Fatalf("step %d: %s delivered after its delete", step, m.Body)
					}
					inBatch[string(m.Body)] = true
					leased[string(m.Body)] = m.ReceiptHandle
					switch rng.IntN(10) {
					case 0, 1, 2, 3, 4, 5, 6:
						if errs := f.del("q.fifo", m.ReceiptHandle); errs[0] != nil {
							t.Fatalf("step %d: delete %s: %v", step, m.Body, errs[0])
						}
						deleted[string(m.Body)] = true
						delete(leased, string(m.Body))
					case 7:
						f.changeVis("q.fifo", m.ReceiptHandle, 0)
					}
				}
			case r < 99:
				f.clk.Advance(time.Duration(rng.IntN(10_000)) * time.Millisecond)
			default:
				f.restartCold()
			}
			if h, limit := f.held("q.fifo"), 3*coldWindow+len(leased)+10; h > limit {
				t.Fatalf("step %d: %d messages held, bound %d", step, h, limit)
			}
		}
		// Drain: every lease ends, everything is received and deleted.
		f.clk.Advance(time.Minute)
		for stuck := 0; len(deleted) < total; {
			d := f.recv("q.fifo", 10, 30*time.Second)
			if len(d) == 0 {
				if stuck++; stuck > 3 {
					t.Fatalf("%d of %d deleted; count %d", len(deleted), total, f.count("q.fifo"))
				}
				f.clk.Advance(time.Minute)
				continue
			}
			for _, m := range d {
				if deleted[string(m.Body)] {
					t.Fatalf("%s delivered after its delete", m.Body)
				}
				if errs := f.del("q.fifo", m.ReceiptHandle); errs[0] != nil {
					t.Fatalf("delete %s: %v", m.Body, errs[0])
				}
				deleted[string(m.Body)] = true
			}
		}
		if got := f.count("q.fifo"); got != 0 {
			t.Fatalf("count %d after deleting all %d", got, total)
		}
	})
}
