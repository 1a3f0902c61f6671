package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// opLog is a store that records the kind of every delete it is given, by
// key, so a test can see how the engine ends a message's records.
type opLog struct {
	*memstore.Store
	mu      sync.Mutex
	deletes map[string][]store.OpKind
	sets    map[string]int
}

func (s *opLog) Write(b *store.Batch, durable bool) (store.Pending, error) {
	s.mu.Lock()
	for _, op := range b.Ops {
		switch op.Kind {
		case store.OpSet:
			s.sets[string(op.Key)]++
		case store.OpDelete, store.OpSingleDelete:
			s.deletes[string(op.Key)] = append(s.deletes[string(op.Key)], op.Kind)
		}
	}
	s.mu.Unlock()
	return s.Store.Write(b, durable)
}

// TestSingleDeleteOnlyForWriteOnceRecords: the end of a message's life
// single-deletes its content record (written once per sequence number)
// and its state record only when this process wrote that record exactly
// once; a state record written twice, or one a restart left behind, gets
// a plain delete (a single delete over two sets could bring the older
// one back), and a message without one (never received, before or after
// a restart) deletes no state record at all. Every single delete in the log is checked against the sets the
// store saw for that key.
func TestSingleDeleteOnlyForWriteOnceRecords(t *testing.T) {
	st := &opLog{Store: memstore.New(), deletes: map[string][]store.OpKind{}, sets: map[string]int{}}
	f := &fixture{t: t, st: st, clk: newFixture(t).clk}
	f.open()
	f.create("q", nil)
	qid := f.e.queues["q"].id
	f.send("q", body("once"), body("twice"), body("never"), body("restart"))
	byBody := map[string]Delivery{}
	for _, d := range f.recv("q", 4, time.Minute) {
		byBody[string(d.Body)] = d
	}
	// "twice" is released and received again: two state writes.
	if errs, err := f.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: byBody["twice"].ReceiptHandle, Timeout: 0}}); err != nil || errs[0] != nil {
		t.Fatalf("release: %v %v", err, errs)
	}
	again := f.recv("q", 1, time.Minute)
	if len(again) != 1 || string(again[0].Body) != "twice" {
		t.Fatalf("received %v, want twice", bodies(again))
	}
	f.del("q", byBody["once"].ReceiptHandle, again[0].ReceiptHandle)
	// "never" is never deleted by a consumer and "idle" never received;
	// both end after the restart (DeleteMatching): "never" has a state
	// record written before it (how often is unknown), "idle" has none.
	f.send("q", body("idle"))
	f.restart()
	f.del("q", byBody["restart"].ReceiptHandle)
	if n, err := f.e.DeleteMatching("q", Filter{}); err != nil || n != 2 {
		t.Fatalf("DeleteMatching: %d %v (want never and idle)", n, err)
	}

	seqOf := func(s string) uint64 {
		for i, b := range []string{"once", "twice", "never", "restart", "idle"} {
			if b == s {
				return uint64(i + 1)
			}
		}
		t.Fatalf("no message %q", s)
		return 0
	}
	kinds := func(msg string, kind byte) []store.OpKind {
		return st.deletes[string(messageKey(qid, seqOf(msg), kind))]
	}
	single, plain := []store.OpKind{store.OpSingleDelete}, []store.OpKind{store.OpDelete}
	for _, c := range []struct {
		msg          string
		content, sta []store.OpKind
	}{
		{"once", single, single},   // received once, deleted
		{"twice", single, plain},   // state written twice
		{"restart", single, plain}, // state written before a restart
		{"never", single, plain},   // received before the restart: unknown after it
		{"idle", single, nil},      // never received: the restart found no state record
	} {
		if got := kinds(c.msg, kindContent); !equalKinds(got, c.content) {
			t.Errorf("%s: content record deleted with %v, want %v", c.msg, got, c.content)
		}
		if got := kinds(c.msg, kindState); !equalKinds(got, c.sta) {
			t.Errorf("%s: state record deleted with %v, want %v", c.msg, got, c.sta)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, ds := range st.deletes {
		for _, d := range ds {
			if d == store.OpSingleDelete && st.sets[k] > 1 {
				t.Errorf("key %x single-deleted after %d sets", k, st.sets[k])
			}
		}
	}
}

// TestNoStateDeleteForAMessageNeverReceived: a message this process
// created and nobody received has no state record, so its end writes no
// delete for one.
func TestNoStateDeleteForAMessageNeverReceived(t *testing.T) {
	st := &opLog{Store: memstore.New(), deletes: map[string][]store.OpKind{}, sets: map[string]int{}}
	f := &fixture{t: t, st: st, clk: newFixture(t).clk}
	f.open()
	f.create("q", nil)
	f.send("q", body("idle"))
	if n, err := f.e.DeleteMatching("q", Filter{}); err != nil || n != 1 {
		t.Fatalf("DeleteMatching: %d %v", n, err)
	}
	qid := f.e.queues["q"].id
	if got := st.deletes[string(messageKey(qid, 1, kindState))]; len(got) != 0 {
		t.Fatalf("state record of a never-received message deleted with %v", got)
	}
	if got := st.deletes[string(messageKey(qid, 1, kindContent))]; !equalKinds(got, []store.OpKind{store.OpSingleDelete}) {
		t.Fatalf("content record deleted with %v", got)
	}
}

func equalKinds(a, b []store.OpKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
