package engine

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// TestSeqNeverGoesBackwards (issue #10, hole 6): a dead-letter move
// reserves the target's sequence number under the source's lock, while a
// send on the target stores its own under the target's. When the move's
// batch lands after the send's, the stored highest sequence number must
// not go back: after a restart a FIFO SequenceNumber is never reused.
func TestSeqNeverGoesBackwards(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("t.fifo", fifoCfg)
	pf.create("s.fifo", func(c *QueueConfig) {
		fifoCfg(c)
		c.DeadLetter = &DeadLetterPolicy{Target: "t.fifo", MaxReceiveCount: 1}
	})
	tq, err := pf.e.lookup("t.fifo")
	if err != nil {
		t.Fatal(err)
	}
	pf.send("s.fifo", Message{Body: []byte("poison"), GroupID: "g", DedupID: "p"})
	d := pf.recv("s.fifo", 1, time.Second)
	if len(d) != 1 {
		t.Fatal("no delivery")
	}
	pf.clk.Advance(2 * time.Second)

	// While the dead-letter move's batch is on its way to the store, a
	// send on the target reserves and stores the next number.
	var sent atomic.Value
	var hooked atomic.Bool
	target := qidPrefix(prefixMessage, tq.id)
	pf.ps.beforeWrite = func(b *store.Batch) {
		for _, op := range b.Ops {
			if op.Kind == store.OpSet && bytes.HasPrefix(op.Key, target) && hooked.CompareAndSwap(false, true) {
				res, err := pf.e.Send("t.fifo", []Message{{Body: []byte("later"), GroupID: "h", DedupID: "l"}})
				if err != nil || res[0].Err != nil {
					t.Errorf("send: %v %v", err, res)
				}
				sent.Store(res[0].SequenceNumber)
				return
			}
		}
	}
	// The second receive finds the receive limit reached: dead-letter.
	if got := pf.recv("s.fifo", 1, time.Second); len(got) != 0 {
		t.Fatalf("poison message delivered again: %v", bodies(got))
	}
	pf.ps.beforeWrite = nil
	if !hooked.Load() {
		t.Fatal("the dead-letter move was never written")
	}
	// The later message is consumed and deleted: only the sequence
	// record remembers its number.
	for _, m := range pf.recv("t.fifo", 10, time.Minute) {
		if string(m.Body) == "later" {
			pf.del("t.fifo", m.ReceiptHandle)
		}
	}
	pf.e.Close()
	pf.reopen()
	res := pf.send("t.fifo", Message{Body: []byte("after restart"), GroupID: "h", DedupID: "a"})
	before := sent.Load().(string)
	if res[0].SequenceNumber <= before {
		t.Fatalf("sequence number went backwards across a restart: %s after %s", res[0].SequenceNumber, before)
	}
}
