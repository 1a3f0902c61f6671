package pebblestore

import (
	"sync"
	"sync/atomic"
	"time"
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
// after a busy one, if it took a delete of any kind since its last flush
// (the end of a drain, whose deletes are small), or after any quiet
// period once it took idleFlushMinBytes since its last flush: once per
// busy spell, never while writes come at a rate that will fill the
// memtable anyway, and about once a megabyte on a broker whose traffic
// is always light. A cluster node's state store, which applies a
// leader's clock stamp every second even when idle, still counts as
// quiet.
//
// Known limit: a flush only leads to the compactions that free space when
// pebble's picker finds one due. After a drain to the end that is what
// happened (the soak, TestIdleFlushFreesDrainedBodies). A small flush that
// follows another idle flush closely (a drain that paused long enough for
// one) adds one small L0 file, which may start none: the bodies its
// deletes shadow then wait for the next compaction (about every fourth
// such flush, or the next busy spell, or a restart). Measured in a test
// that paused a drain at three quarters: 9 MiB of 24 stayed. A drain
// slower than idleQuietBytes a period never looks busy, so its deletes
// are flushed a megabyte at a time. Nor is a drain to the end always
// freed: a soak of 500,000 messages kept 92 MiB of blob files, still
// referenced by 3 MiB of sstables, through the idle flush and through a
// restart, because pebble found no compaction due (docs/reliability.md,
// soak gap 4). The flush brings forward what a restart does, no more.

const (
	// idleQuietBytes is the most a period may write and still count as
	// quiet: a leader's stamps, a scheduler's occasional records.
	idleQuietBytes = 64 << 10
	// idleFlushMinBytes is the least written since the last flush for an
	// idle flush to be worth a new sstable.
	idleFlushMinBytes = 1 << 20
)

// idleFlusher is a Store's idle-flush loop.
type idleFlusher struct {
	written atomic.Uint64 // bytes of batches applied since Open
	deletes atomic.Uint64 // batches applied since Open with a delete in them
	// due's state, owned by the loop: written at the last period's end,
	// and written and deletes at the last flush; busy: the last period
	// was not quiet.
	last, flushedBytes, flushedDeletes uint64
	busy                               bool

	quit chan struct{}
	once sync.Once
	done sync.WaitGroup
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
	f.done.Go(func() { f.run(s, after) })
}

// stop ends the loop and waits for a flush under way; it may be called
// more than once.
func (f *idleFlusher) stop() {
	if f.quit == nil {
		return
	}
	f.once.Do(func() { close(f.quit) })
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

func (f *idleFlusher) run(s *Store, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.quit:
			return
		case <-t.C:
		}
		if !f.due() {
			continue
		}
		if err := s.flush(); err != nil {
			s.log.Warn("pebblestore: idle flush failed", "dir", s.dir, "err", err)
		}
	}
}

// due is one period's verdict, called once a period: whether the period
// since the last call was quiet and a flush is worth it (see the top of
// this file); true counts as flushed.
func (f *idleFlusher) due() bool {
	w, d := f.written.Load(), f.deletes.Load()
	quiet := w-f.last <= idleQuietBytes
	afterBusy := f.busy
	f.last, f.busy = w, !quiet
	if !quiet {
		return false
	}
	if !(afterBusy && d != f.flushedDeletes) && w-f.flushedBytes < idleFlushMinBytes {
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
