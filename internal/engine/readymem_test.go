package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestReadyMemoryBudgetSqueezesWindows: a backlog spread over many queues,
// each deeper than its window. Without a bound across queues every queue
// would hold a window (here 40 × 256 messages); with ReadyMemoryBudget the
// engine's index stays near the budget plus a squeezed window per queue,
// while sending, after a restart (recovery loads the windows the same
// way) and while draining, and every message is received exactly once.
func TestReadyMemoryBudgetSqueezesWindows(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		const (
			queues   = 40
			perQueue = 600
			window   = 256
			budget   = 256 << 10 // about 700 small messages' index
		)
		f.window, f.readyMem = window, budget
		f.restartCold()
		// Each queue may hold a squeezed window and one refill's worth
		// of it beyond the budget, plus a batch being received.
		bound := int64(budget + queues*(2*SqueezedReadyWindow+10)*(MessageOverhead+128))
		unbounded := int64(queues * window * MessageOverhead)
		if bound >= unbounded {
			t.Fatalf("the test cannot tell: bound %d, a window per queue %d", bound, unbounded)
		}
		check := func(when string) {
			t.Helper()
			if held := f.e.MemoryHeld(); held > bound {
				t.Fatalf("%s: %d bytes held, bound %d (a window per queue: about %d)", when, held, bound, unbounded)
			}
		}
		name := func(i int) string { return fmt.Sprintf("q%02d", i) }
		for i := range queues {
			f.create(name(i), nil)
		}
		for i := range queues {
			f.sendN(name(i), i*perQueue, perQueue)
			check(fmt.Sprintf("after filling %d queues", i+1))
		}
		f.restartCold()
		check("after a restart")
		seen := map[string]int{}
		for round := 0; ; round++ {
			got := 0
			for i := range queues {
				d := f.recv(name(i), 10, time.Hour)
				var hs []string
				for _, m := range d {
					seen[string(m.Body)]++
					hs = append(hs, m.ReceiptHandle)
				}
				for _, err := range f.del(name(i), hs...) {
					if err != nil {
						t.Fatal(err)
					}
				}
				got += len(d)
			}
			check(fmt.Sprintf("drain round %d", round))
			if got == 0 {
				break
			}
		}
		if len(seen) != queues*perQueue {
			t.Fatalf("received %d distinct messages, want %d", len(seen), queues*perQueue)
		}
		for b, c := range seen {
			if c != 1 {
				t.Fatalf("%s received %d times", b, c)
			}
		}
		for i := range queues {
			if n := f.count(name(i)); n != 0 {
				t.Fatalf("%s: %d left", name(i), n)
			}
		}
	})
}
