package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// TestDeletedNameWaitsAcrossARestart: a deleted queue's name is refused
// for NameReuseDelay after a restart too (a gone record in the delete's
// batch; in a cluster, the next leader's engine opens the same way), then
// made again, which removes the record; a later delete sweeps the records
// of older deletes. Before, the wait lived in memory only, and a restart
// or a leader change let the name be made again at once.
func TestDeletedNameWaitsAcrossARestart(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := &fixture{t: t, st: newTestStore(t), clk: clk}
	f.open()
	for _, name := range []string{"q", "old"} {
		f.create(name, nil)
		if err := f.e.DeleteQueue(name); err != nil {
			t.Fatal(err)
		}
	}
	f.restart()
	if _, _, err := f.e.CreateQueue("q", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueDeletedRecently) {
		t.Fatalf("create 0 s after the delete, after a restart: %v, want ErrQueueDeletedRecently", err)
	}
	// Dropped (not deleted) queues leave no wait.
	f.create("dropped", nil)
	if err := f.e.DropQueue("dropped"); err != nil {
		t.Fatal(err)
	}
	f.restart()
	f.create("dropped", nil)
	clk.Advance(NameReuseDelay)
	f.restart()
	f.create("q", nil)
	if got := f.goneRecords(); len(got) != 1 || got[0] != "old" {
		t.Fatalf("gone records after q was made again: %q, want [old]", got)
	}
	// The next delete sweeps old's record; its own stays.
	if err := f.e.DeleteQueue("dropped"); err != nil {
		t.Fatal(err)
	}
	if got := f.goneRecords(); len(got) != 1 || got[0] != "dropped" {
		t.Fatalf("gone records after a later delete: %q, want [dropped]", got)
	}
}

// goneRecords lists the names of the store's gone records.
func (f *fixture) goneRecords() []string {
	f.t.Helper()
	var names []string
	if err := f.st.Scan([]byte{prefixGone}, func(k, _ []byte) error {
		names = append(names, string(k[1:]))
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return names
}

func FuzzDecodeGone(f *testing.F) {
	f.Add(encodeGone(1_700_000_000_000_000_000))
	f.Add([]byte{recordV1})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever decodes is a time that encodes and decodes to itself.
		at, err := decodeGone(b)
		if err == nil {
			at2, err := decodeGone(encodeGone(at))
			if err != nil || at2 != at {
				t.Fatalf("round trip: %x → %d → %d, %v", b, at, at2, err)
			}
		}
	})
}
