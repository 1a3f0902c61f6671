package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// TestReserveName: the shard a name hashes to (own = 0 here) reserves it
// for the first create sent elsewhere; the name's other creates are sent
// there while the reservation is young, and its own CreateQueue refuses
// the name (ErrQueueElsewhere); a restart keeps the reservation; once it is
// older than reserveKeep it binds nothing and is swept by a later one; a
// queue this engine holds answers "here".
func TestReserveName(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := &fixture{t: t, st: newTestStore(t), clk: clk}
	f.opts = func(o *Options) { o.NameTaken = func(string) bool { return false } }
	f.open()
	if to, here, err := f.e.ReserveName("q", 2, 0); err != nil || here || to != 2 {
		t.Fatalf("first reservation: %d, %v, %v; want 2", to, here, err)
	}
	if to, here, err := f.e.ReserveName("q", 1, 0); err != nil || here || to != 2 {
		t.Fatalf("second create's reservation: %d, %v, %v; want the first's shard 2", to, here, err)
	}
	if to, here, err := f.e.ReserveName("q", 0, 0); err != nil || here || to != 2 {
		t.Fatalf("a create placed here: %d, %v, %v; want shard 2", to, here, err)
	}
	if _, _, err := f.e.CreateQueue("q", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueElsewhere) {
		t.Fatalf("create of a name reserved for another shard: %v, want ErrQueueElsewhere", err)
	}
	f.restart()
	if to, _, err := f.e.ReserveName("q", 1, 0); err != nil || to != 2 {
		t.Fatalf("after a restart: %d, %v; want shard 2", to, err)
	}
	// A create placed here needs no reservation, and writes none.
	if to, here, err := f.e.ReserveName("p", 0, 0); err != nil || here || to != 0 {
		t.Fatalf("reservation of a name placed here: %d, %v, %v", to, here, err)
	}
	if to, _, err := f.e.ReserveName("p", 1, 0); err != nil || to != 1 {
		t.Fatalf("after a create placed here reserved nothing: %d, %v; want 1", to, err)
	}
	clk.Advance(reserveKeep)
	if _, _, err := f.e.CreateQueue("q", DefaultQueueConfig(), nil); err != nil {
		t.Fatalf("create once the reservation is old: %v", err)
	}
	if to, here, err := f.e.ReserveName("q", 1, 0); err != nil || !here || to != 0 {
		t.Fatalf("reservation of a queue held here: %d, %v, %v; want here", to, here, err)
	}
	// The next reservation sweeps the old ones (p's): one record left.
	if _, _, err := f.e.ReserveName("r", 1, 0); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := f.st.Scan([]byte{prefixReserve}, func(k, _ []byte) error {
		if string(k[1:]) != "r" {
			t.Errorf("reservation of %q left after the sweep", k[1:])
		}
		n++
		return nil
	}); err != nil || n != 1 {
		t.Fatalf("%d reservations after the sweep, %v; want r's alone", n, err)
	}
}

func FuzzDecodeReservation(f *testing.F) {
	f.Add(encodeReservation(3, 1_700_000_000_000_000_000))
	f.Add([]byte{recordV1})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever decodes is a reservation that encodes and decodes
		// to itself (a varint may arrive in a longer form than the
		// encoder writes).
		s, at, err := decodeReservation(b)
		if err == nil {
			s2, at2, err := decodeReservation(encodeReservation(s, at))
			if err != nil || s2 != s || at2 != at {
				t.Fatalf("round trip: %x → %d, %d → %d, %d, %v", b, s, at, s2, at2, err)
			}
		}
	})
}

// TestHoldDeletedName: a queue deleted on another shard (2) holds its name
// on the shard it hashes to (own = 0) as a fresh reservation for that
// shard, replacing an older one: creates are sent there, this engine's own
// is refused; nothing is written for a delete on this shard or for a name
// this engine holds again.
func TestHoldDeletedName(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := &fixture{t: t, st: newTestStore(t), clk: clk}
	f.opts = func(o *Options) { o.NameTaken = func(string) bool { return false } }
	f.open()
	if to, _, err := f.e.ReserveName("d", 1, 0); err != nil || to != 1 {
		t.Fatalf("reservation: %d, %v", to, err)
	}
	clk.Advance(reserveKeep / 2)
	if err := f.e.HoldDeletedName("d", 2, 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(reserveKeep / 2) // the first reservation's minute is over, not the delete's
	if to, _, err := f.e.ReserveName("d", 1, 0); err != nil || to != 2 {
		t.Fatalf("a create after the delete on shard 2: sent to %d, %v; want 2", to, err)
	}
	if _, _, err := f.e.CreateQueue("d", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueElsewhere) {
		t.Fatalf("create here after the delete elsewhere: %v, want ErrQueueElsewhere", err)
	}
	if err := f.e.HoldDeletedName("e", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.e.CreateQueue("here", DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.e.HoldDeletedName("here", 2, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"e", "here"} {
		if _, err := f.st.Get(reserveKey(name)); err == nil {
			t.Errorf("a reservation of %q was written", name)
		}
	}
}

// TestReserveNameOfANameDeletedHere: a name deleted on the shard it
// hashes to a moment ago is not reserved for another: its creates come
// here, where they are refused as deleted recently, for NameReuseDelay.
func TestReserveNameOfANameDeletedHere(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := &fixture{t: t, st: newTestStore(t), clk: clk}
	f.opts = func(o *Options) { o.NameTaken = func(string) bool { return false } }
	f.open()
	if _, _, err := f.e.CreateQueue("gone", DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.e.DeleteQueue("gone"); err != nil {
		t.Fatal(err)
	}
	if to, _, err := f.e.ReserveName("gone", 2, 0); err != nil || to != 0 {
		t.Fatalf("a create tied to shard 2 right after the delete: sent to %d, %v; want here (0)", to, err)
	}
	if _, _, err := f.e.CreateQueue("gone", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueDeletedRecently) {
		t.Fatalf("create here: %v, want ErrQueueDeletedRecently", err)
	}
	clk.Advance(NameReuseDelay)
	if to, _, err := f.e.ReserveName("gone", 2, 0); err != nil || to != 2 {
		t.Fatalf("after NameReuseDelay: sent to %d, %v; want 2", to, err)
	}
}

// TestHoldDeletedHook: DeleteQueue asks Options.HoldDeleted to hold the
// name before anything of the queue is removed (its record still
// stored); a hold that fails fails the delete with ErrUnavailable and the
// queue is as it was; DropQueue and a delete of a missing queue ask
// nothing.
func TestHoldDeletedHook(t *testing.T) {
	var told []string
	var refuse error
	f := &fixture{t: t, st: newTestStore(t), clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	f.opts = func(o *Options) {
		o.HoldDeleted = func(name string) error {
			if ok, err := StoredQueue(f.st, name); err != nil || !ok {
				t.Errorf("asked to hold %s while its record is gone (%v, %v)", name, ok, err)
			}
			told = append(told, name)
			return refuse
		}
	}
	f.open()
	for _, q := range []string{"deleted", "dropped"} {
		if _, _, err := f.e.CreateQueue(q, DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.e.Send("deleted", []Message{{Body: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	refuse = errors.New("no leader of shard 2")
	if err := f.e.DeleteQueue("deleted"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("delete with the hold refused: %v, want ErrUnavailable", err)
	}
	if info, err := f.e.GetQueue("deleted"); err != nil || info.Visible != 1 {
		t.Fatalf("after the refused delete: %+v, %v; want the queue with its message", info, err)
	}
	refuse = nil
	if err := f.e.DeleteQueue("deleted"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.e.CreateQueue("deleted", DefaultQueueConfig(), nil); !errors.Is(err, ErrQueueDeletedRecently) {
		t.Fatalf("create right after the delete: %v, want ErrQueueDeletedRecently", err)
	}
	if err := f.e.DropQueue("dropped"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.DeleteQueue("never"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatal(err)
	}
	if len(told) != 2 || told[0] != "deleted" || told[1] != "deleted" {
		t.Fatalf("asked to hold %v, want [deleted deleted]", told)
	}
}
