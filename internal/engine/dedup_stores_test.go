package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// appliedLaterStore models the replicated store's read semantics
// (internal/cluster/raftstore): a write is not readable when Write
// returns, only once it is applied, which happens in write order when a
// Pending's Wait is called (that write and every earlier one) or when an
// ordinary read needs it (read-your-writes: Get, Scan and ScanRange apply
// everything written first). Its store.SettledReader methods read only
// what is applied, without applying anything: the weakest view the
// engine's deduplication lookups may get. Writes nobody waits for (a
// tick's) stay unapplied until something forces them, a stricter model
// than Raft, which applies them soon anyway.
type appliedLaterStore struct {
	mu     sync.Mutex
	st     *memstore.Store
	queued []store.Batch
	base   int           // writes applied so far: queued[0] is write base+1
	hold   chan struct{} // non-nil: Waits block until it is closed
}

var _ store.SettledReader = (*appliedLaterStore)(nil)

func newAppliedLaterStore() *appliedLaterStore { return &appliedLaterStore{st: memstore.New()} }

type laterPending struct {
	s *appliedLaterStore
	n int // apply up to and including write number n
}

func (p laterPending) Wait() error {
	p.s.mu.Lock()
	h := p.s.hold
	p.s.mu.Unlock()
	if h != nil {
		<-h
	}
	return p.s.applyUpTo(p.n)
}

// holdWaits makes Waits block until release is called.
func (s *appliedLaterStore) holdWaits() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := make(chan struct{})
	s.hold = h
	return func() {
		s.mu.Lock()
		s.hold = nil
		s.mu.Unlock()
		close(h)
	}
}

// written is the number of writes so far.
func (s *appliedLaterStore) written() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base + len(s.queued)
}

func (s *appliedLaterStore) Write(b *store.Batch, durable bool) (store.Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queued = append(s.queued, copyBatch(b))
	return laterPending{s: s, n: s.base + len(s.queued)}, nil
}

// applyUpTo applies the queued writes numbered up to n (1-based, in
// write order).
func (s *appliedLaterStore) applyUpTo(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.base < n && len(s.queued) > 0 {
		b := s.queued[0]
		s.queued = s.queued[1:]
		s.base++
		p, err := s.st.Write(&b, true)
		if err == nil {
			err = p.Wait()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *appliedLaterStore) applyAll() error {
	s.mu.Lock()
	n := s.base + len(s.queued)
	s.mu.Unlock()
	return s.applyUpTo(n)
}

func (s *appliedLaterStore) Scan(prefix []byte, fn func(key, value []byte) error) error {
	if err := s.applyAll(); err != nil {
		return err
	}
	return s.st.Scan(prefix, fn)
}

func (s *appliedLaterStore) ScanRange(start, end []byte, fn func(key, value []byte) error) error {
	if err := s.applyAll(); err != nil {
		return err
	}
	return s.st.ScanRange(start, end, fn)
}

func (s *appliedLaterStore) ScanLengths(start, end []byte, fn func(key []byte, valueLen int) error) error {
	if err := s.applyAll(); err != nil {
		return err
	}
	return s.st.ScanLengths(start, end, fn)
}

func (s *appliedLaterStore) Get(key []byte) ([]byte, error) {
	if err := s.applyAll(); err != nil {
		return nil, err
	}
	return s.st.Get(key)
}

func (s *appliedLaterStore) GetSettled(key []byte) ([]byte, error) { return s.st.Get(key) }

func (s *appliedLaterStore) ScanRangeSettled(start, end []byte, fn func(key, value []byte) error) error {
	return s.st.ScanRange(start, end, fn)
}

func (s *appliedLaterStore) Sync() error  { return s.applyAll() }
func (s *appliedLaterStore) Close() error { return s.applyAll() }

// dedupStores runs a deduplication test on memstore and pebble
// (coldStores) and on appliedLaterStore, the replicated store's weaker
// read semantics.
func dedupStores(t *testing.T, run func(t *testing.T, f *coldFixture)) {
	coldStores(t, run)
	t.Run("applied-later", func(t *testing.T) {
		st := newAppliedLaterStore()
		f := &coldFixture{
			fixture:     &fixture{t: t, clk: clock.NewFake(time.Unix(1_700_000_000, 0))},
			reopenStore: func() store.Store { return st },
			closeStore:  func() { _ = st.Close() },
		}
		f.st = st
		f.openCold()
		run(t, f)
	})
}

// TestDedupLookupAfterUnsettledPurge: a purge's range delete is not yet
// readable through settled reads while its Wait has not returned; a send
// in that gap must not be deduplicated against a record the purge
// deleted (lookups read with read-your-writes until the purge settles).
func TestDedupLookupAfterUnsettledPurge(t *testing.T) {
	st := newAppliedLaterStore()
	f := &coldFixture{fixture: &fixture{t: t, st: st, clk: clock.NewFake(time.Unix(1_700_000_000, 0))}}
	f.openCold()
	f.create("q.fifo", fifoCfg)
	orig := f.send("q.fifo", dedupMsg("g", "a"))[0]
	f.settleYoung("q.fifo")
	release := st.holdWaits()
	before := st.written()
	purged := make(chan error, 1)
	go func() { purged <- f.e.PurgeQueue("q.fifo") }()
	poll.CheckFor(t, 10*time.Second, poll.True("the purge written", func() bool { return st.written() > before }))
	type result struct {
		res []SendResult
		err error
	}
	sent := make(chan result, 1)
	go func() {
		res, err := f.e.Send("q.fifo", []Message{dedupMsg("g", "a")})
		sent <- result{res, err}
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("the send written", func() bool { return st.written() > before+1 }))
	release()
	if err := <-purged; err != nil {
		t.Fatal(err)
	}
	r := <-sent
	if r.err != nil || r.res[0].Err != nil {
		t.Fatalf("send: %v %v", r.err, r.res)
	}
	if r.res[0].MessageID == orig.MessageID {
		t.Fatal("a send after the purge was deduplicated against a purged record")
	}
	if n := f.count("q.fifo"); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
}

// TestDedupSweepKeepsReplacedRecord: a send that found its id's record
// expired but not swept writes a new D record and deletes the old E
// record; a sweep that reads through settled reads before that write is
// applied still sees the old E record, and must delete it without
// deleting the new D record.
func TestDedupSweepKeepsReplacedRecord(t *testing.T) {
	st := newAppliedLaterStore()
	f := &coldFixture{fixture: &fixture{t: t, st: st, clk: clock.NewFake(time.Unix(1_700_000_000, 0))}}
	f.openCold()
	f.create("q.fifo", fifoCfg)
	q, _ := f.e.lookup("q.fifo")
	old := &dedupEntry{id: "b", group: "g", msgID: [16]byte{1}, seq: 99, expiresAt: f.clk.Now().UnixNano() - 1}
	var b store.Batch
	b.Set(dedupKey(q.id, old.id, old.group), encodeDedup(old))
	b.Set(dedupExpiryKey(q.id, old.expiresAt, old.seq), dedupSuffix(nil, old.id, old.group))
	if p, err := st.Write(&b, true); err != nil || p.Wait() != nil {
		t.Fatal("writing the old record failed")
	}
	release := st.holdWaits()
	before := st.written()
	sent := make(chan error, 1)
	go func() {
		_, err := f.e.Send("q.fifo", []Message{dedupMsg("g", "b")})
		sent <- err
	}()
	poll.CheckFor(t, 10*time.Second, poll.True("the send written", func() bool { return st.written() > before }))
	q.mu.Lock()
	q.dedupExpireAt = 1 // due now, with the old E record still readable
	var sweep store.Batch
	q.sweepDedupLocked(f.clk.Now().UnixNano(), &sweep)
	q.mu.Unlock()
	release()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	dk := string(dedupKey(q.id, "b", "g"))
	sawE := false
	for _, op := range sweep.Ops {
		if string(op.Key) == dk {
			t.Fatal("the sweep deleted the D record a newer send wrote")
		}
		sawE = sawE || op.Key[0] == prefixDedupExpiry
	}
	if !sawE {
		t.Fatal("the sweep did not see the old E record (the test no longer reaches the case)")
	}
}
