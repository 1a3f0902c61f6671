package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// TestDeliveredBodiesMakeRoomUnderPressure: while the bodies in memory take
// half of the body budget or more, a delivered message lets go of its body
// (dropDeliveredBodyLocked), so that messages sent while many are in
// flight keep theirs in memory; a delivered message that comes back (its
// visibility timeout ran out) is delivered again with its body, read from
// the store. Below half the budget, delivered messages keep their bodies.
func TestDeliveredBodiesMakeRoomUnderPressure(t *testing.T) {
	const (
		budget = 64 << 10
		size   = 1 << 10
	)
	f := &fixture{t: t, st: newTestStore(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.opts = func(o *Options) { o.BodyMemoryBudget = budget }
	f.open()
	f.create("q", nil)
	sent := map[string]bool{}
	send := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			b := fmt.Sprintf("%04d-%s", i, strings.Repeat("x", size-5))
			sent[b] = true
			f.send("q", Message{Body: []byte(b)})
		}
	}
	receive := func(n int, vis time.Duration) []Delivery {
		t.Helper()
		var got []Delivery
		for len(got) < n {
			d := f.recv("q", min(10, n-len(got)), vis)
			if len(d) == 0 {
				t.Fatalf("received %d of %d", len(got), n)
			}
			for _, m := range d {
				if !sent[string(m.Body)] {
					t.Fatalf("body %.20q… (%d bytes) is not one that was sent", m.Body, len(m.Body))
				}
			}
			got = append(got, d...)
		}
		return got
	}

	// Below half the budget: delivered messages keep their bodies.
	send(0, 8)
	receive(8, 30*time.Second)
	if got := f.e.memBodies.Load(); got != 8*size {
		t.Fatalf("below half the budget: %d body bytes held after delivering 8 of %d bytes, want all kept", got, size)
	}

	// At half or more: deliveries let bodies go until under half.
	send(8, 40) // 48 KiB held
	receive(40, 30*time.Second)
	if got := f.e.memBodies.Load(); got >= budget/2 {
		t.Fatalf("%d body bytes held with 48 messages in flight, want under half the budget (%d)", got, budget/2)
	}

	// New messages find room: every waiting message has its body.
	send(48, 24)
	q, err := f.e.lookup("q")
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	waiting, without := 0, 0
	for _, m := range q.msgs {
		if m.state == stateVisible {
			waiting++
			if m.body == nil {
				without++
			}
		}
	}
	q.mu.Unlock()
	if waiting != 24 || without != 0 {
		t.Fatalf("%d waiting messages, %d of them without their body in memory; want 24, 0", waiting, without)
	}

	// The in-flight ones come back and are delivered again, bodies intact.
	f.clk.Advance(31 * time.Second)
	got := receive(72, 30*time.Second)
	seen := map[string]bool{}
	for _, d := range got {
		seen[string(d.Body)] = true
	}
	if len(seen) != 72 {
		t.Fatalf("redelivered %d distinct bodies, want 72", len(seen))
	}
	var handles []string
	for _, d := range got {
		handles = append(handles, d.ReceiptHandle)
	}
	for _, err := range f.del("q", handles...) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := f.e.memBodies.Load(); got != 0 {
		t.Fatalf("%d body bytes still accounted with the queue empty", got)
	}
}
