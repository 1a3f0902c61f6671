package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// sendGroup sends one FIFO message per body, all in group g.
func (f *fixture) sendGroup(q, g string, bodies ...string) {
	f.t.Helper()
	for _, b := range bodies {
		f.send(q, Message{Body: []byte(b), GroupID: g, DedupID: g + "/" + b})
	}
}

func (f *fixture) changeVis(q, handle string, d time.Duration) {
	f.t.Helper()
	errs, err := f.e.ChangeVisibility(q, []VisibilityChange{{ReceiptHandle: handle, Timeout: d}})
	if err != nil || errs[0] != nil {
		f.t.Fatalf("change visibility: %v %v", err, errs)
	}
}

// TestFIFOVisibleHeadNotHiddenByLaterLease: SQS delivers the visible head
// of a group while a later message of the group is in flight; only the
// messages after an in-flight one wait.
func TestFIFOVisibleHeadNotHiddenByLaterLease(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", fifoCfg)
	f.sendGroup("q.fifo", "g1", "m1", "m2")
	f.sendGroup("q.fifo", "g2", "n1")
	d := f.recv("q.fifo", 2, 30*time.Second)
	if fmt.Sprint(bodies(d)) != "[m1 m2]" {
		t.Fatalf("first receive %v", bodies(d))
	}
	f.changeVis("q.fifo", d[0].ReceiptHandle, 0)
	// g2 has been waiting longer than g1's released head.
	if got := bodies(f.recv("q.fifo", 3, 30*time.Second)); fmt.Sprint(got) != "[n1 m1]" {
		t.Fatalf("after releasing m1 while m2 is in flight: %v", got)
	}
}

// TestFIFOExtendedLeaseHidesOnlyLaterMessages follows the AWS recording of
// extending one of three leased messages: once the other leases end, the
// messages in front of the extended one are delivered, those behind it are
// not.
func TestFIFOExtendedLeaseHidesOnlyLaterMessages(t *testing.T) {
	for pos, want := range []string{"[]", "[a]", "[a b]"} {
		t.Run(fmt.Sprint(pos), func(t *testing.T) {
			f := newFixture(t)
			f.create("q.fifo", fifoCfg)
			f.sendGroup("q.fifo", "g", "a", "b", "c")
			d := f.recv("q.fifo", 5, time.Second)
			if len(d) != 3 {
				t.Fatalf("received %v", bodies(d))
			}
			f.changeVis("q.fifo", d[pos].ReceiptHandle, 4*time.Second)
			f.clk.Advance(2500 * time.Millisecond)
			if got := bodies(f.recv("q.fifo", 5, 30*time.Second)); fmt.Sprint(got) != want {
				t.Fatalf("extended message %d: got %v, want %s", pos, got, want)
			}
		})
	}
}

// TestFIFONoLaterMessageWhileEarlierInFlight: the half of the rule that did
// not change — a message is never delivered while an earlier message of its
// group is in flight or waiting out a delay, even when it is visible.
func TestFIFONoLaterMessageWhileEarlierInFlight(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", fifoCfg)
	f.sendGroup("q.fifo", "g", "a", "b", "c")
	d := f.recv("q.fifo", 3, 30*time.Second)
	if len(d) != 3 {
		t.Fatalf("received %v", bodies(d))
	}
	// b and c visible again, a still leased: nothing may be delivered.
	f.changeVis("q.fifo", d[1].ReceiptHandle, 0)
	f.changeVis("q.fifo", d[2].ReceiptHandle, 0)
	if got := f.recv("q.fifo", 10, 30*time.Second); len(got) != 0 {
		t.Fatalf("delivered %v while the group's head is in flight", bodies(got))
	}
	// Deleting a releases b and c, in order.
	f.del("q.fifo", d[0].ReceiptHandle)
	if got := bodies(f.recv("q.fifo", 10, 30*time.Second)); fmt.Sprint(got) != "[b c]" {
		t.Fatalf("after deleting the head: %v", got)
	}
}

// TestFIFOHeadRuleSurvivesRestart: the group state is rebuilt from the
// stored leases, so the same rule holds after a restart.
func TestFIFOHeadRuleSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	f.create("q.fifo", fifoCfg)
	f.sendGroup("q.fifo", "g", "a", "b")
	d := f.recv("q.fifo", 2, 30*time.Second)
	f.changeVis("q.fifo", d[0].ReceiptHandle, 0)
	f.restart()
	if got := bodies(f.recv("q.fifo", 10, 30*time.Second)); fmt.Sprint(got) != "[a]" {
		t.Fatalf("after restart: %v", got)
	}
}

// TestChangeVisibilityAfterLeaseLapsed: SQS accepts a visibility change
// with the current handle after the lease ended; the message is leased
// again for the new timeout. On FIFO, a handle from an earlier receive
// stays refused.
func TestChangeVisibilityAfterLeaseLapsed(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprint("fifo=", fifo), func(t *testing.T) {
			f := newFixture(t)
			name := "q"
			if fifo {
				name = "q.fifo"
				f.create(name, fifoCfg)
				f.sendGroup(name, "g", "a")
			} else {
				f.create(name, nil)
				f.send(name, body("a"))
			}
			d := f.recv(name, 1, time.Second)
			f.clk.Advance(2 * time.Second)
			f.changeVis(name, d[0].ReceiptHandle, 10*time.Second)
			if got := f.recv(name, 1, time.Second); len(got) != 0 {
				t.Fatalf("late extension did not lease the message again: %v", bodies(got))
			}
			f.clk.Advance(11 * time.Second)
			d2 := f.recv(name, 1, 30*time.Second)
			if len(d2) != 1 {
				t.Fatal("message lost after the late extension ended")
			}
			errs, _ := f.e.ChangeVisibility(name, []VisibilityChange{{ReceiptHandle: d[0].ReceiptHandle}})
			if fifo != errors.Is(errs[0], ErrMessageNotAvailable) {
				t.Fatalf("earlier handle after a new receive: %v", errs[0])
			}
		})
	}
}

// TestReceiveOnTake: OnTake sees each receive's count under the queue's
// lock, so GetQueue never observes a taken message before it is counted.
func TestReceiveOnTake(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("a"), body("b"), body("c"))
	var taken []int
	var sawVisible int
	d, err := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 2, WaitSet: true, OnTake: func(n int) {
		taken = append(taken, n)
		sawVisible = f.e.queueVisibleLocked("q") // under the lock: already taken
	}})
	if err != nil || len(d) != 2 || fmt.Sprint(taken) != "[2]" || sawVisible != 1 {
		t.Fatalf("receive %d, %v; OnTake %v saw %d visible", len(d), err, taken, sawVisible)
	}
}

// queueVisibleLocked reads a queue's visible count while its lock is held
// by the caller's goroutine (only for OnTake tests).
func (e *Engine) queueVisibleLocked(name string) int {
	q, err := e.lookup(name)
	if err != nil {
		return -1
	}
	return q.nState[stateVisible]
}

// A receive fills ReceiveRequest.Reuse when it is large enough, and never
// the array of a receive attempt, which the engine keeps for its retries.
func TestReceiveReuse(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.send("q", body("a"), body("b"), body("c"))
	buf := make([]Delivery, 0, 10)
	d, err := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, WaitSet: true, Reuse: buf})
	if err != nil || len(d) != 3 || &d[0] != &buf[:1][0] || string(d[0].Body) != "a" || string(d[2].Body) != "c" {
		t.Fatalf("receive %d, %v: reused %v", len(d), err, len(d) > 0 && &d[0] == &buf[:1][0])
	}
	f.send("q", body("d"), body("e"))
	small := make([]Delivery, 0, 1)
	d, err = f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, WaitSet: true, Reuse: small})
	if err != nil || len(d) != 2 || &d[0] == &small[:1][0] {
		t.Fatalf("receive into too small an array: %d, %v", len(d), err)
	}

	f.create("f.fifo", func(c *QueueConfig) { c.FIFO = true })
	f.send("f.fifo", Message{Body: []byte("x"), GroupID: "g", DedupID: "x"})
	buf = make([]Delivery, 0, 10)
	req := ReceiveRequest{Max: 10, WaitSet: true, AttemptID: "try-1", Reuse: buf}
	d, err = f.e.Receive(context.Background(), "f.fifo", req)
	if err != nil || len(d) != 1 || &d[0] == &buf[:1][0] {
		t.Fatalf("receive attempt: %d, %v (the kept attempt must not be the caller's array)", len(d), err)
	}
	clear(buf[:cap(buf)])
	again, err := f.e.Receive(context.Background(), "f.fifo", req)
	if err != nil || len(again) != 1 || string(again[0].Body) != "x" || again[0].ReceiptHandle != d[0].ReceiptHandle {
		t.Fatalf("the attempt's retry: %+v, %v", again, err)
	}
}
