package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
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

// TestPriorityAheadOfColdBacklog: on a priority queue whose backlog is
// mostly on disk, sends above the lowest priority are delivered before
// the backlog, up to a second window of them; memory stays bounded.
func TestPriorityAheadOfColdBacklog(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("pq", priorityQueue)
		f.sendN("pq", 0, 500) // priority 0: all but the window cold
		var urgent []Message
		for i := range coldWindow {
			urgent = append(urgent, prio(fmt.Sprintf("u%02d", i), 2))
		}
		for i := 0; i < len(urgent); i += 10 {
			f.send("pq", urgent[i:min(i+10, len(urgent))]...)
		}
		// Beyond two windows waiting in memory a priority send goes
		// cold too, and comes in sequence order.
		f.send("pq", prio("late", 3))
		got := bodies(f.recv("pq", 10, 30*time.Second))
		got = append(got, bodies(f.recv("pq", 10, 30*time.Second))...)
		for i := range coldWindow {
			if want := fmt.Sprintf("u%02d", i); got[i] != want {
				t.Fatalf("receive %d: %q, want %q (all: %v)", i, got[i], want, got)
			}
		}
		if mem := f.e.MemoryHeld(); mem > coldMemBound {
			t.Fatalf("memory %d over the bound %d", mem, coldMemBound)
		}
		// Everything else arrives exactly once.
		seen := map[string]bool{}
		for _, s := range got {
			seen[s] = true
		}
		for {
			ds := f.recv("pq", 10, 30*time.Second)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				if seen[string(d.Body)] {
					t.Fatalf("%s twice", d.Body)
				}
				seen[string(d.Body)] = true
			}
		}
		if len(seen) != 500+coldWindow+1 || !seen["late"] {
			t.Fatalf("received %d distinct, want %d", len(seen), 500+coldWindow+1)
		}
	})
}
