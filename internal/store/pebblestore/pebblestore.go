// Package pebblestore is Sluice's durable store.Store, built on the pebble
// LSM engine (github.com/cockroachdb/pebble/v2).
//
// # Durability
//
// Write hands the batch to pebble's commit pipeline, which appends it to the
// write-ahead log and applies it to the memtable in call order, and returns
// without waiting for the fsync. A durable write's Pending waits for the WAL
// sync that covers it. The WAL has a single syncing goroutine: while one
// fsync runs, every durable batch that arrives queues behind it and the next
// fsync covers them all, so N concurrent producers cost far fewer than N
// fsyncs (group commit). A non-durable write is in the WAL buffer and
// becomes durable with the next sync; since the WAL is one sequential log, a
// crash can lose a suffix of writes but never leave a hole.
//
// After the first failed write or sync of any of its files the store is
// failed: the Wait that saw it and every later Write or Sync return an error
// wrapping store.ErrFailed. The store notices the failure in the filesystem
// layer, before pebble reports it to any writer, so no write is accepted
// after a failed sync has been reported. Pebble itself never retries a
// failed WAL sync either, and the kernel may already have discarded the
// dirty pages, so retrying would risk acknowledging data that is not on
// disk. Two cases end differently: if the failing sync is the one pebble
// makes when it rotates to a new WAL file (or a write already inside pebble
// when the failure happened makes it rotate the failed WAL), pebble panics
// in a way that kills the process; and when pebble reports an error it
// cannot survive through its Fatalf callback (a failed MANIFEST sync, a
// commit pipeline it calls broken), Options.OnFatal stops the process with
// a log line and exit status FatalExitCode. Both are fail-stop, and
// recovery on restart replays exactly what was synced.
//
// # On-disk layout
//
// The directory is an ordinary pebble database: numbered *.log files (the
// WAL), *.sst files (sorted tables), *.blob files (values of
// Options.ValueSeparationMin bytes or more, referenced from the sorted
// tables), MANIFEST-* (the LSM's version history),
// OPTIONS-*, CURRENT-style marker files and a LOCK file that keeps two
// processes out. Its format is pebble's, pinned to one pebble format major
// version. How Sluice encodes its records into keys and values is the
// engine's business, not this package's.
//
// One key is the store's own: "\x00sluice/format" holds the Sluice store
// format version, currently "1". Open writes it when it creates a store and
// refuses a directory holding any other version, or holding data but no
// version. Keys beginning with "\x00sluice/" are reserved: Scan does not
// return them, Write rejects Set and Delete of them, and DeleteRange leaves
// them alone.
package pebblestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"

	"github.com/sluicemq/sluice/internal/store"
)

// FormatVersion is the Sluice store format this package reads and writes.
const FormatVersion = "1"

// Reserved keys. reservedEnd is the first key after every key that starts
// with reservedPrefix ('0' follows '/').
const (
	reservedPrefix = "\x00sluice/"
	reservedEnd    = "\x00sluice0"
	formatKey      = "\x00sluice/format"
)

// reserved reports whether k is a reserved key.
func reserved(k []byte) bool { return strings.HasPrefix(string(k), reservedPrefix) }

// ErrReservedKey is returned (wrapped in store.ErrFailed, like every write
// error) by Write when a batch sets or deletes a key under "\x00sluice/".
var ErrReservedKey = errors.New("pebblestore: key is reserved")

// Store is a store.Store on pebble. It is safe for concurrent use.
type Store struct {
	db  *pebble.DB
	dir string
	log *slog.Logger

	// mu is held shared by every operation that touches db and exclusively
	// by Close, because pebble forbids using a DB during or after Close.
	mu     sync.RWMutex
	closed bool

	snapMu sync.Mutex
	snaps  map[*Snapshot]struct{} // open Snapshots (Close closes them); guarded by snapMu

	// failed holds the first write error, wrapped in store.ErrFailed.
	failed atomic.Pointer[error]
	// syncFailed: a sync of one of the store's files failed
	// (FailedOnFullDisk).
	syncFailed atomic.Bool

	idle idleFlusher
}

var _ store.Store = (*Store)(nil)

// Open opens the store in dir, creating it if needed. It fails if dir holds
// a pebble database that is not a Sluice store or has a store format other
// than FormatVersion.
func Open(dir string, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{dir: dir, log: log}
	po := opts.pebbleOptions(log, func() { s.idle.flushes.Add(1) })
	if opts.MemTableSize == 0 {
		po.MemTableSize = memTableSizeFor(po.FS, dir)
	}
	tail := inspectWALTail(po.FS, dir, log)
	po.FS = &watchFS{FS: po.FS, onErr: func(err error) { _ = s.fail(err) }, onWALSync: opts.OnSync}
	db, err := pebble.Open(dir, po)
	if err != nil {
		if tail != nil && !errors.Is(tail.err, record.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("pebblestore: open %s: WAL %s is corrupt at offset %d of %d, before data that was synced; refusing to skip it: %w",
				dir, tail.file, tail.offset, tail.size, err)
		}
		return nil, fmt.Errorf("pebblestore: open %s: %w", dir, err)
	}
	if tail != nil {
		// Logged only once pebble has opened (and so holds the directory
		// lock and has replayed the same WAL), so that a failed Open, e.g.
		// because another process has the store, does not warn about a
		// tail that process is still writing.
		log.Warn("pebblestore: discarded a torn WAL tail (an incomplete last write); it was not replayed",
			"file", tail.file, "offset", tail.offset, "size", tail.size,
			"discarded_bytes", tail.size-tail.offset, "records_kept", tail.records, "reason", tail.err.Error())
	}
	s.db = db
	if err := s.failure(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.checkFormat(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.idle.checkGarbage = true // a restart may find a drained backlog on disk
	s.idle.start(s, opts.IdleFlushAfter)
	return s, nil
}

// walTail describes a newest WAL that does not end cleanly.
type walTail struct {
	file    string // the physical file
	offset  int64  // where the first record that cannot be read starts
	size    int64  // the file's size
	records int    // records read intact before offset
	err     error  // record.ErrUnexpectedEOF for a torn tail, else corruption
}

// inspectWALTail reads the newest WAL in dir the way pebble's replay will
// (wal.Scan and wal.Reader, the same code DB.replayWAL uses) and reports how
// it ends, or nil if it ends cleanly or cannot be inspected.
//
// Pebble replays the newest WAL with strictWALTail=false (DB.replayWAL in
// pebble's open.go): when it meets a record that is incomplete or fails its
// checksum, and no chunk in a later 32 KiB block carries a synced offset
// proving that record had been synced (record.Reader.readAheadForCorruption),
// the reader returns record.ErrUnexpectedEOF and pebble stops there,
// keeping every record before it and logging only an informational
// "stopped reading at offset" line. That is the torn-tail case, which the
// caller reports at Warn. Any other error (record.ErrInvalidChunk or
// ErrZeroedChunk: a bad record followed by data synced after it) makes
// pebble.Open fail with a corruption error, and the caller names the file
// and offset in it. See docs/adr/0001-storage-engine.md, "Torn tails and
// corruption", for what the torn-tail rule cannot tell apart.
//
// After a crash, a WAL that pebble recycled from an older one also ends in
// that file's stale records, which read as an unclean end too: the warning
// then counts them as discarded bytes, although they were never data of
// this WAL.
//
// It costs one extra sequential read of the newest WAL (at most about one
// memtable's worth), which then sits in the page cache for pebble's replay.
// Errors are not reported here: pebble's replay is authoritative and will
// return them.
func inspectWALTail(fs vfs.FS, dir string, log *slog.Logger) *walTail {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil || len(logs) == 0 {
		return nil // a new store, or pebble.Open will report the problem
	}
	ll := logs[len(logs)-1]
	r := ll.OpenForRead()
	defer func() { _ = r.Close() }()
	n := 0
	for {
		rec, off, err := r.NextRecord()
		if err == nil {
			if _, err = io.Copy(io.Discard, rec); err == nil {
				n++
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if !errors.Is(err, record.ErrUnexpectedEOF) && !errors.Is(err, record.ErrInvalidChunk) &&
			!errors.Is(err, record.ErrZeroedChunk) {
			log.Debug("pebblestore: could not inspect the WAL tail", "wal", ll.String(), "err", err)
			return nil
		}
		t := &walTail{file: off.PhysicalFile, offset: off.Physical, records: n, err: err}
		if fi, serr := fs.Stat(off.PhysicalFile); serr == nil {
			t.size = fi.Size()
		}
		return t
	}
}

// checkFormat verifies the format key, writing it into an empty database.
// An empty database without the key is new (or was created by a previous
// Open that crashed before its format key was durable).
func (s *Store) checkFormat() error {
	v, closer, err := s.db.Get([]byte(formatKey))
	switch {
	case err == nil:
		got := string(v)
		_ = closer.Close()
		if got != FormatVersion {
			return fmt.Errorf("pebblestore: %s has store format version %q; this build reads only version %q", s.dir, got, FormatVersion)
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("pebblestore: %s: reading format version: %w", s.dir, err)
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("pebblestore: %s: %w", s.dir, err)
	}
	empty := !it.First()
	err = errors.Join(it.Error(), it.Close())
	if err != nil {
		return fmt.Errorf("pebblestore: %s: %w", s.dir, err)
	}
	if !empty {
		return fmt.Errorf("pebblestore: %s holds data but no store format version; not a Sluice store", s.dir)
	}
	pb := s.db.NewBatch()
	_ = pb.Set([]byte(formatKey), []byte(FormatVersion), nil)
	err = s.apply(pb, true, false)
	if err == nil {
		err = (&pending{s: s, b: pb}).Wait()
	}
	if err != nil {
		return fmt.Errorf("pebblestore: %s: writing format version: %w", s.dir, err)
	}
	// Pebble creates a new database's first WAL before it raises the
	// on-disk format, so that WAL lacks the sync markers that let replay
	// tell a torn tail from corruption in the middle. A flush rotates to a
	// WAL written in the final format, so every acknowledged write of a new
	// store lands in a WAL with full corruption detection.
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("pebblestore: %s: rotating the first WAL: %w", s.dir, err)
	}
	return nil
}

// Write applies b atomically, after every earlier Write, and returns once
// the batch is in the WAL and visible, without waiting for the fsync. For a
// durable write the Pending waits for the WAL sync covering b; concurrent
// durable writers share syncs. An empty durable batch is a sync barrier: its
// Wait returns once everything written before it is durable.
//
// Write copies b, which may be reused as soon as Write returns. A batch with
// an unknown operation kind, or one that sets or deletes a reserved key, is
// rejected whole. Any error except store.ErrClosed fails the store.
func (s *Store) Write(b *store.Batch, durable bool) (store.Pending, error) {
	return s.write(b, nil, durable)
}

// write is Write with the store's own meta records (WriteMeta) set in the
// same pebble batch.
func (s *Store) write(b *store.Batch, meta []Meta, durable bool) (store.Pending, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	if err := s.failure(); err != nil {
		return nil, err
	}
	pb := s.db.NewBatchWithSize(b.Size() + 16*b.Len() + 16)
	deletes, err := fill(pb, b)
	if err != nil {
		_ = pb.Close()
		return nil, s.fail(err)
	}
	for _, m := range meta {
		if err := pb.Set([]byte(metaPrefix+m.Name), m.Value, nil); err != nil {
			_ = pb.Close()
			return nil, s.fail(err)
		}
	}
	if !durable {
		if pb.Empty() {
			_ = pb.Close()
			return store.Done{}, nil
		}
		if err := s.apply(pb, false, deletes); err != nil {
			return nil, err
		}
		_ = pb.Close()
		return store.Done{}, nil
	}
	if pb.Empty() {
		// A WAL-only record, so that pebble queues a sync for it.
		_ = pb.LogData(nil, nil)
	}
	if err := s.apply(pb, true, deletes); err != nil {
		return nil, err
	}
	return &pending{s: s, b: pb}, nil
}

// fill translates b into pb; deletes reports a delete of any kind among
// b's operations (for the idle flush).
func fill(pb *pebble.Batch, b *store.Batch) (deletes bool, err error) {
	for _, op := range b.Ops {
		switch op.Kind {
		case store.OpSet:
			if reserved(op.Key) {
				return false, fmt.Errorf("%w: %q", ErrReservedKey, op.Key)
			}
			err = pb.Set(op.Key, op.Value, nil)
		case store.OpDelete:
			if reserved(op.Key) {
				return false, fmt.Errorf("%w: %q", ErrReservedKey, op.Key)
			}
			err, deletes = pb.Delete(op.Key, nil), true
		case store.OpSingleDelete:
			if reserved(op.Key) {
				return false, fmt.Errorf("%w: %q", ErrReservedKey, op.Key)
			}
			err, deletes = pb.SingleDelete(op.Key, nil), true
		case store.OpDeleteRange:
			err, deletes = deleteRange(pb, op.Key, op.Value), true
		default:
			return false, fmt.Errorf("pebblestore: unknown operation kind %d", op.Kind)
		}
		if err != nil {
			return false, err
		}
	}
	return deletes, nil
}

// deleteRange adds a range deletion of [start, end) minus the reserved
// keys. An empty or inverted range deletes nothing.
func deleteRange(pb *pebble.Batch, start, end []byte) error {
	if bytes.Compare(start, end) >= 0 {
		return nil
	}
	if string(end) <= reservedPrefix || string(start) >= reservedEnd {
		return pb.DeleteRange(start, end, nil)
	}
	if string(start) < reservedPrefix {
		if err := pb.DeleteRange(start, []byte(reservedPrefix), nil); err != nil {
			return err
		}
	}
	if string(end) > reservedEnd {
		return pb.DeleteRange([]byte(reservedEnd), end, nil)
	}
	return nil
}

// apply commits pb: durable ones with ApplyNoSyncWait (the caller must
// SyncWait), others without a sync. On error the store is failed and pb is
// abandoned to the garbage collector, as pebble requires. A fatal error
// pebble reports while committing (its commit pipeline is broken) has
// already stopped the process through Options.OnFatal; the recover below
// only matters when a test's OnFatal returns. deletes says pb holds a
// delete of any kind (for the idle flush).
func (s *Store) apply(pb *pebble.Batch, durable, deletes bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = s.fail(fe.err)
		}
	}()
	n := pb.Len()
	if durable {
		err = s.db.ApplyNoSyncWait(pb, pebble.Sync)
	} else {
		err = s.db.Apply(pb, pebble.NoSync)
	}
	if err != nil {
		return s.fail(err)
	}
	s.idle.applied(n, deletes)
	return nil
}

// Failure returns the error that failed the store, wrapping
// store.ErrFailed, or nil: also a failure found by pebble's own
// background work (a flush that found the disk full), which no write of
// the caller's has met yet.
func (s *Store) Failure() error { return s.failure() }

// failure returns the error that failed the store, or nil.
func (s *Store) failure() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// FailedOnFullDisk reports whether the store failed because a write
// found its disk full (ENOSPC), and no sync of any of its files has
// failed since it opened. Such a failure has lost nothing: every durable
// write was synced before it was acknowledged, and a failed write(2),
// unlike a failed fsync, leaves the page cache as it was. So once space
// is back, a store opened on the same directory (after this one is
// closed) holds every durable write, and the unsynced tail is the torn
// tail a crash leaves. Any other failure (a failed sync, EIO) is
// fail-stop: the kernel may have dropped written pages.
func (s *Store) FailedOnFullDisk() bool {
	var ioe *IOError
	err := s.failure()
	return err != nil && !s.syncFailed.Load() && errors.As(err, &ioe) &&
		ioe.Op == "write" && errors.Is(ioe.Err, syscall.ENOSPC)
}

// fail records err as the store's failure unless one is already recorded,
// and returns the recorded failure.
func (s *Store) fail(err error) error {
	if ioe := (*IOError)(nil); errors.As(err, &ioe) && ioe.Op != "write" {
		s.syncFailed.Store(true)
	}
	werr := fmt.Errorf("%w: pebblestore %s: %w", store.ErrFailed, s.dir, err)
	if s.failed.CompareAndSwap(nil, &werr) {
		s.log.Error("store failed; refusing further writes", "dir", s.dir, "err", err)
	}
	// If another error got there first, this caller still gets its own
	// cause, as a failure.
	return werr
}

// pending is the Pending of a durable write.
type pending struct {
	s    *Store
	once sync.Once
	b    *pebble.Batch
	err  error
}

// Wait waits for the WAL sync covering the batch. A failed sync fails the
// store. Wait may be called any number of times, from any goroutine, also
// after Close.
func (p *pending) Wait() error {
	p.once.Do(func() {
		if err := p.b.SyncWait(); err != nil {
			p.err = p.s.fail(err)
		} else {
			_ = p.b.Close()
		}
		p.b = nil
	})
	return p.err
}

// Scan calls fn for every key with the given prefix in ascending order,
// reading a consistent snapshot taken when the scan starts. key and value
// are valid only during the call. Reserved keys are skipped. fn must not
// call Close.
// Get returns a copy of key's value, or store.ErrNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	if reserved(key) {
		return nil, store.ErrNotFound
	}
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: get: %w", err)
	}
	out := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("pebblestore: get: %w", err)
	}
	return out, nil
}

func (s *Store) Scan(prefix []byte, fn func(key, value []byte) error) (err error) {
	if len(prefix) == 0 {
		// A nil bound, not an empty one: pebble's invariant checks (on in
		// race builds) index a non-nil seek key without a length check.
		prefix = nil
	}
	return s.iterate(prefix, prefixEnd(prefix), func(it *pebble.Iterator) error {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("pebblestore: scan: %w", err)
		}
		return fn(it.Key(), v)
	})
}

// ScanRange calls fn for every key in [start, end) in ascending order; see
// store.Store. The iterator is bounded by start and end, so it never visits
// keys (or tombstones) outside the range.
func (s *Store) ScanRange(start, end []byte, fn func(key, value []byte) error) error {
	err := s.iterate(nilIfEmpty(start), nilIfEmpty(end), func(it *pebble.Iterator) error {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("pebblestore: scan: %w", err)
		}
		return fn(it.Key(), v)
	})
	if errors.Is(err, store.ErrStopScan) {
		return nil
	}
	return err
}

// ScanLengths is ScanRange with each value's length only. Values of 256
// bytes or more are separated from their keys (see options.go); the
// iterator's LazyValue knows their length without fetching them, so
// counting a backlog of 1 KiB messages reads keys and value handles only.
func (s *Store) ScanLengths(start, end []byte, fn func(key []byte, valueLen int) error) error {
	err := s.iterate(nilIfEmpty(start), nilIfEmpty(end), func(it *pebble.Iterator) error {
		lv := it.LazyValue()
		return fn(it.Key(), lv.Len())
	})
	if errors.Is(err, store.ErrStopScan) {
		return nil
	}
	return err
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// iterate runs visit on every unreserved key in [lower, upper).
func (s *Store) iterate(lower, upper []byte, visit func(it *pebble.Iterator) error) (err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("pebblestore: scan: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pebblestore: scan: %w", cerr)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		if reserved(it.Key()) {
			continue
		}
		if err := visit(it); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("pebblestore: scan: %w", err)
	}
	return nil
}

// prefixEnd returns the smallest key greater than every key with the given
// prefix, or nil if there is none (the prefix is empty or all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Sync makes every write so far durable. It is a durable write of an empty
// batch, so it shares its fsync with concurrent durable writers.
func (s *Store) Sync() error {
	p, err := s.Write(&store.Batch{}, true)
	if err != nil {
		return err
	}
	return p.Wait()
}

// Close closes the database, syncing the WAL unless the store is failed,
// and every Snapshot still open. Pendings of earlier writes remain valid. Later operations, including a
// second Close, return store.ErrClosed.
func (s *Store) Close() error {
	s.idle.stop() // before the lock: a flush under way holds it shared
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	s.snapMu.Lock()
	for sn := range s.snaps {
		_ = sn.closeLocked()
	}
	s.snapMu.Unlock()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("pebblestore: close %s: %w", s.dir, err)
	}
	return nil
}
