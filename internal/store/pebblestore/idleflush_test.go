package pebblestore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/store"
)

// TestIdleFlushFreesDrainedBodies: a backlog of about 24 MiB of message
// bodies in eight queues is written and then deleted, as consumers drain
// it, and the store goes quiet. The deletes of the drain's end sit in a
// memtable that no longer fills, so the blob files holding the bodies
// they delete are still live; the idle flush then makes pebble compact
// them away without a restart. (Without it they stay until the next busy
// spell or restart: 54 MiB of a 94 MiB backlog, watched for 10 s, when
// this was written.) The periods are driven by hand (idleFlusher.due),
// so that a slow machine cannot make one pass as quiet in the middle of
// the drain; TestIdleFlushLoop covers the loop.
func TestIdleFlushFreesDrainedBodies(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{MemTableSize: MinMemTableSize, IdleFlushAfter: -1})
	defer func() { _ = s.Close() }()
	rng := rand.NewChaCha8([32]byte{1})
	const n, per = 24000, 100
	key := func(kind string, i int) []byte { return fmt.Appendf(nil, "M/%s/q%d/%08d", kind, i%8, i) }
	commit := func(b *store.Batch) {
		p, err := s.Write(b, true)
		if err != nil || p.Wait() != nil {
			t.Fatalf("write: %v", err)
		}
	}
	for i := 0; i < n; i += per {
		var b store.Batch
		for j := i; j < i+per; j++ {
			body := make([]byte, 1024)
			_, _ = rng.Read(body)
			b.Set(key("body", j), body)
		}
		commit(&b)
	}
	for i := 0; i < n; i += per {
		var b store.Batch
		for j := i; j < i+per; j++ {
			b.SingleDelete(key("body", j))
			b.Set(key("state", j), []byte("leased"))
			b.Delete(key("state", j))
		}
		commit(&b)
	}
	if s.idle.due() {
		t.Fatal("a flush is due at the end of a period that wrote the whole backlog: it was not quiet")
	}
	m := s.db.Metrics()
	if m.BlobFiles.LiveCount == 0 {
		t.Fatalf("the drain left no live blob file: nothing for an idle flush to free (blob metrics %+v)", m.BlobFiles)
	}
	t.Logf("after the drain: %d live blob files, %d bytes", m.BlobFiles.LiveCount, m.BlobFiles.LiveSize)
	if !s.idle.due() {
		t.Fatal("no flush due after a quiet period that followed the drain")
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		if b := s.db.Metrics().BlobFiles; b.LiveCount > 0 {
			return fmt.Errorf("%d blob files (%d bytes) still live after the idle flush", b.LiveCount, b.LiveSize)
		}
		return nil
	})
	for i := 0; i < n; i += n / 10 {
		if _, err := s.Get(key("body", i)); err == nil {
			t.Fatalf("deleted body %d read back after the idle flush", i)
		}
	}
	if s.idle.due() {
		t.Fatal("a second flush due with nothing written since the first")
	}
}

// TestIdleFlushDue: a flush is due after a period that steps down (quiet
// after a busier one, or calm after one busier than calm) when a delete
// came since the last flush, and after any quiet period once
// idleFlushMinBytes came since the last flush; a period that wrote more
// than idleQuietBytes is not quiet; small writes and deletes alone (a
// light broker, a cluster leader's stamps) make one due only a megabyte
// at a time.
func TestIdleFlushDue(t *testing.T) {
	var f idleFlusher
	steps := []struct {
		bytes   int
		deletes bool
		due     bool
	}{
		{0, false, false},                  // nothing written
		{4 << 10, false, false},            // a few stamps
		{idleCalmBytes + 1, true, false},   // busy: not quiet
		{0, false, true},                   // quiet after busy, with a delete
		{0, false, false},                  // flushed already
		{512, true, false},                 // a lone delete, never busy
		{idleQuietBytes, false, false},     // quiet, under the minimum
		{idleQuietBytes + 1, false, false}, // calm, not quiet: no step down from quiet
		{0, false, true},                   // quiet after calm; the lone delete is unflushed
		{idleCalmBytes + 1, false, false},  // busy, sets only
		{0, false, true},                   // quiet after busy, no delete since the flush, but a megabyte written
		{idleCalmBytes + 1, true, false},   // busy: a drain
		{idleQuietBytes + 1, false, true},  // calm after busy: a trickle after the drain
		{idleQuietBytes + 1, true, false},  // calm after calm: no step down
		{idleCalmBytes, true, false},       // calm
		{0, false, true},                   // quiet after calm, with a delete since the flush
	}
	for i, st := range steps {
		if st.bytes > 0 || st.deletes {
			f.applied(st.bytes, st.deletes)
		}
		if got := f.due(); got != st.due {
			t.Fatalf("step %d (%d bytes, deletes %v): due %v, want %v", i, st.bytes, st.deletes, got, st.due)
		}
	}
	// A megabyte of small writes and deletes over quiet periods (under
	// idleQuietBytes each) makes one due.
	for range (idleFlushMinBytes / idleQuietBytes) + 1 {
		f.applied(idleQuietBytes, true)
		if f.due() {
			return
		}
	}
	t.Fatal("no flush due after a megabyte of quiet writes")
}

// TestIdleFlushLoop: the store's own loop flushes after a quiet period.
func TestIdleFlushLoop(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{MemTableSize: MinMemTableSize, IdleFlushAfter: 50 * time.Millisecond})
	defer func() { _ = s.Close() }()
	flushes := s.db.Metrics().Flush.Count
	var b store.Batch // a busy period (over idleQuietBytes) with a delete
	b.Set([]byte("M/a"), make([]byte, 2*idleQuietBytes))
	b.Delete([]byte("M/a"))
	p, err := s.Write(&b, true)
	if err != nil || p.Wait() != nil {
		t.Fatalf("write: %v", err)
	}
	poll.CheckFor(t, 10*time.Second, poll.True("an idle flush", func() bool {
		return s.db.Metrics().Flush.Count > flushes
	}))
}

// backlog drives a store as a queue's consumers and producers would:
// 1 KiB bodies under keys numbered from 0, set and then single-deleted
// in batches of per (0: 100).
type backlog struct {
	t   *testing.T
	s   *Store
	rng *rand.ChaCha8
	per int
}

func (b *backlog) batch() int {
	if b.per == 0 {
		return 100
	}
	return b.per
}

func (b *backlog) key(i int) []byte { return fmt.Appendf(nil, "M/body/q%d/%08d", i%8, i) }

func (b *backlog) commit(batch *store.Batch) {
	b.t.Helper()
	p, err := b.s.Write(batch, true)
	if err != nil || p.Wait() != nil {
		b.t.Fatalf("write: %v", err)
	}
}

// send sets the bodies from up to to, per a batch.
func (b *backlog) send(from, to int) {
	for i := from; i < to; i += b.batch() {
		var batch store.Batch
		for j := i; j < min(i+b.batch(), to); j++ {
			body := make([]byte, 1024)
			_, _ = b.rng.Read(body)
			batch.Set(b.key(j), body)
		}
		b.commit(&batch)
	}
}

// drain deletes the bodies from up to to, per a batch.
func (b *backlog) drain(from, to int) {
	for i := from; i < to; i += b.batch() {
		var batch store.Batch
		for j := i; j < min(i+b.batch(), to); j++ {
			batch.SingleDelete(b.key(j))
		}
		b.commit(&batch)
	}
}

// period runs one idle period by hand, as the store's loop would.
func (b *backlog) period() idleAction { return b.s.idle.period(b.t.Context(), b.s) }

// settle waits until pebble has no compaction running.
func (b *backlog) settle() {
	b.t.Helper()
	poll.CheckFor(b.t, 20*time.Second, poll.True("no compaction running", func() bool {
		return b.s.db.Metrics().Compact.NumInProgress == 0
	}))
}

// freed waits until at most limit bytes of blob files are live, running
// between checks what the broker does meanwhile (nil: nothing).
func (b *backlog) freed(limit uint64, meanwhile func()) {
	b.t.Helper()
	poll.CheckFor(b.t, 20*time.Second, func() error {
		if meanwhile != nil {
			meanwhile()
		}
		if m := b.s.db.Metrics().BlobFiles; m.LiveSize > limit {
			return fmt.Errorf("%d blob files (%d bytes) still live", m.LiveCount, m.LiveSize)
		}
		return nil
	})
}

// TestIdleCompactionFreesPausedDrain: a drain pauses at three quarters
// long enough for an idle flush, then finishes. The second flush adds one
// small L0 file, which pebble's picker may leave alone, so the bodies its
// deletes shadow stay (9 MiB of 24 when the idle flush alone was
// measured); the idle compaction that follows a flush, once pebble
// estimates that the deletes shadow an eighth of the store, frees them.
// With restart, the store is closed after the drain instead and the
// compaction comes in the first quiet period after Open.
func TestIdleCompactionFreesPausedDrain(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { testIdleCompaction(t, restart) })
	}
}

func testIdleCompaction(t *testing.T, restart bool) {
	dir := t.TempDir()
	opts := Options{MemTableSize: MinMemTableSize, IdleFlushAfter: -1}
	b := &backlog{t: t, s: mustOpen(t, dir, opts), rng: rand.NewChaCha8([32]byte{2})}
	defer func() { _ = b.s.Close() }()
	const n = 24000
	// idle runs quiet periods until the store has checked its garbage and
	// pebble has no compaction running.
	idle := func() {
		poll.CheckFor(t, 20*time.Second, poll.True("an idle store with nothing left to do", func() bool {
			return b.period() == idleNothing && !b.s.idle.checkGarbage && b.s.db.Metrics().Compact.NumInProgress == 0
		}))
	}
	b.send(0, n)
	_ = b.period() // the fill: busy
	b.drain(0, n*3/4)
	_ = b.period() // busy
	idle()
	b.drain(n*3/4, n)
	_ = b.period() // busy
	if restart {
		if err := b.s.Close(); err != nil {
			t.Fatal(err)
		}
		b.s = mustOpen(t, dir, opts)
	}
	idle()
	b.freed(1<<20, nil)
}

// TestIdleFlushUnderATrickle: producers go on sending a trickle (about
// 100 KiB a period: not quiet) after the consumers have drained a
// backlog. The first such period after the drain flushes the memtable,
// so the drain's deletes reach the compactions (and the check after the
// flush) long before the trickle would fill the memtable: the bodies are
// freed with no flush but that one.
func TestIdleFlushUnderATrickle(t *testing.T) {
	b := &backlog{t: t, s: mustOpen(t, t.TempDir(), Options{MemTableSize: MinMemTableSize, IdleFlushAfter: -1}), rng: rand.NewChaCha8([32]byte{4})}
	defer func() { _ = b.s.Close() }()
	const n = 24000
	b.send(0, n)
	b.drain(0, n)
	if got := b.period(); got != idleNothing {
		t.Fatalf("the period that wrote the whole backlog did %v: it was busy", got)
	}
	if m := b.s.db.Metrics().BlobFiles; m.LiveCount == 0 {
		t.Fatal("the drain left no live blob file: nothing to free")
	}
	next := n
	trickle := func() idleAction {
		b.send(next, next+100)
		b.drain(next, next+100)
		next += 100
		return b.period()
	}
	flushes := b.s.db.Metrics().Flush.Count
	if got := trickle(); got != idleFlushed {
		t.Fatalf("the first period of the trickle after the drain did %v, want a flush", got)
	}
	// At most 40 periods of the trickle (4 MiB: half the memtable), each
	// once pebble has no compaction running. None of them is another
	// idle flush. (Pebble may flush on its own when a slow run, under
	// the race detector on a loaded machine, needs many periods: the
	// trickle's sends and deletes fill the memtable. Counting
	// Metrics().Flush failed then; the idle flushes are what is tested.)
	idleFlushes := 0
	for p := 0; ; p++ {
		b.settle()
		m := b.s.db.Metrics()
		if m.BlobFiles.LiveSize <= 1<<20 {
			break
		}
		if p == 40 {
			t.Fatalf("%d blob files (%d bytes) still live after %d periods of the trickle", m.BlobFiles.LiveCount, m.BlobFiles.LiveSize, p)
		}
		if trickle() == idleFlushed {
			idleFlushes++
		}
	}
	if idleFlushes != 0 {
		t.Fatalf("%d more idle flushes during the trickle (%d flushes in all since the drain), want the first one only", idleFlushes, b.s.db.Metrics().Flush.Count-flushes)
	}
}

// TestIdleCompactionUnderATrickle: producers go on sending a little while
// the consumers drain a backlog, so no period is calm and no idle flush
// comes; the memtable fills with the trickle and pebble flushes it
// itself. The drain paused at three quarters, as in
// TestIdleCompactionFreesPausedDrain, so that flush may start no
// compaction that drops the rest (9 MiB of 24 stayed without the check);
// the check after pebble's own flush, in a period light enough
// (idleLightBytes), frees the bodies.
func TestIdleCompactionUnderATrickle(t *testing.T) {
	b := &backlog{t: t, s: mustOpen(t, t.TempDir(), Options{MemTableSize: MinMemTableSize, IdleFlushAfter: -1}), rng: rand.NewChaCha8([32]byte{3})}
	defer func() { _ = b.s.Close() }()
	const n = 24000
	b.send(0, n)
	_ = b.period() // the fill: busy
	b.drain(0, n*3/4)
	if err := b.s.flush(); err != nil { // a memtable that filled mid-drain
		t.Fatal(err)
	}
	b.settle()
	b.drain(n*3/4, n)
	// The trickle: each period sends and consumes 1,500 messages (about
	// 1.5 MiB: above idleCalmBytes, so no idle flush, and under
	// idleLightBytes), until pebble has flushed the memtable on its own,
	// and on while the test waits. (With 1,200, as with 100, pebble's own
	// compactions happened to free the bodies without the check.)
	next := n
	b.per = 1500 // one batch of sends and one of deletes a period
	trickle := func() {
		b.send(next, next+b.per)
		b.drain(next, next+b.per)
		next += b.per
		_ = b.period()
	}
	flushes := b.s.db.Metrics().Flush.Count
	for p := 0; p < 200 && b.s.db.Metrics().Flush.Count <= flushes; p++ {
		trickle()
	}
	if b.s.db.Metrics().Flush.Count <= flushes {
		t.Fatal("the trickle never filled a memtable")
	}
	b.settle()
	b.freed(2<<20, trickle)
}
