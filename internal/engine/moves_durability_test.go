package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
)

// Moved copies (dead-letter moves and move tasks) become receivable in
// their target only once the write that moved them is durable (follow-up
// of issue #10; docs/guarantees.md). Otherwise a consumer could receive
// and delete a copy, be told the delete succeeded, and a power cut would
// then put the message back in its source.

// browseCount returns how many messages Browse lists in queue.
func browseCount(t *testing.T, e *Engine, queue string) int {
	t.Helper()
	page, err := e.Browse(queue, Filter{}, 0, 1000)
	if err != nil {
		t.Fatalf("browse %s: %v", queue, err)
	}
	return len(page.Messages)
}

// holdMoveBatch makes the first move-task batch's fsync (and every later
// durable write's) wait for releaseSyncs or releaseOne.
func holdMoveBatch(pf *powerFixture) {
	var hooked atomic.Bool
	pf.ps.beforeWrite = func(b *store.Batch) {
		if movesAndRecordsTask(b) != "" && hooked.CompareAndSwap(false, true) {
			pf.ps.holdSyncs()
		}
	}
}

// startHeldMove starts a move task from "dlq" to "q" over moveFixture(t, 1)
// and returns once its batch is written and waits for its fsync.
func startHeldMove(t *testing.T) (*powerFixture, MoveTask) {
	pf := moveFixture(t, 1)
	holdMoveBatch(pf)
	t.Cleanup(func() { pf.ps.releaseSyncs(nil) }) // before the engine's Close: a failed test must not hang
	tk, err := pf.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Destination: "q", Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, poll.True("the move batch to wait for its fsync", func() bool { return pf.ps.held() == 1 }))
	return pf, tk
}

// TestMovedCopyNotReceivableBeforeSync: a message a move task moved is not
// in the destination (receive, browse) until the batch that moved it is
// synced; once it is, it is.
func TestMovedCopyNotReceivableBeforeSync(t *testing.T) {
	pf, _ := startHeldMove(t)
	if d := pf.recv("q", 10, -1); len(d) != 0 {
		t.Fatalf("moved copy %q received before its move was synced", bodies(d))
	}
	if n := browseCount(t, pf.e, "q"); n != 0 {
		t.Fatalf("browse lists %d moved copies before their move was synced", n)
	}
	pf.ps.releaseSyncs(nil)
	poll.CheckFor(t, 20*time.Second, poll.True("the copy to be published", func() bool { return browseCount(t, pf.e, "q") == 1 }))
	if d := pf.recv("q", 10, -1); len(d) != 1 || string(d[0].Body) != "m" {
		t.Fatalf("after the sync, receive: %q", bodies(d))
	}
}

// TestMovedCopyNeverAppearsAfterFailedSync: when the fsync of a move
// batch fails, its copies are never published; after a power cut the
// message is in exactly one queue: the DLQ, where the disk has it, or the
// destination once the resumed task has moved it again.
func TestMovedCopyNeverAppearsAfterFailedSync(t *testing.T) {
	pf, tk := startHeldMove(t)
	pf.ps.releaseSyncs(syscall.EIO)
	poll.CheckFor(t, 20*time.Second, poll.True("the task to fail", func() bool { m, _ := pf.e.GetMoveTask(tk.ID); return m.Status == TaskFailed }))
	if n := browseCount(t, pf.e, "q"); n != 0 {
		t.Fatalf("after a failed sync browse lists %d moved copies", n)
	}
	if d, err := pf.e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, WaitSet: true}); len(d) != 0 {
		t.Fatalf("after a failed sync the moved copy was received: %q (%v)", bodies(d), err)
	}
	pf.powerCut()
	// The task's failure could not be saved (the store had failed), so
	// the engine that opens finds it running and resumes it: the message
	// is in the DLQ, where the disk has it, until the resumed task moves
	// it (again, durably this time) to the destination, when its rate
	// allows (the clock is advanced for that). Once the task has ended,
	// the message is in exactly one of them.
	poll.CheckFor(t, 20*time.Second, poll.True("the resumed task to end", func() bool {
		pf.clk.Advance(time.Second)
		m, err := pf.e.GetMoveTask(tk.ID)
		return err == nil && m.Status != TaskRunning
	}))
	var d []Delivery
	for _, q := range []string{"dlq", "q"} {
		d = append(d, pf.recv(q, 10, -1)...)
	}
	if len(d) != 1 || string(d[0].Body) != "m" {
		t.Fatalf("after the power cut: %q, want the one message", bodies(d))
	}
}

// TestPauseWaitsForBatchInProgress: an operator's pause is answered only
// once the batch the task had begun is over, so after a pause's OK every
// message is receivable in one of the queues, none between them (what
// test/faults' feCheck relies on).
func TestPauseWaitsForBatchInProgress(t *testing.T) {
	pf, tk := startHeldMove(t)
	paused := make(chan error, 1)
	go func() { _, err := pf.e.PauseMoveTask(tk.ID); paused <- err }()
	poll.CheckFor(t, 20*time.Second, poll.True("the pause to wait for its fsync", func() bool { return pf.ps.held() == 2 }))
	// The pause's fsync returns (syncing the batch too); the batch's
	// waiter is not woken yet.
	pf.ps.releaseOne(1)
	select {
	case err := <-paused:
		t.Fatalf("pause answered (%v) while the batch was still in progress (dlq %d, q %d)",
			err, browseCount(t, pf.e, "dlq"), browseCount(t, pf.e, "q"))
	case <-time.After(50 * time.Millisecond):
	}
	pf.ps.releaseSyncs(nil)
	if err := <-paused; err != nil {
		t.Fatalf("pause: %v", err)
	}
	if d, q := browseCount(t, pf.e, "dlq"), browseCount(t, pf.e, "q"); d+q != 1 {
		t.Fatalf("after the pause's OK: %d in dlq, %d in q; want the message in exactly one", d, q)
	}
}

// TestDeadLetterCopyNotReceivableBeforeSync: a receive that dead-letters
// writes the move without a sync (like a lease); the copy is published in
// the DLQ only after a sync covers it, and never when that sync fails.
func TestDeadLetterCopyNotReceivableBeforeSync(t *testing.T) {
	syncOutcomes(t, func(t *testing.T, fail bool) {
		pf := newPowerFixture(t, time.Hour)
		pf.withDLQ(1, nil)
		pf.send("q", body("poison"))
		if d := pf.recv("q", 1, 0); len(d) != 1 {
			t.Fatal("first receive should return the message")
		}
		pf.ps.holdSyncs()
		t.Cleanup(func() { pf.ps.releaseSyncs(nil) })
		recvd := make(chan []Delivery, 1)
		go func() {
			d, _ := pf.e.Receive(context.Background(), "q", ReceiveRequest{Max: 1, WaitSet: true})
			recvd <- d
		}()
		answered := false
		poll.CheckFor(t, 20*time.Second, poll.True("the dead-lettering receive to answer or wait for a sync", func() bool {
			if len(recvd) > 0 {
				answered = true
			}
			return answered || pf.ps.held() == 1
		}))
		if d := pf.recv("dlq", 10, -1); len(d) != 0 {
			t.Fatalf("dead-letter copy %q received before its move was synced (receive answered: %v)", bodies(d), answered)
		}
		if n := browseCount(t, pf.e, "dlq"); n != 0 {
			t.Fatalf("browse lists %d dead-letter copies before their move was synced", n)
		}
		if !fail {
			pf.ps.releaseSyncs(nil)
			if d := <-recvd; len(d) != 0 {
				t.Fatalf("the dead-lettering receive returned %q", bodies(d))
			}
			if d := pf.recv("dlq", 10, -1); len(d) != 1 || string(d[0].Body) != "poison" {
				t.Fatalf("after the sync, dlq receive: %q", bodies(d))
			}
			return
		}
		pf.ps.releaseSyncs(syscall.EIO)
		<-recvd
		if n := browseCount(t, pf.e, "dlq"); n != 0 {
			t.Fatalf("after a failed sync browse lists %d dead-letter copies", n)
		}
		if _, err := pf.e.Send("q", []Message{body("x")}); !errors.Is(err, ErrStorage) {
			t.Fatalf("the engine did not fail with its sync: send %v", err)
		}
		pf.powerCut()
		if n := browseCount(t, pf.e, "dlq"); n != 0 {
			t.Fatalf("after the power cut the DLQ holds %d messages", n)
		}
		if n := browseCount(t, pf.e, "q"); n != 1 {
			t.Fatalf("after the power cut q holds %d messages, want the one", n)
		}
	})
}

// TestExpiredDeadLetterNotReceivableBeforeSync is
// TestDeadLetterCopyNotReceivableBeforeSync for the scheduler's dead
// letters: a message whose TTL runs out in a queue with a dead-letter
// target is moved by the timer, whose batch is written without a sync
// (expiry deletes need none); its copy must still wait for a sync barrier
// before it is receivable. When that sync fails, the copy never appears,
// the engine fails, and after a power cut the message is in its source
// (to expire again) — never in both queues, never in neither.
func TestExpiredDeadLetterNotReceivableBeforeSync(t *testing.T) {
	syncOutcomes(t, func(t *testing.T, fail bool) {
		pf := newPowerFixture(t, time.Hour)
		pf.withDLQ(5, func(c *QueueConfig) { c.MessageTTL, c.HasMessageTTL = time.Minute, true })
		pf.send("q", body("stale"))
		pf.ps.holdSyncs()
		t.Cleanup(func() { pf.ps.releaseSyncs(nil) })
		pf.clk.Advance(2 * time.Minute)
		// The scheduler's tick moves the message and waits, outside
		// q's lock, for the barrier that publishes the copy.
		poll.CheckFor(t, 20*time.Second, poll.True("the expiry's dead-letter move to wait for a sync (or to show its copy at once)", func() bool {
			return pf.ps.held() == 1 || browseCount(t, pf.e, "dlq") > 0
		}))
		if d := pf.recv("dlq", 10, -1); len(d) != 0 {
			t.Fatalf("expired dead letter %q received before its move was synced", bodies(d))
		}
		if n := browseCount(t, pf.e, "dlq"); n != 0 {
			t.Fatalf("browse lists %d dead-letter copies before their move was synced", n)
		}
		if !fail {
			pf.ps.releaseSyncs(nil)
			var got []Delivery
			poll.CheckFor(t, 20*time.Second, poll.True("the expired message in the dead-letter queue", func() bool {
				got = append(got, pf.recv("dlq", 10, -1)...)
				return len(got) > 0
			}))
			if len(got) != 1 || string(got[0].Body) != "stale" {
				t.Fatalf("after the sync, dlq receive: %q", bodies(got))
			}
			return
		}
		pf.ps.releaseSyncs(syscall.EIO)
		poll.CheckFor(t, 20*time.Second, poll.True("the engine to fail with its sync", func() bool { return pf.e.Failed() != nil }))
		if page, err := pf.e.Browse("dlq", Filter{}, 0, 1000); err != nil || len(page.Messages) != 0 {
			t.Fatalf("after a failed sync browse lists %d dead-letter copies (%v)", len(page.Messages), err)
		}
		if _, err := pf.e.Send("q", []Message{body("x")}); !errors.Is(err, ErrStorage) {
			t.Fatalf("the engine did not fail with its sync: send %v", err)
		}
		pf.powerCut()
		// The move was lost with the power: the message is in q, where
		// it expires (and is moved) again — one copy in all.
		poll.CheckFor(t, 20*time.Second, poll.True("one copy of the message after the power cut", func() bool {
			return browseCount(t, pf.e, "q")+browseCount(t, pf.e, "dlq") == 1
		}))
	})
}

// syncOutcomes runs f as two subtests: the sync that covers the move
// succeeds ("synced"), or fails ("sync fails").
func syncOutcomes(t *testing.T, f func(t *testing.T, fail bool)) {
	for _, fail := range []bool{false, true} {
		name := "synced"
		if fail {
			name = "sync fails"
		}
		t.Run(name, func(t *testing.T) { f(t, fail) })
	}
}

// TestMovedCopyIntoColdQueueNotReceivableBeforeSync: a move's copy into a
// queue whose backlog is cold is written in the queue's key range before
// its batch is synced; refills that pass over it (receives draining the
// cold part) and browsing must not see it until insertCopies publishes it.
func TestMovedCopyIntoColdQueueNotReceivableBeforeSync(t *testing.T) {
	pf := &powerFixture{ps: newPowerStore(), sync: time.Hour, window: 4}
	pf.fixture = &fixture{t: t, st: pf.ps, clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	pf.reopen()
	pf.withDLQ(3, nil)
	for i := 0; i < 20; i++ {
		pf.send("q", body(fmt.Sprintf("q%02d", i)))
	}
	if q := pf.e.queues["q"]; !q.cold.on {
		t.Fatal("q is not cold")
	}
	pf.send("dlq", body("m"))
	holdMoveBatch(pf)
	t.Cleanup(func() { pf.ps.releaseSyncs(nil) })
	if _, err := pf.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Destination: "q", Rate: 1}); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, poll.True("the move batch to wait for its fsync", func() bool { return pf.ps.held() == 1 }))
	if n := browseCount(t, pf.e, "q"); n != 20 {
		t.Fatalf("browse lists %d messages before the move was synced, want 20", n)
	}
	var got []string
	for i := 0; i < 10; i++ {
		got = append(got, bodies(pf.recv("q", 10, time.Hour))...)
	}
	if len(got) != 20 {
		t.Fatalf("received %d (%q) before the move was synced, want the 20 sent", len(got), got)
	}
	pf.ps.releaseSyncs(nil)
	poll.CheckFor(t, 20*time.Second, poll.True("the copy to be published", func() bool { return browseCount(t, pf.e, "q") == 21 }))
	if d := pf.recv("q", 10, -1); len(d) != 1 || string(d[0].Body) != "m" {
		t.Fatalf("after the sync, receive: %q", bodies(d))
	}
}
