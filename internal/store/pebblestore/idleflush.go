package pebblestore

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Idle flushes: giving the space of a drained backlog back while the
// broker idles.
//
// A deleted message's body stays on disk until a compaction drops both
// its key and the delete that shadows it; only then is the blob file (or
// sstable) that holds the body freed. Pebble compacts in response to
// flushes, and flushes when a memtable fills. So after consumers drain a
// backlog and the broker goes quiet, the deletes of the drain's last
// minutes sit in a memtable that never fills, and the bodies they delete
// (and every file that shares a reference with them) stay on disk until
// the next busy period or restart: the soak of 2026-12-02 kept 309 MiB,
// 252 MiB of it blob files, of a 2 GiB backlog drained, for as long as it
// watched, and a restart (whose open flushes the replayed log) freed all
// of it within 10 s (docs/reliability.md, "Is disk space given back?").
//
// The store therefore flushes its memtable once it has taken next to no
// writes (idleQuietBytes or less) for a whole IdleFlushAfter period right
// after a busier one, or little (idleCalmBytes or less: producers that go
// on sending a trickle once the consumers have drained the backlog) right
// after one busier than that, if it took a delete of any kind since its
// last flush (the end of a drain, whose deletes are small), or after any
// quiet period once it took idleFlushMinBytes since its last flush: once
// per busy spell (a load that swings around idleCalmBytes from one period
// to the next flushes at most every other period, a memtable of a
// megabyte or two), never while writes come at a rate that will fill the
// memtable anyway, and about once a megabyte on a broker whose traffic
// is always light. Without the calm step a trickle of 10 KB/s kept
// every period from being quiet, and the drain's last deletes waited
// for the trickle to fill the memtable (about 13 minutes for an 8 MiB
// one at that rate, computed, not timed; a soak with a trickle of 20
// sends a second kept them for its whole 60 s watch):
// TestIdleFlushUnderATrickle. A cluster node's state store, which
// applies a leader's clock stamp every second even when idle, still
// counts as quiet.
//
// A flush only leads to the compactions that free space when pebble's
// picker finds one due. After a drain to the end that is what usually
// happens (the soak, TestIdleFlushFreesDrainedBodies), but not always: a
// small flush that follows another idle flush closely (a drain that
// paused long enough for one) adds one small L0 file, which may start
// none (9 MiB of 24 stayed in a test that paused a drain at three
// quarters), and a soak of 500,000 messages kept 92 MiB of blob files,
// referenced by 3 MiB of sstables, through the idle flush and a restart.
// So the first light period (idleLightBytes or less) after a flush, the
// idle flush or one of pebble's own (producers that go on sending more
// than a trickle while consumers drain a backlog keep every period from
// being calm, and fill the memtable that pebble then flushes), or after Open
// (a store that restarts over a drained backlog), once pebble has the
// statistics of its new tables, asks pebble how many bytes its deletes
// shadow; if
// that is at least idleCompactMinBytes and an eighth of the bytes of the
// sstables and blob files, the store compacts its whole key range, which
// drops every shadowed key and frees the blob files no live key
// references (TestIdleCompactionFreesPausedDrain,
// TestIdleCompactionUnderATrickle). Pebble's estimate was
// a third of the truth in that test (a drain's tombstones lower the
// average value size it multiplies by), hence an eighth. Such a
// compaction rewrites the sstables, which hold keys and references to
// values but not the values themselves (value separation; unless an
// output would reference more than maxBlobReferenceDepth blob files,
// when pebble copies its live values into a new one), so it costs about
// the keys of the live backlog, once per flush at most, and only when a
// good part of the store is garbage (measured in soaks: 2.6 s for a store
// of 480 MB, 69 MB of it garbage by pebble's count, in the middle of a
// 500,000-message drain; 37 ms for a drained one of 139 MB.
// TestIdleCompactionCost, SLUICE_PERF=1: a store of 1 M bodies drained
// to 40 % held 5 MiB of sstables, and its 100 MB of garbage sat in blob
// files shared with live bodies, which pebble rewrites on its own once
// they are blobRewriteMinAge old; the check found too little to
// compact, and a forced compaction wrote nothing); a Close during it waits
// for the compaction step under way. A drain slower than idleQuietBytes
// a period never looks busy, so its deletes are flushed a megabyte at a
// time, each followed by the check. Above idleLightBytes a period, no
// check: a store that busy is left to pebble's own compactions (whether
// they always free a drain's garbage at such rates was not measured).

const (
	// idleQuietBytes is the most a period may write and still count as
	// quiet: a leader's stamps, a scheduler's occasional records.
	idleQuietBytes = 64 << 10
	// idleCalmBytes is the most a period may write and still count as
	// calm (100 KB/s at the default period): producers that go on
	// sending a little after the consumers have drained a backlog. The
	// first calm period after a busier one flushes too.
	idleCalmBytes = 1 << 20
	// idleFlushMinBytes is the least written since the last flush for an
	// idle flush to be worth a new sstable.
	idleFlushMinBytes = 1 << 20
	// idleCompactMinBytes is the least garbage pebble must estimate for
	// an idle compaction.
	idleCompactMinBytes = 1 << 20
	// idleLightBytes is the most a period may write for the compaction
	// check to run in it (1.6 MB/s at the default period): a drain under
	// a trickle of new sends. Above it the store is left to pebble's own
	// compactions.
	idleLightBytes = 16 << 20
)

// idleFlusher is a Store's idle-flush loop.
type idleFlusher struct {
	written atomic.Uint64 // bytes of batches applied since Open
	deletes atomic.Uint64 // batches applied since Open with a delete in them
	// due's state, owned by the loop: written at the last period's end,
	// the bytes the last period wrote (over idleQuietBytes: it was busy),
	// and written and deletes at the last flush.
	last, lastPeriod, flushedBytes, flushedDeletes uint64
	// flushes counts pebble's flushes (from its event listener) and
	// seenFlush is its value at the last period.
	flushes   atomic.Uint64
	seenFlush uint64
	// checkGarbage: the next light period checks whether the deletes on
	// disk shadow enough to compact (set by a flush and at Open).
	checkGarbage bool

	quit   chan struct{}
	cancel context.CancelFunc
	once   sync.Once
	done   sync.WaitGroup
}

// start runs the loop for s, checking every after (0: the default;
// negative: no loop).
func (f *idleFlusher) start(s *Store, after time.Duration) {
	if after < 0 {
		return
	}
	if after == 0 {
		after = DefaultIdleFlushAfter
	}
	f.quit = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done.Go(func() { f.run(ctx, s, after) })
}

// stop ends the loop and waits for a flush under way; it may be called
// more than once.
func (f *idleFlusher) stop() {
	if f.quit == nil {
		return
	}
	f.once.Do(func() {
		f.cancel() // a compaction under way ends at its current step
		close(f.quit)
	})
	f.done.Wait()
}

// applied counts a batch of n bytes the store applied; deletes: it held
// a delete of any kind.
func (f *idleFlusher) applied(n int, deletes bool) {
	f.written.Add(uint64(n))
	if deletes {
		f.deletes.Add(1)
	}
}

func (f *idleFlusher) run(ctx context.Context, s *Store, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.quit:
			return
		case <-t.C:
		}
		f.period(ctx, s)
	}
}

// idleAction is what a period did.
type idleAction int

const (
	idleNothing idleAction = iota
	idleFlushed
	idleCompacted
)

// period is one period's work, called once a period: a flush when one is
// due, else, after a light period (idleLightBytes or less), the
// compaction check once a flush (idle or pebble's own) or Open asked for
// it and pebble has the statistics it needs.
func (f *idleFlusher) period(ctx context.Context, s *Store) idleAction {
	if f.due() {
		if err := s.flush(); err != nil {
			s.log.Warn("pebblestore: idle flush failed", "dir", s.dir, "err", err)
		}
		f.checkGarbage = true
		f.seenFlush = f.flushes.Load()
		return idleFlushed
	}
	if n := f.flushes.Load(); n != f.seenFlush {
		f.seenFlush, f.checkGarbage = n, true
	}
	if f.lastPeriod > idleLightBytes || !f.checkGarbage {
		return idleNothing
	}
	compacted, ready, err := s.compactIfGarbage(ctx)
	if err != nil && ctx.Err() == nil { // cancelled: the store is closing
		s.log.Warn("pebblestore: idle compaction failed", "dir", s.dir, "err", err)
	}
	if !ready {
		return idleNothing // the statistics come in the background; next period
	}
	f.checkGarbage = false
	if compacted {
		return idleCompacted
	}
	return idleNothing
}

// due is one period's verdict, called once a period: whether the period
// since the last call stepped down (quiet after a busier one, or calm
// after one busier than calm) with a delete since the last flush, or was
// quiet with idleFlushMinBytes since the last flush (see the top of this
// file); true counts as flushed.
func (f *idleFlusher) due() bool {
	w, d := f.written.Load(), f.deletes.Load()
	prev := f.lastPeriod
	f.last, f.lastPeriod = w, w-f.last
	cur := f.lastPeriod
	stepDown := (cur <= idleQuietBytes && prev > idleQuietBytes) || (cur <= idleCalmBytes && prev > idleCalmBytes)
	switch {
	case stepDown && d != f.flushedDeletes:
	case cur <= idleQuietBytes && w-f.flushedBytes >= idleFlushMinBytes:
	default:
		return false
	}
	f.flushedBytes, f.flushedDeletes = w, d
	return true
}

// flush flushes the memtable and waits for it (not for the compactions it
// may start); a closed or failed store is left alone.
func (s *Store) flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.failure() != nil {
		return nil
	}
	s.log.Debug("pebblestore: flushing after a quiet period", "dir", s.dir)
	return s.db.Flush()
}

// compactIfGarbage compacts the whole store when pebble estimates that its
// deletes shadow at least idleCompactMinBytes and an eighth of the bytes
// of its sstables and blob files; ready is false while pebble still
// collects the statistics of a table (which the estimate needs).
func (s *Store) compactIfGarbage(ctx context.Context) (compacted, ready bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.failure() != nil {
		return false, true, nil
	}
	levels, err := s.db.SSTables()
	if err != nil {
		return false, true, err
	}
	var (
		garbage, size uint64
		noStats       pebble.SSTableInfo
	)
	for _, tables := range levels {
		for _, t := range tables {
			if t.TableStats == noStats.TableStats {
				// Not collected yet: Metrics' pending count does not
				// include the tables being collected right now.
				return false, false, nil
			}
			garbage += t.TableStats.PointDeletionsBytesEstimate + t.TableStats.RangeDeletionsBytesEstimate
			size += t.Size
		}
	}
	size += s.db.Metrics().BlobFiles.LiveSize
	if garbage < idleCompactMinBytes || garbage < size/8 {
		return false, true, nil
	}
	s.log.Info("pebblestore: compacting after a drain", "dir", s.dir, "garbage_bytes", garbage, "store_bytes", size)
	start, end := tablesSpan(levels)
	begun := time.Now()
	if err := s.db.Compact(ctx, start, end, false); err != nil {
		return false, true, fmt.Errorf("pebblestore: compact: %w", err)
	}
	m := s.db.Metrics()
	after := m.BlobFiles.LiveSize
	for _, l := range m.Levels {
		after += uint64(l.TablesSize)
	}
	s.log.Info("pebblestore: compacted after a drain", "dir", s.dir, "store_bytes", after, "took", time.Since(begun).Round(time.Millisecond))
	return true, true, nil
}

// tablesSpan returns the key range [start, end) that covers every table
// of levels: Compact's range for the whole store. The range comes from
// the tables, not from an iterator: a drained store's live keys are only
// its meta key.
func tablesSpan(levels [][]pebble.SSTableInfo) (start, end []byte) {
	var first, last []byte
	for _, tables := range levels {
		for _, t := range tables {
			if k := t.Smallest.UserKey; first == nil || bytes.Compare(k, first) < 0 {
				first = k
			}
			if k := t.Largest.UserKey; last == nil || bytes.Compare(k, last) > 0 {
				last = k
			}
		}
	}
	return bytes.Clone(first), append(bytes.Clone(last), 0)
}
