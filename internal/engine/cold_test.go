package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Tests of the hot/cold split (cold.go), on the memory store and on pebble.

const coldWindow = 16

// coldFixture is an engine with a tiny ready window over a store that can
// be closed and reopened (pebble on a directory, or one memory store).
type coldFixture struct {
	*fixture
	reopenStore func() store.Store
	closeStore  func()
	window      int   // ReadyWindow (0: coldWindow)
	windowBytes int64 // ReadyWindowBytes
	readyMem    int64 // ReadyMemoryBudget
}

func coldStores(t *testing.T, run func(t *testing.T, f *coldFixture)) {
	t.Run("memstore", func(t *testing.T) {
		st := memstore.New()
		run(t, newColdFixture(t, func() store.Store { return st }, func() {}))
	})
	t.Run("pebble", func(t *testing.T) {
		dir := t.TempDir()
		var st *pebblestore.Store
		open := func() store.Store {
			s, err := pebblestore.Open(dir, pebblestore.Options{})
			if err != nil {
				t.Fatalf("pebble open: %v", err)
			}
			st = s
			return s
		}
		closeStore := func() {
			if st != nil {
				_ = st.Close()
				st = nil
			}
		}
		t.Cleanup(closeStore)
		run(t, newColdFixture(t, open, closeStore))
	})
}

func newColdFixture(t *testing.T, open func() store.Store, closeStore func()) *coldFixture {
	f := &coldFixture{
		fixture:     &fixture{t: t, clk: clock.NewFake(time.Unix(1_700_000_000, 0))},
		reopenStore: open,
		closeStore:  closeStore,
	}
	f.st = open()
	f.openCold()
	return f
}

func (f *coldFixture) openCold() {
	f.t.Helper()
	w := f.window
	if w == 0 {
		w = coldWindow
	}
	e, err := Open(Options{Store: f.st, Clock: f.clk, ReadyWindow: w, ReadyWindowBytes: f.windowBytes, ReadyMemoryBudget: f.readyMem})
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	f.e = e
	f.t.Cleanup(func() { e.Close() })
}

// restartCold closes the engine and the store and opens both again.
func (f *coldFixture) restartCold() {
	f.t.Helper()
	f.e.Close()
	f.closeStore()
	f.st = f.reopenStore()
	f.openCold()
}

func (f *coldFixture) count(q string) int {
	f.t.Helper()
	info, err := f.e.GetQueue(q)
	if err != nil {
		f.t.Fatal(err)
	}
	return info.Visible + info.InFlight + info.Delayed
}

// coldMemBound is what an engine holding about three windows of small
// messages (hot window, one refill, a batch in flight) may account: far
// below the thousands of messages the tests queue.
const coldMemBound = 4 * coldWindow * (MessageOverhead + 128)

func (f *coldFixture) sendN(q string, from, n int) {
	f.t.Helper()
	for i := from; i < from+n; i += 10 {
		var batch []Message
		for j := i; j < min(i+10, from+n); j++ {
			batch = append(batch, body(fmt.Sprintf("m%05d", j)))
		}
		f.send(q, batch...)
	}
}

// TestColdBacklogExactlyOnce: 5,000 messages through a queue whose window
// is 16. Accounted memory stays bounded by the window, every message is
// received exactly once, the counts are right at every step, and a restart
// in the middle of the drain keeps every message and the counts.
func TestColdBacklogExactlyOnce(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		const n = 5000
		f.create("q", nil)
		for i := 0; i < n; i += 500 {
			f.sendN("q", i, 500)
			if got := f.count("q"); got != i+500 {
				t.Fatalf("after %d sends: count %d", i+500, got)
			}
			if held := f.e.MemoryHeld(); held > coldMemBound {
				t.Fatalf("after %d sends: %d bytes held, bound %d", i+500, held, coldMemBound)
			}
		}
		seen := map[string]int{}
		deleted := 0
		restarted := false
		for deleted < n {
			if deleted >= n/2 && !restarted {
				f.restartCold()
				restarted = true
				if got := f.count("q"); got != n-deleted {
					t.Fatalf("after restart: count %d, want %d", got, n-deleted)
				}
				if held := f.e.MemoryHeld(); held > coldMemBound {
					t.Fatalf("after restart: %d bytes held, bound %d", held, coldMemBound)
				}
			}
			d := f.recv("q", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("nothing received with %d of %d deleted (count %d)", deleted, n, f.count("q"))
			}
			var hs []string
			for _, m := range d {
				seen[string(m.Body)]++
				hs = append(hs, m.ReceiptHandle)
			}
			for _, err := range f.del("q", hs...) {
				if err != nil {
					t.Fatal(err)
				}
			}
			deleted += len(d)
			if got := f.count("q"); got != n-deleted {
				t.Fatalf("after %d deletes: count %d", deleted, got)
			}
			if held := f.e.MemoryHeld(); held > coldMemBound {
				t.Fatalf("after %d deletes: %d bytes held, bound %d", deleted, held, coldMemBound)
			}
		}
		if len(seen) != n {
			t.Fatalf("received %d distinct messages, want %d", len(seen), n)
		}
		for b, c := range seen {
			if c != 1 {
				t.Fatalf("%s received %d times", b, c)
			}
		}
		if d := f.recv("q", 10, time.Hour); len(d) != 0 {
			t.Fatalf("left over: %v", bodies(d))
		}
		// Drained: the queue is hot again and small sends stay in memory.
		f.sendN("q", n, 5)
		if got := bodies(f.recv("q", 10, time.Hour)); len(got) != 5 {
			t.Fatalf("after the drain: %v", got)
		}
	})
}

// TestColdOrderAndDelayedSends: a delayed send while the queue is cold
// stays in memory; refills skip it (no duplicate), and standard-queue
// order is kept for the cold part.
func TestColdOrderAndDelayedSends(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendN("q", 0, 100)
		f.send("q", Message{Body: []byte("delayed"), Delay: 5 * time.Second, DelaySet: true})
		f.sendN("q", 100, 100)
		if got := f.count("q"); got != 201 {
			t.Fatalf("count %d", got)
		}
		var got []string
		for i := 0; i < 40; i++ {
			d := f.recv("q", 10, time.Hour)
			for _, m := range d {
				got = append(got, string(m.Body))
				f.del("q", m.ReceiptHandle)
			}
		}
		if len(got) != 200 {
			t.Fatalf("received %d before the delay ended", len(got))
		}
		for i, b := range got {
			if b != fmt.Sprintf("m%05d", i) {
				t.Fatalf("message %d is %s", i, b)
			}
		}
		f.clk.Advance(6 * time.Second)
		if d := bodies(f.recv("q", 10, time.Hour)); fmt.Sprint(d) != "[delayed]" {
			t.Fatalf("after the delay: %v", d)
		}
	})
}

// TestColdDeleteByPreRestartReceipt: messages received before a restart
// are cold after it (beyond the first window); deleting them by their old
// receipt handles deletes their records and the counts.
func TestColdDeleteByPreRestartReceipt(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendN("q", 0, 100)
		var handles []string
		for len(handles) < 60 {
			for _, d := range f.recv("q", min(10, 60-len(handles)), time.Hour) {
				handles = append(handles, d.ReceiptHandle)
			}
		}
		f.restartCold()
		if got := f.count("q"); got != 100 {
			t.Fatalf("after restart: count %d", got)
		}
		// A visibility change by a pre-restart handle of a cold message
		// works as for a hot one.
		errs, err := f.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: handles[59], Timeout: time.Minute}})
		if err != nil || errs[0] != nil {
			t.Fatalf("ChangeVisibility: %v %v", err, errs)
		}
		for _, err := range f.del("q", handles...) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := f.count("q"); got != 40 {
			t.Fatalf("after deleting 60: count %d", got)
		}
		// Deleting again succeeds and changes nothing.
		for _, err := range f.del("q", handles[30:]...) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := f.count("q"); got != 40 {
			t.Fatalf("after deleting again: count %d", got)
		}
		var got []string
		for i := 0; i < 10; i++ {
			for _, d := range f.recv("q", 10, time.Hour) {
				got = append(got, string(d.Body))
			}
		}
		if len(got) != 40 || got[0] != "m00060" {
			t.Fatalf("left: %d %v", len(got), got)
		}
		f.restartCold()
		if c := f.count("q"); c != 40 {
			t.Fatalf("after a second restart: count %d", c)
		}
	})
}

// TestColdPurgeAndDeleteQueue: purges and deletes see the cold backlog.
func TestColdPurgeAndDeleteQueue(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendN("q", 0, 500)
		if err := f.e.PurgeQueue("q"); err != nil {
			t.Fatal(err)
		}
		if got := f.count("q"); got != 0 {
			t.Fatalf("after purge: count %d", got)
		}
		f.send("q", body("after"))
		if d := bodies(f.recv("q", 10, time.Hour)); fmt.Sprint(d) != "[after]" {
			t.Fatalf("after purge: %v", d)
		}
		f.restartCold()
		if got := f.count("q"); got != 1 {
			t.Fatalf("after purge and restart: count %d", got)
		}

		// AMQP queue.purge: every ready message, hot or cold; in-flight
		// ones stay.
		f.create("r", nil)
		f.sendN("r", 0, 500)
		inFlight := f.recv("r", 5, time.Hour)
		n, err := f.e.PurgeReady("r")
		if err != nil || n != 495 {
			t.Fatalf("PurgeReady = %d, %v", n, err)
		}
		info, _ := f.e.GetQueue("r")
		if info.Visible != 0 || info.InFlight != 5 {
			t.Fatalf("after PurgeReady: %+v", info)
		}
		if held := f.e.MemoryHeld(); held > coldMemBound {
			t.Fatalf("after PurgeReady: %d bytes held", held)
		}
		f.del("r", inFlight[0].ReceiptHandle)
		f.restartCold()
		if got := f.count("r"); got != 4 {
			t.Fatalf("after PurgeReady and restart: count %d", got)
		}

		f.create("gone", nil)
		f.sendN("gone", 0, 300)
		if err := f.e.DeleteQueue("gone"); err != nil {
			t.Fatal(err)
		}
		f.restartCold() // no leftovers for the recovery audit
		if f.e.RecoveryDropped() != 0 {
			t.Fatalf("recovery dropped %d records", f.e.RecoveryDropped())
		}
		left := 0
		err = f.st.Scan([]byte{prefixMessage}, func(k, v []byte) error {
			if k[len(k)-1] == kindContent {
				left++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if left != 1+4 { // q's one message, r's four
			t.Fatalf("%d message records left", left)
		}
	})
}

// TestColdDeadLetterQueueOperations: DLQ browse, delete-matching, a dry run
// and a redrive move task with a filter over a DLQ whose backlog is mostly
// cold, and max-receive dead-lettering from a cold source.
func TestColdDeadLetterQueueOperations(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("dlq", nil)
		f.create("q", func(c *QueueConfig) {
			c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 1}
		})
		// 300 messages, every one received once and not deleted: the
		// next receive dead-letters them (max receives 1).
		for i := 0; i < 300; i += 10 {
			var batch []Message
			for j := i; j < i+10; j++ {
				batch = append(batch, Message{Body: []byte(fmt.Sprintf("m%05d", j)),
					Attributes: []Attribute{{Name: "tenant", DataType: "String", StringValue: fmt.Sprint(j % 3)}}})
			}
			f.send("q", batch...)
		}
		for got := 0; got < 300; {
			d := f.recv("q", 10, time.Second)
			if len(d) == 0 {
				t.Fatalf("received %d of 300", got)
			}
			got += len(d)
		}
		f.clk.Advance(2 * time.Second)
		f.fixture.stepUntil("dead-lettering", 10*time.Millisecond, func() bool {
			f.recv("q", 10, time.Second)
			return f.count("dlq") == 300
		})
		if c := f.count("q"); c != 0 {
			t.Fatalf("source count %d", c)
		}
		// Dead-letter copies into a DLQ over its window are cold too.
		if held := f.e.MemoryHeld(); held > 2*coldMemBound {
			t.Fatalf("after dead-lettering: %d bytes held, bound %d", held, 2*coldMemBound)
		}
		// Direct sends make the DLQ cold too.
		f.restartCold()
		if c := f.count("dlq"); c != 300 {
			t.Fatalf("dlq count after restart %d", c)
		}
		var all []View
		for cursor := uint64(0); ; {
			page, err := f.e.Browse("dlq", Filter{}, cursor, 50)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page.Messages...)
			if page.Next == 0 {
				break
			}
			cursor = page.Next
		}
		if len(all) != 300 || all[0].DeadLetter == nil || all[0].DeadLetter.SourceQueue != "q" {
			t.Fatalf("browsed %d", len(all))
		}
		seen := map[string]bool{}
		for _, v := range all {
			seen[v.MessageID] = true
		}
		if len(seen) != 300 {
			t.Fatalf("browsed %d distinct messages", len(seen))
		}
		// Browsing, deleting by filter and counting read the cold part
		// without loading it.
		if held := f.e.MemoryHeld(); held > coldMemBound {
			t.Fatalf("after browsing: %d bytes held, bound %d", held, coldMemBound)
		}
		n, err := f.e.DeleteMatching("dlq", Filter{AttributeName: "tenant", AttributeValue: "0"})
		if err != nil || n != 100 {
			t.Fatalf("DeleteMatching = %d, %v", n, err)
		}
		if c := f.count("dlq"); c != 200 {
			t.Fatalf("dlq count %d", c)
		}
		left, err := f.e.Browse("dlq", Filter{AttributeName: "tenant", AttributeValue: "0"}, 0, 1000)
		if err != nil || len(left.Messages) != 0 {
			t.Fatalf("after DeleteMatching, %d still match (%v)", len(left.Messages), err)
		}
		f.restartCold()
		spec := MoveTaskSpec{Source: "dlq", Rate: MaxMoveRate, Filter: Filter{AttributeName: "tenant", AttributeValue: "1"}}
		dry, err := f.e.DryRunMoveTask(spec)
		if err != nil || dry.Total != 100 || dry.ByDestination["q"] != 100 {
			t.Fatalf("dry run %+v %v", dry, err)
		}
		if c := f.count("dlq"); c != 200 {
			t.Fatalf("dry run changed the dlq: %d", c)
		}
		if held := f.e.MemoryHeld(); held > coldMemBound {
			t.Fatalf("after a dry run: %d bytes held, bound %d", held, coldMemBound)
		}
		tk, err := f.e.StartMoveTask(spec)
		if err != nil || tk.ToMove != 100 {
			t.Fatalf("start %+v %v", tk, err)
		}
		f.fixture.stepUntil("the move", 50*time.Millisecond, func() bool {
			cur, _ := f.e.GetMoveTask(tk.ID)
			return cur.Status == TaskCompleted
		})
		if c, d := f.count("q"), f.count("dlq"); c != 100 || d != 100 {
			t.Fatalf("after the move: q %d, dlq %d", c, d)
		}
	})
}

// TestColdMaxLength: length limits count cold messages, with both
// overflow behaviours.
func TestColdMaxLength(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("reject", func(c *QueueConfig) {
			c.MaxLength = 100
			c.Overflow = OverflowRejectPublish
		})
		f.sendN("reject", 0, 100)
		res, err := f.e.Send("reject", []Message{body("one too many")})
		if err != nil || !errors.Is(res[0].Err, ErrQueueFull) {
			t.Fatalf("101st send: %v %v", res, err)
		}
		f.create("drop", func(c *QueueConfig) { c.MaxLength = 100 })
		f.sendN("drop", 0, 150)
		if c := f.count("drop"); c != 100 {
			t.Fatalf("drop-head count %d", c)
		}
		f.restartCold()
		if c := f.count("drop"); c != 100 {
			t.Fatalf("drop-head count after restart %d", c)
		}
		var got []string
		for i := 0; i < 20; i++ {
			for _, d := range f.recv("drop", 10, time.Hour) {
				got = append(got, string(d.Body))
			}
		}
		if len(got) != 100 || got[0] != "m00050" || got[99] != "m00149" {
			t.Fatalf("drop-head kept %d: first %v", len(got), got[:min(3, len(got))])
		}
	})
}

// TestColdRetention: cold messages past their retention are dropped when a
// receive reaches them, and counted as expired.
func TestColdRetention(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", func(c *QueueConfig) { c.Retention = time.Minute })
		f.sendN("q", 0, 100)
		f.clk.Advance(30 * time.Second)
		f.sendN("q", 100, 10)
		f.clk.Advance(31 * time.Second)
		var got []string
		for i := 0; i < 5; i++ {
			got = append(got, bodies(f.recv("q", 10, time.Hour))...)
		}
		if len(got) != 10 || got[0] != "m00100" {
			t.Fatalf("received %d: %v", len(got), got)
		}
		info, _ := f.e.GetQueue("q")
		if info.Expired != 100 || info.InFlight != 10 || info.Visible != 0 {
			t.Fatalf("after retention: %+v", info)
		}
	})
}

// TestColdOpensStoreWrittenWithoutWindow: a store written by an engine
// that held everything in memory (ReadyWindow -1, as releases before the
// window did; the record layout is the same) opens with a window: every
// message, state and count is kept, FIFO queues too are loaded a window at
// a time (in per-group order), and pre-restart receipt handles still
// delete.
func TestColdOpensStoreWrittenWithoutWindow(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.e.Close()
		old, err := Open(Options{Store: f.st, Clock: f.clk, ReadyWindow: -1})
		if err != nil {
			t.Fatal(err)
		}
		f.e = old
		f.create("q", nil)
		f.create("f.fifo", func(c *QueueConfig) { c.FIFO = true; c.ContentBasedDedup = true })
		f.sendN("q", 0, 200)
		for i := 0; i < 100; i++ {
			f.send("f.fifo", Message{Body: []byte(fmt.Sprintf("f%03d", i)), GroupID: fmt.Sprint(i % 3)})
		}
		if q := old.queues["q"]; q.cold.on || len(q.msgs) != 200 {
			t.Fatalf("window -1: cold %v, %d in memory", q.cold.on, len(q.msgs))
		}
		var held []string
		for len(held) < 50 {
			for _, d := range f.recv("q", min(10, 50-len(held)), time.Hour) {
				held = append(held, d.ReceiptHandle)
			}
		}
		f.del("q", held[:10]...)
		f.restartCold()
		info, _ := f.e.GetQueue("q")
		if info.Visible+info.InFlight != 190 {
			t.Fatalf("after reopening with a window: %+v", info)
		}
		if q := f.e.queues["q"]; !q.cold.on || len(q.msgs) != coldWindow {
			t.Fatalf("with a window: cold %v, %d in memory", q.cold.on, len(q.msgs))
		}
		if c := f.count("f.fifo"); c != 100 || len(f.e.queues["f.fifo"].msgs) != coldWindow {
			t.Fatalf("fifo count %d, %d in memory", c, len(f.e.queues["f.fifo"].msgs))
		}
		for _, err := range f.del("q", held[10:]...) {
			if err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for i := 0; i < 30; i++ {
			got = append(got, bodies(f.recv("q", 10, time.Hour))...)
		}
		if len(got) != 150 || got[0] != "m00050" || got[149] != "m00199" {
			t.Fatalf("received %d after reopening", len(got))
		}
		// The FIFO queue, loaded a window at a time, in order.
		var fifo []string
		for i := 0; i < 30; i++ {
			d := f.recv("f.fifo", 10, time.Hour)
			for _, m := range d {
				fifo = append(fifo, string(m.Body))
				f.del("f.fifo", m.ReceiptHandle)
			}
		}
		if len(fifo) != 100 {
			t.Fatalf("fifo: received %d after reopening", len(fifo))
		}
		last := map[int]int{0: -1, 1: -1, 2: -1}
		for _, b := range fifo {
			var n int
			if _, err := fmt.Sscanf(b, "f%03d", &n); err != nil {
				t.Fatal(err)
			}
			if last[n%3] >= n {
				t.Fatalf("fifo: %s after f%03d in its group", b, last[n%3])
			}
			last[n%3] = n
		}
	})
}

// TestColdRefillSkipsMessagesDroppedInTheSameOperation: a hot message
// above the cold boundary (a delayed send while the queue was cold) that
// expires in a receive's advance has its records deleted only when that
// receive's batch is written; the refill the same receive makes must not
// read it back as a cold message.
func TestColdRefillSkipsMessagesDroppedInTheSameOperation(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendN("q", 0, coldWindow+2)
		f.send("q", Message{Body: []byte("short-lived"), Delay: time.Second, DelaySet: true, TTL: 2 * time.Second, TTLSet: true})
		f.sendN("q", 100, 10)
		// One receive takes the hot window below the low-water mark
		// (refills happen at the start of a receive), so the next
		// receive expires the delayed message and then refills.
		if d := f.recv("q", coldWindow/2+1, time.Hour); len(d) != coldWindow/2+1 {
			t.Fatalf("first receive: %d", len(d))
		}
		f.clk.Advance(3 * time.Second)
		var got []string
		for i := 0; i < 10; i++ {
			got = append(got, bodies(f.recv("q", 10, time.Hour))...)
		}
		for _, b := range got {
			if b == "short-lived" {
				t.Fatal("an expired message was read back by a refill and delivered")
			}
		}
		if len(got) != coldWindow/2-1+12 {
			t.Fatalf("received %d after the first receive, want %d", len(got), coldWindow/2-1+12)
		}
		info, _ := f.e.GetQueue("q")
		if info.Expired != 1 || f.count("q") != coldWindow+12 {
			t.Fatalf("after the expiry: %+v", info)
		}
		f.restartCold()
		if c := f.count("q"); c != coldWindow+12 {
			t.Fatalf("after restart: count %d", c)
		}
	})
}

// TestColdLongPollReadsPastExpiredWindows: when the cold part begins with
// more expired messages than one receive's refills read, a long poll keeps
// reading instead of waiting for a send that may never come.
func TestColdLongPollReadsPastExpiredWindows(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", func(c *QueueConfig) { c.Retention = time.Minute })
		f.sendN("q", 0, 40*coldWindow) // more than 16 windows
		f.clk.Advance(30 * time.Second)
		f.sendN("q", 10000, 3)
		f.clk.Advance(31 * time.Second)
		type result struct {
			d   []Delivery
			err error
		}
		done := make(chan result, 1)
		go func() {
			// The fake clock does not advance: a poll that waited
			// would wait for ever.
			d, err := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, Wait: 20 * time.Second, WaitSet: true})
			done <- result{d, err}
		}()
		select {
		case r := <-done:
			if r.err != nil || len(r.d) != 3 || string(r.d[0].Body) != "m10000" {
				t.Fatalf("long poll returned %q, %v", bodies(r.d), r.err)
			}
		case <-time.After(10 * time.Second):
			f.e.Close() // ends the poll
			t.Fatal("the long poll waited although receivable messages were cold")
		}
	})
}

// TestColdWindowBytes: the window is bounded by body bytes too, so a queue
// of large messages keeps few of them in memory, after sends, refills and
// a restart alike.
func TestColdWindowBytes(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.window, f.windowBytes = 1000, 64<<10
		f.restartCold()
		f.create("q", nil)
		const n, size = 200, 8 << 10
		for i := 0; i < n; i++ {
			b := make([]byte, size)
			copy(b, fmt.Sprintf("m%05d", i))
			f.send("q", Message{Body: b})
		}
		// About two windows (one hot, one refill) of 8 KiB bodies, far
		// below the 1.6 MiB sent.
		const bound = 3 * (64<<10 + 8*(MessageOverhead+size))
		if held := f.e.MemoryHeld(); held > bound {
			t.Fatalf("after the sends: %d bytes held, bound %d", held, bound)
		}
		seen := map[string]bool{}
		for len(seen) < n {
			d := f.recv("q", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("received %d of %d", len(seen), n)
			}
			var hs []string
			for _, m := range d {
				seen[string(m.Body[:6])] = true
				hs = append(hs, m.ReceiptHandle)
			}
			f.del("q", hs...)
			if held := f.e.MemoryHeld(); held > bound {
				t.Fatalf("after %d received: %d bytes held, bound %d", len(seen), held, bound)
			}
			if len(seen) == n/2 {
				f.restartCold()
				if held := f.e.MemoryHeld(); held > bound {
					t.Fatalf("after restart: %d bytes held, bound %d", held, bound)
				}
			}
		}
		if c := f.count("q"); c != 0 {
			t.Fatalf("count %d at the end", c)
		}
	})
}
