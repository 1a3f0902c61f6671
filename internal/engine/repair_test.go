package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

func setKey(t *testing.T, st store.Store, k, v []byte) {
	t.Helper()
	var b store.Batch
	b.Set(k, v)
	if _, err := st.Write(&b, true); err != nil {
		t.Fatal(err)
	}
}

func hasKey(st store.Store, k []byte) bool {
	_, err := st.Get(k)
	return err == nil
}

// TestRecoveryRefusesUnexplainedRecords (issue #10, hole 8): records no
// crash or race accounts for (a message state without its content, a
// record of a queue id never allocated) are not dropped silently: Open
// refuses to start and changes nothing; Repair lists them (dry run), then
// drops them, and the broker starts with everything else intact.
func TestRecoveryRefusesUnexplainedRecords(t *testing.T) {
	st := memstore.New()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e, err := Open(Options{Store: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.CreateQueue("q", DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Send("q", []Message{body("keep")}); err != nil {
		t.Fatal(err)
	}
	q, _ := e.lookup("q")
	e.Close()

	stray := messageKey(q.id, 999, kindState)
	setKey(t, st, stray, encodeState(&message{recvCount: 1}))
	alien := messageKey(77, 1, kindContent)
	setKey(t, st, alien, []byte{recordV1})
	alienDelay := delayKey(78, 1)
	setKey(t, st, alienDelay, binary.AppendVarint(nil, 1))

	var logs bytes.Buffer
	_, err = Open(Options{Store: st, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !errors.Is(err, ErrNeedsRepair) {
		t.Fatalf("open with unexplained records: %v, want ErrNeedsRepair", err)
	}
	for _, want := range []string{"without its content record", "never allocated", "sluice repair"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !strings.Contains(logs.String(), "refusing to start") {
		t.Errorf("no log line: %s", logs.String())
	}
	if !hasKey(st, stray) || !hasKey(st, alien) || !hasKey(st, alienDelay) {
		t.Fatal("a refused start changed the store")
	}

	rep, err := Repair(st, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Unexplained) != 3 || rep.Dropped || !hasKey(st, stray) {
		t.Fatalf("dry run: %+v", rep)
	}
	rep, err = Repair(st, nil, false)
	if err != nil || len(rep.Unexplained) != 3 || !rep.Dropped {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	if hasKey(st, stray) || hasKey(st, alien) || hasKey(st, alienDelay) {
		t.Fatal("repair left the records")
	}
	e, err = Open(Options{Store: st, Clock: clk})
	if err != nil {
		t.Fatalf("open after repair: %v", err)
	}
	defer e.Close()
	d, err := e.Receive(t.Context(), "q", ReceiveRequest{Max: 10, WaitSet: true})
	if err != nil || len(d) != 1 || string(d[0].Body) != "keep" {
		t.Fatalf("after repair: %v %v", bodies(d), err)
	}
}

// TestRecoveryDropsDeletedQueueLeftoversLoudly (issue #10, hole 8): records
// of a deleted queue's id (writes that raced its delete) are dropped, with
// a log line and a count.
func TestRecoveryDropsDeletedQueueLeftoversLoudly(t *testing.T) {
	st := memstore.New()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e, err := Open(Options{Store: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.CreateQueue("gone", DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	q, _ := e.lookup("gone")
	if err := e.DeleteQueue("gone"); err != nil {
		t.Fatal(err)
	}
	e.Close()
	late := messageKey(q.id, 1, kindState)
	setKey(t, st, late, encodeState(&message{recvCount: 1}))
	lateDelay := delayKey(q.id, 1)
	setKey(t, st, lateDelay, binary.AppendVarint(nil, clk.Now().Add(time.Minute).UnixNano()))

	var logs bytes.Buffer
	e, err = Open(Options{Store: st, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.RecoveryDropped() != 2 || hasKey(st, late) || hasKey(st, lateDelay) {
		t.Fatalf("dropped %d, keys still there: %v %v", e.RecoveryDropped(), hasKey(st, late), hasKey(st, lateDelay))
	}
	if !strings.Contains(logs.String(), "deleted queue") {
		t.Fatalf("no log line: %s", logs.String())
	}
}

// TestPurgeDuringDeadLetterMoveKeepsRecordsConsistent: a purge of the
// dead-letter queue between the move's write and its insert into the
// queue's memory deleted the copy's content record, leaving a message in
// memory with nothing on disk; its next lease wrote a state record that
// recovery cannot explain. The copy is written again after such a purge.
func TestPurgeDuringDeadLetterMoveKeepsRecordsConsistent(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.withDLQ(1, nil)
	dlq, _ := pf.e.lookup("dlq")
	pf.send("q", body("poison"))
	pf.recv("q", 1, time.Second)
	pf.clk.Advance(2 * time.Second)
	target := qidPrefix(prefixMessage, dlq.id)
	var hooked atomic.Bool
	pf.ps.afterWrite = func(b *store.Batch) {
		for _, op := range b.Ops {
			if op.Kind == store.OpSet && bytes.HasPrefix(op.Key, target) && hooked.CompareAndSwap(false, true) {
				if err := pf.e.PurgeQueue("dlq"); err != nil {
					t.Errorf("purge: %v", err)
				}
				return
			}
		}
	}
	pf.recv("q", 1, time.Second) // dead-letters the poison message
	pf.ps.afterWrite = nil
	if !hooked.Load() {
		t.Fatal("no dead-letter move")
	}
	got := pf.recv("dlq", 1, time.Minute)
	if len(got) != 1 {
		t.Fatalf("dead letter not in the DLQ: %v", bodies(got))
	}
	pf.e.Close()
	pf.reopen()
	pf.clk.Advance(2 * time.Minute)
	if again := pf.recv("dlq", 1, time.Minute); len(again) != 1 || string(again[0].Body) != "poison" {
		t.Fatalf("after restart: %v", bodies(again))
	}
}
