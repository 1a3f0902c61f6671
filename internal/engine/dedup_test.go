package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
)

// Tests of FIFO deduplication on disk (dedup.go, issue #13). They run on
// memstore and pebble (coldStores).

// dedupRecords counts the D and E records of queue name in the store.
func (f *coldFixture) dedupRecords(name string) (d, e int) {
	f.t.Helper()
	q, err := f.e.lookup(name)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range []byte{prefixDedup, prefixDedupExpiry} {
		err := f.st.ScanRange(qidPrefix(p, q.id), qidPrefix(p, q.id+1), func(_, _ []byte) error {
			if p == prefixDedup {
				d++
			} else {
				e++
			}
			return nil
		})
		if err != nil {
			f.t.Fatal(err)
		}
	}
	return d, e
}

// young is the number of entries in queue name's young set.
func (f *fixture) young(name string) int {
	f.t.Helper()
	q, err := f.e.lookup(name)
	if err != nil {
		f.t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.dedupYoung)
}

// settleYoung advances the clock a second at a time until queue name's
// young set is empty: its writes have settled and the queue has been
// advanced past their linger. Each step also advances the queue itself (a
// stats read), as any receive would, so that the test does not depend on
// when the engine's scheduler gets the CPU; it fails after a simulated
// minute. (An earlier version waited only until the scheduler's heap held
// no due entry. That is not enough: the scheduler pops its due entries
// first and ticks their queues after, so under -race load the test could
// step the clock sixty times between the pop and the tick and fail, about
// once in a hundred runs. Traced on 2026-11-29: every such failure's young
// set emptied a few milliseconds later, the tick having run.)
func (f *fixture) settleYoung(name string) {
	f.t.Helper()
	start := f.clk.Now()
	poll.AdvanceUntil(f.t, f.clk, time.Second, 1, "the young set of "+name+" emptied", func() bool {
		if _, err := f.e.GetQueue(name); err != nil {
			f.t.Fatal(err)
		}
		return f.young(name) == 0 || f.clk.Now().Sub(start) > time.Minute
	})
	if n := f.young(name); n != 0 {
		f.t.Fatalf("young set of %s still holds %d entries after %v", name, n, f.clk.Now().Sub(start))
	}
}

func dedupMsg(group, id string) Message {
	return Message{Body: []byte(group + "/" + id), GroupID: group, DedupID: id}
}

// TestDedupFromYoungSetDiskAndAfterRestart: a duplicate is caught while
// its entry is young, after it has left memory (answered from its D
// record), and after a restart, with the original MessageId and
// SequenceNumber each time.
func TestDedupFromYoungSetDiskAndAfterRestart(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		orig := f.send("q.fifo", dedupMsg("g", "a"), dedupMsg("g", "b"))[0]
		same := func(when string) {
			t.Helper()
			r := f.send("q.fifo", Message{Body: []byte("other body"), GroupID: "g", DedupID: "a"})[0]
			if r.MessageID != orig.MessageID || r.SequenceNumber != orig.SequenceNumber {
				t.Fatalf("%s: duplicate answered %+v, want %+v", when, r, orig)
			}
			if n := f.count("q.fifo"); n != 2 {
				t.Fatalf("%s: %d messages, want 2", when, n)
			}
		}
		if f.young("q.fifo") != 2 {
			t.Fatalf("young set holds %d entries right after the send, want 2", f.young("q.fifo"))
		}
		same("young")
		f.settleYoung("q.fifo")
		same("on disk")
		f.restartCold()
		if f.young("q.fifo") != 0 {
			t.Fatal("restart loaded dedup entries into memory")
		}
		same("after restart")
		if d, e := f.dedupRecords("q.fifo"); d != 2 || e != 2 {
			t.Fatalf("%d D and %d E records, want 2 and 2", d, e)
		}
	})
}

// TestDedupScopesOnDisk: queue scope catches an id sent in another group,
// messageGroup scope does not, from the young set and from disk alike.
func TestDedupScopesOnDisk(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		f.create("g.fifo", func(c *QueueConfig) { c.FIFO, c.DedupScope = true, DedupScopeMessageGroup })
		for _, phase := range []string{"young", "disk"} {
			id := "id-" + phase
			a := f.send("q.fifo", dedupMsg("a", id))[0]
			f.send("g.fifo", dedupMsg("a", id))
			if phase == "disk" {
				f.settleYoung("q.fifo")
				f.settleYoung("g.fifo")
			}
			if r := f.send("q.fifo", dedupMsg("b", id))[0]; r.MessageID != a.MessageID {
				t.Fatalf("%s: queue scope let the id in through another group", phase)
			}
			g1 := f.send("g.fifo", dedupMsg("b", id))[0]
			g2 := f.send("g.fifo", dedupMsg("b", id))[0]
			if g1.MessageID != g2.MessageID {
				t.Fatalf("%s: messageGroup scope missed a duplicate in its group", phase)
			}
		}
		if n := f.count("q.fifo"); n != 2 {
			t.Fatalf("queue scope: %d messages, want 2", n)
		}
		if n := f.count("g.fifo"); n != 4 {
			t.Fatalf("messageGroup scope: %d messages, want 4", n)
		}
	})
}

// TestDedupIDsWithZeroBytes: ids holding 0x00 or 0x01 (possible from AMQP,
// not SQS) are escaped in keys, so no id's key range takes in another's.
func TestDedupIDsWithZeroBytes(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		ids := []string{"a", "a\x00", "a\x00b", "a\x01", "a\x01\x01", "\x00", ""}
		ids = ids[:len(ids)-1] // the empty id means "none"
		first := map[string]string{}
		for _, id := range ids {
			first[id] = f.send("q.fifo", Message{Body: []byte(id), GroupID: "g\x00h", DedupID: id})[0].MessageID
		}
		f.settleYoung("q.fifo")
		for _, id := range ids {
			if got := f.send("q.fifo", Message{Body: []byte("x"), GroupID: "other", DedupID: id})[0].MessageID; got != first[id] {
				t.Fatalf("id %q: duplicate answered %s, want %s", id, got, first[id])
			}
		}
		if n := f.count("q.fifo"); n != len(ids) {
			t.Fatalf("%d messages, want %d", n, len(ids))
		}
	})
}

// TestDedupExpiryDeletesRecords: past the window an id is forgotten, and
// both its records are deleted from the store; an id resent after its
// window takes a new entry without leaving the old E record behind.
func TestDedupExpiryDeletesRecords(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		const n = 2*dedupSweepMax + 100 // more than one sweep
		for i := 0; i < n; i += 10 {
			var batch []Message
			for j := i; j < min(i+10, n); j++ {
				batch = append(batch, dedupMsg(fmt.Sprint("g", j%7), fmt.Sprint("id", j)))
			}
			f.send("q.fifo", batch...)
		}
		if d, e := f.dedupRecords("q.fifo"); d != n || e != n {
			t.Fatalf("%d D and %d E records, want %d each", d, e, n)
		}
		f.clk.Advance(DedupWindow)
		// Resent at once: whether the sweep got to them first or not,
		// each id has one new entry and one E record.
		for i := 0; i < n; i += 10 {
			var batch []Message
			for j := i; j < min(i+10, n); j++ {
				batch = append(batch, dedupMsg(fmt.Sprint("g", j%7), fmt.Sprint("id", j)))
			}
			for k, r := range f.send("q.fifo", batch...) {
				if r.SequenceNumber == "" || f.count("q.fifo") < n+i+k+1 {
					t.Fatalf("resend of id%d after the window was deduplicated", i+k)
				}
			}
		}
		poll.CheckFor(t, 10*time.Second, func() error {
			if d, e := f.dedupRecords("q.fifo"); d != n || e != n {
				return fmt.Errorf("%d D and %d E records, want %d each", d, e, n)
			}
			return nil
		})
		f.restartCold()
		poll.AdvanceUntil(t, f.clk, time.Minute, 1, "every dedup record deleted", func() bool {
			d, e := f.dedupRecords("q.fifo")
			return d == 0 && e == 0
		})
		if n2 := f.count("q.fifo"); n2 != 2*n {
			t.Fatalf("%d messages, want %d (expiry of dedup entries must not touch messages)", n2, 2*n)
		}
	})
}

// TestDedupPurgeAndDeleteDropRecords: a purge forgets the deduplication
// ids (a resend is stored) and deletes the records; deleting the queue
// deletes them too.
func TestDedupPurgeAndDeleteDropRecords(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		f.send("q.fifo", dedupMsg("g", "a"), dedupMsg("h", "b"))
		f.settleYoung("q.fifo")
		f.send("q.fifo", dedupMsg("g", "c")) // one young entry too
		if err := f.e.PurgeQueue("q.fifo"); err != nil {
			t.Fatal(err)
		}
		if d, e := f.dedupRecords("q.fifo"); d != 0 || e != 0 {
			t.Fatalf("after purge: %d D and %d E records", d, e)
		}
		f.send("q.fifo", dedupMsg("g", "a"), dedupMsg("g", "c"))
		if n := f.count("q.fifo"); n != 2 {
			t.Fatalf("after purge: resends stored %d messages, want 2", n)
		}
		q, _ := f.e.lookup("q.fifo")
		qid := q.id
		if err := f.e.DeleteQueue("q.fifo"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []byte{prefixDedup, prefixDedupExpiry} {
			_ = f.st.ScanRange(qidPrefix(p, qid), qidPrefix(p, qid+1), func(k, _ []byte) error {
				t.Errorf("after delete: record %x left", k)
				return nil
			})
		}
	})
}

// TestDedupSurvivesMessageDelete: deleting the message does not forget its
// id within the window (SQS semantics).
func TestDedupSurvivesMessageDelete(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		orig := f.send("q.fifo", dedupMsg("g", "a"))[0]
		d := f.recv("q.fifo", 1, time.Minute)
		f.del("q.fifo", d[0].ReceiptHandle)
		f.settleYoung("q.fifo")
		if r := f.send("q.fifo", dedupMsg("g", "a"))[0]; r.MessageID != orig.MessageID {
			t.Fatal("a deleted message's id was forgotten within the window")
		}
		if n := f.count("q.fifo"); n != 0 {
			t.Fatalf("%d messages, want 0", n)
		}
	})
}

// TestDedupMemoryIndependentOfWindow: the accounted memory of N entries
// goes back to what it was once their writes have settled: it does not
// grow with the entries in the window.
func TestDedupMemoryIndependentOfWindow(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		base := f.e.MemoryHeld()
		const n = 3000
		for i := 0; i < n; i += 10 {
			var batch []Message
			for j := i; j < i+10; j++ {
				batch = append(batch, dedupMsg("g", fmt.Sprint("id", j)))
			}
			f.send("q.fifo", batch...)
		}
		if _, err := f.e.PurgeReady("q.fifo"); err != nil {
			t.Fatal(err)
		}
		f.settleYoung("q.fifo")
		if held := f.e.MemoryHeld(); held-base > 10*(MessageOverhead+DedupEntryOverhead) {
			t.Fatalf("%d bytes held after %d dedup entries settled (base %d)", held, n, base)
		}
		if d, e := f.dedupRecords("q.fifo"); d != n || e != n {
			t.Fatalf("%d D and %d E records, want %d each", d, e, n)
		}
		r := f.send("q.fifo", dedupMsg("g", "id7"))[0]
		if r.SequenceNumber != formatSeq(8) {
			t.Fatalf("duplicate of id7 answered sequence %s, want %s", r.SequenceNumber, formatSeq(8))
		}
	})
}

// TestDedupConcurrentSameID: many goroutines sending the same id at once,
// while entries move from the young set to disk, store exactly one
// message per id and all get its MessageId.
func TestDedupConcurrentSameID(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		const rounds, senders = 20, 8
		for round := 0; round < rounds; round++ {
			id := fmt.Sprint("r", round)
			ids := make([]string, senders)
			// On the applied-later store every first send is written
			// before any is applied (readable): only the young set can
			// catch the duplicates.
			als, held := f.st.(*appliedLaterStore)
			var release func()
			before := 0
			if held {
				before = als.written()
				release = als.holdWaits()
			}
			var wg sync.WaitGroup
			for s := 0; s < senders; s++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Half of them send it twice: once more after the
					// clock moved (the young set may be trimmed).
					for k := 0; k <= s%2; k++ {
						res, err := f.e.Send("q.fifo", []Message{{Body: []byte(fmt.Sprint(s)), GroupID: fmt.Sprint("g", s), DedupID: id}})
						if err != nil || res[0].Err != nil {
							t.Errorf("send: %v %v", err, res)
							return
						}
						ids[s] = res[0].MessageID
					}
				}()
			}
			if held {
				poll.CheckFor(t, 10*time.Second, poll.True("every first send written", func() bool { return als.written() >= before+senders }))
				release()
			}
			f.clk.Advance(time.Second)
			wg.Wait()
			for s := 1; s < senders; s++ {
				if ids[s] != ids[0] {
					t.Fatalf("round %d: sender %d got %s, sender 0 %s", round, s, ids[s], ids[0])
				}
			}
		}
		if n := f.count("q.fifo"); n != rounds {
			t.Fatalf("%d messages, want %d", n, rounds)
		}
	})
}

// writeOldLayoutDedup rewrites queue name's dedup records into the layout
// of the release before issue #13's change: "D" qid group 0x00 id, value
// format 1, no E records.
func (f *coldFixture) writeOldLayoutDedup(name string) {
	f.t.Helper()
	q, err := f.e.lookup(name)
	if err != nil {
		f.t.Fatal(err)
	}
	var b store.Batch
	err = f.st.ScanRange(qidPrefix(prefixDedup, q.id), qidPrefix(prefixDedup, q.id+1), func(k, v []byte) error {
		rest := k[5:]
		i := bytes.IndexByte(rest, 0)
		id, group := rest[:i], rest[i+1:]
		old := qidPrefix(prefixDedup, q.id)
		old = append(old, group...)
		old = append(old, 0)
		old = append(old, id...)
		val := bytes.Clone(v)
		val[0] = recordV1
		b.Delete(bytes.Clone(k))
		b.Set(old, val)
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	b.DeleteRange([]byte{prefixDedupExpiry}, []byte{prefixDedupExpiry + 1})
	// Ops in order: the deletes of new keys could hit an old key (id ==
	// group); set the old ones last.
	var ordered store.Batch
	for _, op := range b.Ops {
		if op.Kind != store.OpSet {
			ordered.Ops = append(ordered.Ops, op)
		}
	}
	for _, op := range b.Ops {
		if op.Kind == store.OpSet {
			ordered.Set(op.Key, op.Value)
		}
	}
	p, err := f.st.Write(&ordered, true)
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// TestDedupUpgradeFromOldLayout: a store whose dedup records are in the
// previous release's layout (group before id, format 1, no E index) is
// upgraded at Open: duplicates inside the window are still caught, with
// their original MessageId and SequenceNumber, expired records are
// deleted, and the next restart reads no dedup record.
func TestDedupUpgradeFromOldLayout(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		f.create("s.fifo", func(c *QueueConfig) { c.FIFO, c.DedupScope = true, DedupScopeMessageGroup })
		start := f.clk.Now()
		old := f.send("q.fifo", dedupMsg("g", "gone"))[0]
		f.clk.Advance(DedupWindow / 2)
		live := f.send("q.fifo", dedupMsg("a", "b"), dedupMsg("b", "a"), dedupMsg("x", "x"))
		sg := f.send("s.fifo", dedupMsg("g1", "d"))[0]
		f.settleYoung("q.fifo")
		f.settleYoung("s.fifo")
		f.writeOldLayoutDedup("q.fifo")
		f.writeOldLayoutDedup("s.fifo")
		f.e.Close()
		// "gone" has expired, the rest have not.
		at := start.Add(DedupWindow + time.Second)
		if !f.clk.Now().Before(at) {
			t.Fatalf("the clock ran to %v, past %v", f.clk.Now(), at)
		}
		f.clk.Advance(at.Sub(f.clk.Now()))
		f.closeStore()
		f.st = f.reopenStore()
		f.openCold()
		for i, m := range []Message{dedupMsg("a", "b"), dedupMsg("b", "a"), dedupMsg("x", "x")} {
			m.GroupID = "other" // queue scope: any group
			r := f.send("q.fifo", m)[0]
			if r.MessageID != live[i].MessageID || r.SequenceNumber != live[i].SequenceNumber {
				t.Fatalf("after the upgrade, %q answered %+v, want %+v", m.DedupID, r, live[i])
			}
		}
		if r := f.send("s.fifo", dedupMsg("g1", "d"))[0]; r.MessageID != sg.MessageID {
			t.Fatal("messageGroup scope: duplicate missed after the upgrade")
		}
		if r := f.send("s.fifo", dedupMsg("g2", "d"))[0]; r.MessageID == sg.MessageID {
			t.Fatal("messageGroup scope: another group's id deduplicated after the upgrade")
		}
		if r := f.send("q.fifo", dedupMsg("g", "gone"))[0]; r.MessageID == old.MessageID {
			t.Fatal("an entry past its window survived the upgrade")
		}
		// The old keys are gone; every D record has its E record.
		q, _ := f.e.lookup("q.fifo")
		var keys []string
		_ = f.st.ScanRange(qidPrefix(prefixDedup, q.id), qidPrefix(prefixDedup, q.id+1), func(k, v []byte) error {
			if v[0] != recordDedupV2 {
				t.Errorf("record %x still of format %d", k, v[0])
			}
			keys = append(keys, string(k[5:]))
			return nil
		})
		want := []string{"a\x00b", "b\x00a", "gone\x00g", "x\x00x"}
		if fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("D keys %q, want %q", keys, want)
		}
		if d, e := f.dedupRecords("q.fifo"); d != e {
			t.Fatalf("%d D and %d E records", d, e)
		}
		f.restartCold()
		if r := f.send("q.fifo", dedupMsg("z", "a"))[0]; r.MessageID != live[1].MessageID {
			t.Fatal("duplicate missed on the restart after the upgrade")
		}
	})
}

// TestDedupExpiryKeyOrder: E keys sort by expiry time, then sequence.
func TestDedupExpiryKeyOrder(t *testing.T) {
	a := dedupExpiryKey(7, 1_700_000_000_000_000_000, 9)
	b := dedupExpiryKey(7, 1_700_000_000_000_000_001, 1)
	if bytes.Compare(a, b) >= 0 || len(a) != 21 || binary.BigEndian.Uint64(a[13:]) != 9 {
		t.Fatalf("keys %x %x", a, b)
	}
}

// TestDedupResendOverUnsweptRecord: an id resent while its expired record
// is still on disk (the sweep not yet at it) replaces the D record and
// deletes the old E record, so the later sweep of that E record cannot
// delete the new D record.
func TestDedupResendOverUnsweptRecord(t *testing.T) {
	dedupStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q.fifo", fifoCfg)
		q, _ := f.e.lookup("q.fifo")
		// An expired entry the sweep has not reached: the engine knows of
		// no E record, so nothing sweeps it before the send.
		old := &dedupEntry{id: "b", group: "g", msgID: [16]byte{1}, seq: 99, expiresAt: f.clk.Now().UnixNano() - 1}
		var b store.Batch
		b.Set(dedupKey(q.id, old.id, old.group), encodeDedup(old))
		b.Set(dedupExpiryKey(q.id, old.expiresAt, old.seq), dedupSuffix(nil, old.id, old.group))
		p, err := f.st.Write(&b, true)
		if err == nil {
			err = p.Wait()
		}
		if err != nil {
			t.Fatal(err)
		}
		r := f.send("q.fifo", dedupMsg("g", "b"))[0]
		if r.MessageID == FormatID(old.msgID) {
			t.Fatal("an expired record deduplicated a send")
		}
		if d, e := f.dedupRecords("q.fifo"); d != 1 || e != 1 {
			t.Fatalf("%d D and %d E records, want 1 and 1", d, e)
		}
		f.settleYoung("q.fifo")
		if again := f.send("q.fifo", dedupMsg("h", "b"))[0]; again.MessageID != r.MessageID {
			t.Fatal("the new entry was lost")
		}
	})
}

// TestDedupSurvivesPowerCut: acknowledged sends' dedup records survive a
// power cut (they are in the send's synced batch); the sweep's deletes
// are written without a sync, and a cut that loses them leaves expired
// records behind, which count as absent and are swept again.
func TestDedupSurvivesPowerCut(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q.fifo", fifoCfg)
	first := pf.send("q.fifo", dedupMsg("g", "a"), dedupMsg("h", "b"))
	pf.powerCut()
	for i, m := range []Message{dedupMsg("x", "a"), dedupMsg("y", "b")} {
		if got := pf.send("q.fifo", m)[0]; got.MessageID != first[i].MessageID || got.SequenceNumber != first[i].SequenceNumber {
			t.Fatalf("after a power cut, %q answered %+v, want %+v", m.DedupID, got, first[i])
		}
	}
	q, err := pf.e.lookup("q.fifo")
	if err != nil {
		t.Fatal(err)
	}
	records := func() (d, e int) {
		for _, p := range []byte{prefixDedup, prefixDedupExpiry} {
			_ = pf.ps.ScanRange(qidPrefix(p, q.id), qidPrefix(p, q.id+1), func(_, _ []byte) error {
				if p == prefixDedup {
					d++
				} else {
					e++
				}
				return nil
			})
		}
		return d, e
	}
	pf.clk.Advance(DedupWindow + time.Second)
	poll.CheckFor(t, 10*time.Second, func() error {
		if d, e := records(); d+e != 0 {
			return fmt.Errorf("%d D and %d E records left after the window", d, e)
		}
		return nil
	})
	// The sweep's deletes were not synced: the cut brings the records
	// back. They are counted on the image before an engine opens on it,
	// since the new engine's own sweep removes them again at once.
	pf.e.Close()
	pf.ps = pf.ps.crash()
	pf.st = pf.ps
	if d, e := records(); d != 2 || e != 2 {
		t.Fatalf("after the cut: %d D and %d E records, want the 2 expired ones back", d, e)
	}
	pf.reopen()
	if got := pf.send("q.fifo", dedupMsg("g", "a"))[0]; got.MessageID == first[0].MessageID {
		t.Fatal("an expired record deduplicated a send after the cut")
	}
	poll.CheckFor(t, 10*time.Second, func() error {
		if d, e := records(); d != 1 || e != 1 {
			return fmt.Errorf("%d D and %d E records, want the new entry's 1 and 1", d, e)
		}
		return nil
	})
}
