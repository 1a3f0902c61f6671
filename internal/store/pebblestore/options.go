package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults for the zero values of Options.
const (
	// DefaultMemTableSize is the largest memtable the automatic sizing
	// picks (a store of more than 128 MiB); MinMemTableSize the smallest
	// (a new or small store). See Options.MemTableSize.
	//
	// It was 64 MiB until 2026-12-02. In a build without cgo (the release
	// binaries and the container image: CGO_ENABLED=0) pebble allocates
	// memtables and the block cache on the Go heap, where the collector's
	// goal doubles them: after a restart over 2 M queued 1 KiB messages
	// the drain peaked at 418 MiB RSS with 64 MiB memtables, 201–225 MiB
	// with 32 MiB and 138–139 MiB with 16 MiB (cgo builds, which allocate
	// them with malloc: 141–148, 120–163 and 104–118 MiB). A store that
	// starts empty runs at MinMemTableSize until its next restart, as in
	// every benchmark that starts from an empty store (the deep backlog's
	// drain after its restart ran at 64 MiB until then).
	DefaultMemTableSize                = 16 << 20
	MinMemTableSize                    = 8 << 20
	DefaultMemTableStopWritesThreshold = 4
	DefaultCacheSize                   = 16 << 20
	DefaultWALBytesPerSync             = 0
	DefaultBytesPerSync                = 512 << 10
	DefaultValueSeparationMin          = 256
	DefaultIdleFlushAfter              = 10 * time.Second
)

// Value separation settings (see Options.ValueSeparationMin). Pebble keeps
// an sstable from referencing more than maxBlobReferenceDepth overlapping
// blob files (beyond that a compaction copies the values into a new one),
// and rewrites a blob file to reclaim the space of deleted values once
// blobGarbageRatio of the blob bytes are garbage and the file is at least
// blobRewriteMinAge old. A queue deletes its values in roughly the order
// it wrote them, so most blob files die whole and are removed without a
// rewrite; the rewrite bounds the disk a few long-lived messages (a dead-
// letter queue, long delays) can pin.
const (
	maxBlobReferenceDepth = 10
	blobRewriteMinAge     = 5 * time.Minute
	blobGarbageRatio      = 0.2
)

// formatMajorVersion pins pebble's on-disk format. It is named rather than
// pebble.FormatNewest so that upgrading the pebble module never silently
// ratchets the files to a format an older Sluice binary cannot read; raising
// it is a deliberate change (and one-way: pebble never downgrades).
const formatMajorVersion = pebble.FormatValueSeparation

// Options tunes the store. The zero value is a sensible production setting
// for a broker: write-mostly, fsync-bound, scanned once at start-up.
type Options struct {
	// FS is the filesystem the store lives on. Nil means the operating
	// system's (vfs.Default). Tests inject a crashable MemFS (crashfs) to
	// simulate power loss, or a wrapper that fails syncs to exercise
	// fail-stop.
	FS vfs.FS

	// Logger receives pebble's messages: its informational chatter (flushes,
	// compactions, WAL rotation) at Debug, errors at Error, write stalls and
	// slow disks at Warn. Nil means slog.Default().
	//
	// Pebble reports conditions it cannot survive (a failed MANIFEST sync,
	// a commit pipeline it calls broken, detected corruption) through a
	// Fatalf callback and assumes it does not return. The store logs those
	// at Error and calls OnFatal, which stops the process.
	Logger *slog.Logger

	// OnFatal is called, on whichever goroutine pebble reports it, when
	// pebble hits an error it cannot survive. It must not return: pebble's
	// state is undefined after it, and a process that kept serving would
	// answer from a store whose commit pipeline may be wedged. Nil means
	// the store logs "pebblestore: fatal error; stopping the process" and
	// exits with status FatalExitCode (fail-stop: a restart replays exactly
	// what was synced). If a test's OnFatal returns, the store panics as
	// pebble expects; a panic inside Write then fails the store.
	OnFatal func(err error)

	// MemTableSize is the size of one memtable in bytes. 0 sizes it for
	// the data at each Open: a sixteenth of the store's sstables, rounded
	// up to a power of two, between MinMemTableSize (8 MiB) and
	// DefaultMemTableSize (16 MiB). Larger memtables mean fewer flushes and
	// fewer L0 files, and a longer WAL to replay at start-up; the process
	// holds up to MemTableStopWritesThreshold of them in memory. A batch
	// larger than half a memtable is applied as a flushable batch of its
	// own.
	//
	// It also sets the disk the WAL takes: pebble preallocates each WAL
	// file to 110% of the memtable size and keeps up to
	// MemTableStopWritesThreshold+1 finished ones for reuse, so a fixed
	// 64 MiB made a store of a thousand messages take over 200 MB.
	MemTableSize uint64

	// MemTableStopWritesThreshold is how many memtables may be queued for
	// flushing before writes stall (0 means 4). Higher absorbs bursts when
	// the disk is briefly slow, at the cost of memory.
	MemTableStopWritesThreshold int

	// CacheSize is the block cache in bytes (0 means DefaultCacheSize,
	// 16 MiB). The engine reads only during its start-up Scan, so a big
	// cache buys little.
	CacheSize int64

	// IdleFlushAfter is the period of the idle flush: after a period of
	// next to no writes (idleQuietBytes or less) that follows a busy one
	// with a delete since the last flush, or once idleFlushMinBytes came
	// since it, the store flushes its memtable, so that a drained
	// backlog's space comes back while the broker idles; the first light
	// period after a flush (this one or pebble's own) or after Open
	// compacts the whole store if pebble estimates that its deletes
	// shadow an eighth of it
	// (idleflush.go). 0 means DefaultIdleFlushAfter (10 s), negative never.
	IdleFlushAfter time.Duration

	// WALMinSyncInterval, if positive, makes the WAL wait at least this long
	// after one sync before the next, so that more concurrent durable writers
	// share it. It trades latency for fewer fsyncs; zero (the default) syncs
	// as soon as the previous sync returns, which already groups every writer
	// that arrived meanwhile.
	WALMinSyncInterval time.Duration

	// WALBytesPerSync, if positive, makes the WAL sync in the background
	// every so many bytes, to smooth out writeback of non-durable writes.
	// Zero (the default) leaves syncing to durable writes.
	WALBytesPerSync int

	// BytesPerSync is how often sstable writes sync in the background while
	// flushing and compacting (0 means DefaultBytesPerSync, 512 KiB), so a
	// flush does not end in one huge fsync that stalls the WAL's.
	BytesPerSync int

	// ValueSeparationMin is the smallest value, in bytes, that a flush or
	// compaction writes to a blob file instead of into the sstable (0
	// means DefaultValueSeparationMin, 256; negative keeps every value in
	// the sstables). Message bodies are written once and deleted soon
	// after; kept inline, every compaction that carries a message's key
	// until its delete arrives also reads, decompresses, recompresses and
	// rewrites its body, which under a backlog was a quarter of the
	// server's CPU (docs/benchmarks.md). Separated, compactions move keys
	// and small state records, and a blob file is deleted once none of
	// its values is referenced.
	ValueSeparationMin int

	// OnSync, if set, is called after each sync of a WAL file returns
	// (whether or not it succeeded) with how long it took: the fsync
	// latency that every durable Write waits for. It is called on pebble's
	// WAL sync goroutine, so it must be fast and must not block (a metrics
	// histogram's Observe is fine). Syncs of sstables, blob files and the
	// MANIFEST are not reported.
	OnSync func(time.Duration)
}

// pebbleOptions translates o into pebble's options; onFlush, if not nil,
// is called after each flush that succeeded (the idle flusher counts them).
func (o Options) pebbleOptions(log *slog.Logger, onFlush func()) *pebble.Options {
	po := &pebble.Options{
		FS:                          o.FS,
		FormatMajorVersion:          formatMajorVersion,
		MemTableSize:                o.MemTableSize,
		MemTableStopWritesThreshold: o.MemTableStopWritesThreshold,
		CacheSize:                   o.CacheSize,
		WALBytesPerSync:             o.WALBytesPerSync,
		BytesPerSync:                o.BytesPerSync,
		// The WAL is what makes a durable Write durable. Never turn it off.
		DisableWAL: false,
	}
	if po.FS == nil {
		po.FS = vfs.Default
	}
	if po.MemTableSize == 0 {
		po.MemTableSize = DefaultMemTableSize // Open sizes it for the data
	}
	if po.MemTableStopWritesThreshold == 0 {
		po.MemTableStopWritesThreshold = DefaultMemTableStopWritesThreshold
	}
	if po.CacheSize == 0 {
		po.CacheSize = DefaultCacheSize
	}
	if po.BytesPerSync == 0 {
		po.BytesPerSync = DefaultBytesPerSync
	}
	if min := o.ValueSeparationMin; min >= 0 {
		if min == 0 {
			min = DefaultValueSeparationMin
		}
		policy := pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           min,
			MaxBlobReferenceDepth: maxBlobReferenceDepth,
			RewriteMinimumAge:     blobRewriteMinAge,
			TargetGarbageRatio:    blobGarbageRatio,
		}
		po.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy { return policy }
	}
	if d := o.WALMinSyncInterval; d > 0 {
		po.WALMinSyncInterval = func() time.Duration { return d }
	}

	lg := slogAdapter{log: log, onFatal: o.OnFatal}
	po.Logger = lg
	el := pebble.MakeLoggingEventListener(lg)
	// A flush or compaction that fails (a full disk) is retried at once
	// and fails again, dozens of times a second for as long as the cause
	// lasts; each report with pebble's stack trace (slog formats errors
	// with %+v) would flood the log — and, on the same disk, fill it.
	bg := &everyLimiter{every: backgroundErrorEvery}
	el.BackgroundError = func(err error) {
		if n, ok := bg.allow(time.Now()); ok {
			log.Error("pebble: background error", "err", err.Error(), "suppressed_since_last", n)
		}
	}
	el.WriteStallBegin = func(info pebble.WriteStallBeginInfo) {
		log.Warn("pebble: write stall began", "reason", info.Reason)
	}
	el.WriteStallEnd = func() {
		log.Warn("pebble: write stall ended")
	}
	el.DiskSlow = func(info pebble.DiskSlowInfo) {
		log.Warn("pebble: disk slow", "info", info.String())
	}
	if onFlush != nil {
		logged := el.FlushEnd
		el.FlushEnd = func(info pebble.FlushInfo) {
			logged(info)
			if info.Err == nil {
				onFlush()
			}
		}
	}
	po.EventListener = &el
	return po
}

// fatalError is the panic value of slogAdapter.Fatalf. Write recovers it.
type fatalError struct{ err error }

func (f fatalError) Error() string { return f.err.Error() }

// FatalExitCode is the process's exit status when pebble reports a fatal
// error and Options.OnFatal is nil (70: EX_SOFTWARE).
const FatalExitCode = 70

// slogAdapter implements pebble.Logger on top of slog.
type slogAdapter struct {
	log     *slog.Logger
	onFatal func(error) // nil: exit the process
}

// Infof logs at Debug: pebble's informational messages are routine for a
// broker operator.
func (a slogAdapter) Infof(format string, args ...any) {
	if a.log.Enabled(context.Background(), slog.LevelDebug) {
		a.log.Debug(fmt.Sprintf(format, args...))
	}
}

// Errorf logs at Error.
func (a slogAdapter) Errorf(format string, args ...any) {
	a.log.Error(fmt.Sprintf(format, args...))
}

// Fatalf logs at Error and stops the process (Options.OnFatal). Should a
// test's OnFatal return, it panics with a fatalError: pebble does not
// expect Fatalf to return.
func (a slogAdapter) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	err := errors.New(msg)
	a.log.Error("pebble: fatal: " + msg)
	if a.onFatal != nil {
		a.onFatal(err)
	} else {
		a.log.Error("pebblestore: fatal error; stopping the process", "err", err, "exit_code", FatalExitCode)
		os.Exit(FatalExitCode)
	}
	panic(fatalError{err})
}

// memTableSizeFor is the automatic Options.MemTableSize for the store in
// dir: a sixteenth of its sstables' bytes, rounded up to a power of two,
// clamped to [MinMemTableSize, DefaultMemTableSize]. A directory that
// cannot be listed (it does not exist yet) counts as empty.
func memTableSizeFor(fs vfs.FS, dir string) uint64 {
	var total int64
	names, _ := fs.List(dir)
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") && !strings.HasSuffix(n, ".blob") {
			continue
		}
		if st, err := fs.Stat(fs.PathJoin(dir, n)); err == nil {
			total += st.Size()
		}
	}
	size := uint64(MinMemTableSize)
	for size < DefaultMemTableSize && int64(size) < total/16 {
		size <<= 1
	}
	return size
}

// backgroundErrorEvery is how often pebble's background errors are logged
// at most (the first at once).
const backgroundErrorEvery = 10 * time.Second

// everyLimiter lets an event through at most once every `every`,
// counting the ones it holds back.
type everyLimiter struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	held  int
}

// allow reports whether the event at now goes through, and how many were
// held back since the last one that did.
func (l *everyLimiter) allow(now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.held++
		return 0, false
	}
	held, l.held, l.last = l.held, 0, now
	return held, true
}
