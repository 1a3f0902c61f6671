package metrics

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
)

// TestDroppedAndCrashCounters: drops for want of a dead-letter target are
// counted per queue (DLQ-12), and a queue quarantining crash loops exports
// its consumer_crash dead-letter counter from zero (DLQ-22, DLQ-111).
func TestDroppedAndCrashCounters(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("work", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
		c.CrashLimit = 1
	})
	f.create("plain", nil)
	fs := f.scrape()
	expect(t, fs, 0, "sluice_dropped_total", "queue", "plain")
	expect(t, fs, 0, "sluice_dead_lettered_total", "queue", "work", "target", "dlq", "reason", engine.ReasonConsumerCrash)

	f.send("plain", "a")
	ds, err := f.e.Receive(context.Background(), "plain", engine.ReceiveRequest{Max: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if _, err := f.e.Drop("plain", []string{ds[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	f.send("work", "b")
	ds, err = f.e.Receive(context.Background(), "work", engine.ReceiveRequest{Max: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if _, err := f.e.Abandon("work", []string{ds[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if err := f.e.SetPaused("plain", true); err != nil {
		t.Fatal(err)
	}
	fs = f.scrape()
	expect(t, fs, 1, "sluice_queue_paused", "queue", "plain")
	expect(t, fs, 0, "sluice_queue_paused", "queue", "work")
	expect(t, fs, 1, "sluice_dropped_total", "queue", "plain")
	expect(t, fs, 0, "sluice_deleted_total", "queue", "plain")
	expect(t, fs, 1, "sluice_dead_lettered_total", "queue", "work", "target", "dlq", "reason", engine.ReasonConsumerCrash)
}

// TestDeadLetteredByErrorClass: dead letters are counted by reason and
// error class, with the classes of a queue bounded at MaxErrorClasses
// (then "other") and no report counted as "unclassified" (DLQ-22).
func TestDeadLetteredByErrorClass(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("q", func(c *engine.QueueConfig) {
		c.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5}
	})
	fail := func(class string) {
		t.Helper()
		f.send("q", "m")
		ds, err := f.e.Receive(context.Background(), "q", engine.ReceiveRequest{Max: 1})
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v %v", ds, err)
		}
		if _, err := f.e.ReportFailure("q", ds[0].ReceiptHandle, engine.Failure{ErrorClass: class, Terminal: true}); err != nil {
			t.Fatal(err)
		}
	}
	fail("KeyError")
	fail("KeyError")
	fail("")
	for i := 0; i < MaxErrorClasses+3; i++ {
		fail(fmt.Sprintf("Class%d", i))
	}
	fs := f.scrape()
	expect(t, fs, 2, "sluice_dead_lettered_by_class_total", "queue", "q", "reason", engine.ReasonTerminal, "class", "KeyError")
	expect(t, fs, 1, "sluice_dead_lettered_by_class_total", "queue", "q", "reason", engine.ReasonTerminal, "class", ClassUnclassified)
	// KeyError and unclassified took two of the 20 slots.
	expect(t, fs, 5, "sluice_dead_lettered_by_class_total", "queue", "q", "reason", engine.ReasonTerminal, "class", ClassOther)
}
