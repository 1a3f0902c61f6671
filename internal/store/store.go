// Package store is Sluice's durable state: an ordered key/value store with
// atomic batches and group-committed durability.
//
// The store knows nothing of queues or protocols. The engine encodes its
// state into keys and values, writes one Batch per state change, and reads
// back with Scan when it opens. At run time it reads bodies kept beyond its
// memory budget (Get) and the cold part of a standard queue's backlog, a
// bounded key range at a time (ScanRange), in sequence order from the
// queue's first cold message: deletes leave tombstones only behind that
// point, so a refill does not walk over them.
//
// # Durability contract
//
// Write applies a batch atomically and in call order: if batch B was passed
// to Write after batch A returned from Write, then after any crash the store
// holds either nothing of B, or all of A and all of B. When Write is called
// with durable=true, the returned Pending's Wait returns nil only once the
// batch (and so every batch written before it) is on stable storage (fsync
// or fdatasync has returned). Concurrent durable writers share syncs (group
// commit), so many producers cost few fsyncs.
//
// Writes with durable=false become durable with the next durable write or
// sync; a crash may lose them, but never out of order.
//
// A durable Write of an empty batch is a sync barrier: its Wait returns nil
// once every batch written before it is durable, and fails if that sync
// fails. The engine uses it so that an OK that wrote nothing (a duplicate
// send, a retried delete) waits for the write it depends on.
//
// After Write or Wait returns an error other than ErrClosed the store is
// failed: every later Write returns an error wrapping ErrFailed. Sluice never
// retries a failed write and acknowledges it; see docs/guarantees.md.
package store

import (
	"errors"
)

// ErrClosed is returned by operations on a closed store.
var ErrClosed = errors.New("store: closed")

// ErrNotFound is returned by Get for a key that is not in the store.
var ErrNotFound = errors.New("store: not found")

// ErrStopScan, returned by the callback of ScanRange or ScanLengths, stops
// the scan early; the scan then returns nil.
var ErrStopScan = errors.New("store: stop scan")

// ErrFailed wraps the first I/O error after which the store accepts no more
// writes. Once an fsync has failed, the kernel may have dropped the dirty
// pages, so nothing written since the last good sync can be trusted to reach
// disk; the only safe answer is to stop.
var ErrFailed = errors.New("store: failed")

// ErrNotLeading is wrapped by the errors of a replicated store's writes
// once its node does not lead (any more): the write may or may not take
// effect under the next leader, and the client should retry through it.
// Only stores that replicate return it.
var ErrNotLeading = errors.New("store: this node does not lead the replicated store")

// ErrNotWritten is wrapped by the errors of a replicated store's writes
// (and the engine's) that are certain to have taken no effect: the write
// was refused before it was proposed, or its proposal was dropped before
// it entered the log. One that also wraps ErrNotLeading, sent again
// through the next leader, is stored once. A write that failed without
// it may or may not take effect.
var ErrNotWritten = errors.New("store: nothing of the write was written")

// FailureReporter is implemented by stores that can fail in work of
// their own that no Write of the caller's has met yet (pebble's flushes
// and compactions finding the disk full). Failure returns that failure,
// wrapping ErrFailed, or nil; every later Write returns it too.
type FailureReporter interface {
	Failure() error
}

// Store is the interface both implementations (pebble on disk, memory for
// fast tests) satisfy, and which the conformance suite in storetest checks.
type Store interface {
	// Write applies b atomically, ordered after every earlier Write. It does
	// not wait for durability; call Wait on the result. Write does not retain
	// b after it returns: the caller may reuse it.
	Write(b *Batch, durable bool) (Pending, error)
	// Scan calls fn for every key with the given prefix, in ascending key
	// order, with the latest value written. key and value are valid only
	// during the call. A non-nil error from fn stops the scan and is
	// returned.
	Scan(prefix []byte, fn func(key, value []byte) error) error
	// ScanRange calls fn for every key k with start <= k < end (a nil end:
	// no upper bound), in ascending key order, with the latest value
	// written. It reads only that range (it never walks from the first
	// key of the store), so the engine can read a queue's cold messages a
	// window at a time. key and value are valid only during the call. If
	// fn returns ErrStopScan the scan stops and returns nil; any other
	// non-nil error stops it and is returned.
	ScanRange(start, end []byte, fn func(key, value []byte) error) error
	// ScanLengths is ScanRange that gives each value's length instead of
	// the value. A store that keeps large values apart from their keys
	// (pebble's value separation) answers it without reading them.
	ScanLengths(start, end []byte, fn func(key []byte, valueLen int) error) error
	// Get returns a copy of key's latest value, or ErrNotFound. The engine
	// reads at run time message bodies it keeps on disk beyond its memory
	// budget, and single cold messages a receipt handle names.
	Get(key []byte) ([]byte, error)
	// Sync makes every write so far durable.
	Sync() error
	// Close releases the store. Writes not yet durable may be lost.
	Close() error
}

// SettledReader is implemented by a store whose reads wait until the
// caller's own earlier writes are readable (the replicated store's reads
// wait for this node's last proposal to apply). Its methods read without
// that wait: they see at least every write whose Pending.Wait has
// returned nil, possibly later ones. The engine uses them where it keeps
// the writes not yet known to be settled in memory itself (FIFO
// deduplication's young set), so that a lookup under a queue's lock does
// not wait for a consensus round. A store whose writes are readable as
// soon as Write returns (pebble, memory) need not implement it: its
// ordinary reads are as good.
type SettledReader interface {
	GetSettled(key []byte) ([]byte, error)
	ScanRangeSettled(start, end []byte, fn func(key, value []byte) error) error
}

// Leaser is implemented by a store whose writer can lose the right to
// write without learning it at once: a Raft leader cut off from the other
// nodes goes on believing it leads until it notices, while another node
// may already lead and have changed the state. Leased reports whether the
// writer holds that right for certain now. The engine hands out no
// message while it does not (a receive would deliver from stale state, a
// message the new leader may already have deleted). A store with a single
// writer (pebble, memory) need not implement it.
type Leaser interface {
	Leased() bool
}

// Pending is the durability of one Write.
type Pending interface {
	// Wait blocks until the batch is durable (for a durable write) and
	// returns the write's error, if any. It may be called more than once.
	Wait() error
}

// OpKind is the kind of one batch operation.
type OpKind uint8

// Batch operations.
const (
	OpSet         OpKind = 1 // set Key to Value
	OpDelete      OpKind = 2 // delete Key
	OpDeleteRange OpKind = 3 // delete every key in [Key, Value)
	// OpSingleDelete deletes Key, which must have been set at most once
	// since it was last deleted (by any delete) or created. The store
	// may then drop the set and the delete together when they meet
	// (pebble's SingleDelete), so a write-once record costs no lasting
	// tombstone. Using it on a key set more than once is a caller bug
	// whose outcome is undefined: an older value may reappear.
	OpSingleDelete OpKind = 4
)

// Op is one operation of a batch.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte // for OpDeleteRange: the exclusive end key
}

// Batch is an ordered list of operations applied atomically. The zero value
// is an empty batch.
type Batch struct {
	Ops  []Op
	size int
}

// Set appends a set of key to value. The batch keeps the slices; callers
// must not modify them until the batch has been written.
func (b *Batch) Set(key, value []byte) {
	b.Ops = append(b.Ops, Op{Kind: OpSet, Key: key, Value: value})
	b.size += len(key) + len(value)
}

// Delete appends a delete of key.
func (b *Batch) Delete(key []byte) {
	b.Ops = append(b.Ops, Op{Kind: OpDelete, Key: key})
	b.size += len(key)
}

// SingleDelete appends a delete of key under OpSingleDelete's contract:
// key was set at most once since it was last deleted.
func (b *Batch) SingleDelete(key []byte) {
	b.Ops = append(b.Ops, Op{Kind: OpSingleDelete, Key: key})
	b.size += len(key)
}

// DeleteRange appends a delete of every key k with start <= k < end.
func (b *Batch) DeleteRange(start, end []byte) {
	b.Ops = append(b.Ops, Op{Kind: OpDeleteRange, Key: start, Value: end})
	b.size += len(start) + len(end)
}

// Len returns the number of operations.
func (b *Batch) Len() int { return len(b.Ops) }

// Size returns the bytes of keys and values in the batch.
func (b *Batch) Size() int { return b.size }

// Reset empties the batch for reuse.
func (b *Batch) Reset() {
	clear(b.Ops)
	b.Ops = b.Ops[:0]
	b.size = 0
}

// Done is a Pending that is already complete with the given error.
type Done struct{ Err error }

// Wait returns d.Err.
func (d Done) Wait() error { return d.Err }
