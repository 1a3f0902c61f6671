package engine

import (
	"strings"
	"testing"
)

// TestMemoryHeldCountsEverything: the engine's memory count covers each
// message's fixed overhead, attributes and AMQP envelope besides its body,
// and FIFO deduplication entries while they are young; it returns to zero when messages are
// deleted, purged or their queue deleted, and it is rebuilt the same at
// restart.
func TestMemoryHeldCountsEverything(t *testing.T) {
	f := newFixture(t)
	f.create("q", nil)
	f.create("q.fifo", func(c *QueueConfig) { c.FIFO = true })
	if n := f.e.MemoryHeld(); n != 0 {
		t.Fatalf("empty engine holds %d bytes", n)
	}
	big := strings.Repeat("v", 10_000)
	env := []byte(strings.Repeat("e", 5_000))
	f.send("q", Message{Body: []byte("x"), Attributes: []Attribute{{Name: "a", DataType: "String", StringValue: big}}})
	withAttrs := f.e.MemoryHeld()
	if withAttrs < MessageOverhead+10_000+1 {
		t.Fatalf("a message with a 10,000-byte attribute holds %d bytes", withAttrs)
	}
	f.send("q", Message{Body: []byte("y"), Envelope: env})
	withEnv := f.e.MemoryHeld() - withAttrs
	if withEnv < MessageOverhead+5_000+1 {
		t.Fatalf("a message with a 5,000-byte envelope holds %d bytes", withEnv)
	}
	before := f.e.MemoryHeld()
	f.send("q.fifo", Message{Body: []byte("z"), GroupID: "g", DedupID: strings.Repeat("d", 100)})
	fifo := f.e.MemoryHeld() - before
	if fifo < MessageOverhead+DedupEntryOverhead+200 {
		t.Fatalf("a FIFO message with its dedup entry holds %d bytes", fifo)
	}

	// The dedup entry is young (in memory) until its write has settled;
	// then it is only on disk, and a restart does not load it.
	entry := int64(DedupEntryOverhead + 100 + len("g"))
	held := f.e.MemoryHeld() - entry
	f.settleYoung("q.fifo")
	if n := f.e.MemoryHeld(); n != held {
		t.Fatalf("once its write settled, the engine holds %d bytes, want %d", n, held)
	}
	f.restart()
	if n := f.e.MemoryHeld(); n != held {
		t.Fatalf("after restart the engine holds %d bytes, before %d", n, held)
	}

	// Delete one, purge one queue, delete the other: back to zero.
	d := f.recv("q", 10, 30_000_000_000)
	if len(d) != 2 {
		t.Fatalf("received %d", len(d))
	}
	if errs := f.del("q", d[0].ReceiptHandle); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if n := f.e.MemoryHeld(); n >= held {
		t.Fatalf("a delete freed nothing: %d bytes, before %d", n, held)
	}
	if err := f.e.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.PurgeQueue("q.fifo"); err != nil {
		t.Fatal(err)
	}
	if n := f.e.MemoryHeld(); n != 0 {
		t.Fatalf("after deleting and purging everything the engine holds %d bytes", n)
	}
}
