package engine

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// TestStoredQueues: the catalogue reads see exactly the queue records of
// the store, without an engine of their own: created queues, with a
// prefix, and a deleted queue gone.
func TestStoredQueues(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"orders", "orders-dlq", "billing.fifo", "a"} {
		cfg := DefaultQueueConfig()
		if name == "billing.fifo" {
			cfg.FIFO = true
		}
		if _, _, err := f.e.CreateQueue(name, cfg, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	if err := f.e.DeleteQueue("a"); err != nil {
		t.Fatal(err)
	}
	names, err := StoredQueueNames(f.st, "")
	if err != nil || !slices.Equal(names, []string{"billing.fifo", "orders", "orders-dlq"}) {
		t.Fatalf("StoredQueueNames(\"\") = %q, %v", names, err)
	}
	names, err = StoredQueueNames(f.st, "orders")
	if err != nil || !slices.Equal(names, []string{"orders", "orders-dlq"}) {
		t.Fatalf("StoredQueueNames(orders) = %q, %v", names, err)
	}
	if names, err := StoredQueueNames(f.st, "zzz"); err != nil || len(names) != 0 {
		t.Fatalf("StoredQueueNames(zzz) = %q, %v", names, err)
	}
	for name, want := range map[string]bool{"orders": true, "billing.fifo": true, "a": false, "nope": false, "": false, "bad name": false} {
		if got, err := StoredQueue(f.st, name); err != nil || got != want {
			t.Errorf("StoredQueue(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
}

// TestNameTakenRefusesACreate: a name Options.NameTaken reports as living
// elsewhere (another shard) is not created here (ErrQueueElsewhere), and
// the hook is asked only for names this engine does not hold: an existing
// queue's create answers as always.
func TestNameTakenRefusesACreate(t *testing.T) {
	taken := map[string]bool{}
	var asked []string
	e, err := Open(Options{Store: newTestStore(t), NameTaken: func(name string) bool {
		asked = append(asked, name)
		return taken[name]
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, created, err := e.CreateQueue("here", DefaultQueueConfig(), nil); err != nil || !created {
		t.Fatalf("create here: %v, %v", created, err)
	}
	taken["here"], taken["there"] = true, true
	if _, created, err := e.CreateQueue("here", DefaultQueueConfig(), nil); err != nil || created {
		t.Fatalf("create of an existing queue: created %v, %v", created, err)
	}
	if _, _, err := e.CreateQueue("there", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueElsewhere) {
		t.Fatalf("create of a name taken elsewhere: %v, want ErrQueueElsewhere", err)
	}
	if names := e.ListQueues(""); !slices.Equal(names, []string{"here"}) {
		t.Fatalf("queues %q", names)
	}
	if !slices.Equal(asked, []string{"here", "there"}) {
		t.Fatalf("NameTaken asked for %q; want here (new) and there, not here again", asked)
	}

	// Without QueueHeldElsewhere (no mover) a RedrivePolicy naming a
	// queue of another shard is refused: its dead letters could not move.
	cfg := DefaultQueueConfig()
	cfg.DeadLetter = &DeadLetterPolicy{Target: "there", MaxReceiveCount: 3}
	_, _, err = e.CreateQueue("src", cfg, nil)
	if ce := (*ConfigError)(nil); !errors.As(err, &ce) || ce.Reason != "dead-letter target queue does not exist" {
		t.Fatalf("a dead-letter target on another shard, no mover: %v", err)
	}
	cfg.DeadLetter.Target = "nowhere"
	_, _, err = e.CreateQueue("src", cfg, nil)
	if ce := (*ConfigError)(nil); !errors.As(err, &ce) || ce.Reason != "dead-letter target queue does not exist" {
		t.Fatalf("a dead-letter target that is nowhere: %v", err)
	}
}

// BenchmarkStoredDeadLetterSources measures the read a cluster with
// shards makes of each other shard's copy whenever a DLQ's sources are
// listed (metrics scrape, alert evaluation, admin API, dashboard): a
// pebble store of 1,000 queues, every other one with a RedrivePolicy. It
// reports, it asserts nothing:
//
//	go test -run '^$' -bench StoredDeadLetterSources ./internal/engine/
func BenchmarkStoredDeadLetterSources(b *testing.B) {
	st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := Open(Options{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const n = 1000
	for i := range n {
		cfg := DefaultQueueConfig()
		if i%2 == 1 {
			cfg.DeadLetter = &DeadLetterPolicy{Target: "q" + strconv.Itoa(i-1), MaxReceiveCount: 5}
		}
		if _, _, err := e.CreateQueue("q"+strconv.Itoa(i), cfg, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		m, err := StoredDeadLetterSources(st)
		if err != nil || len(m) != n/2 {
			b.Fatalf("%d dead-letter queues, %v", len(m), err)
		}
	}
}
