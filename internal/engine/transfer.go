package engine

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Messages into a queue that lives outside this engine (ADR 0015 decision
// 6, step 5: in a cluster with shards, a dead-letter queue on another shard
// than its source, or a redrive's destination there).
//
// A message that leaves its source for such a queue is written, in the
// batch that takes it out of the source, as a transfer record under
// prefixTransfer: the dead-letter copy the target will hold (a content
// record), its target's name and a random transfer id. A mover outside
// the engine (internal/server transfer.go, on the source shard's leader)
// reads the durable transfers (Transfers), has the target's engine import
// them (ImportTransfers, on the target shard's leader), then ends them
// here (EndTransfers). The target writes each imported copy together with
// an import record of its transfer id, and skips an id it has recorded: a
// mover that crashed, or lost its leadership, between the import and the
// end imports again, and the second import is a no-op. Import records are
// swept importKeep after their import, not sooner: a mover that lost its
// leadership may still have an import of the same transfer in flight
// while the next leader's mover imports and ends it. The message is
// therefore in its source, or in the outbox, or in its target — never in
// none — and, once a transfer has ended, in exactly one queue. What is
// given up is atomicity: between the source's batch and the import the
// message is in neither queue's counts (TransfersPending counts it).
//
//	"O" id:16              transfer record: target name, source name, content record
//	"J" id:16              import record: when the transfer was imported (varint UnixNano), swept importKeep later
//
// A transfer id is 8 bytes of the engine's clock (so transfers are read
// roughly in the order they were written) and 8 random bytes.
const (
	prefixTransfer = 'O'
	prefixImport   = 'J'
)

// importKeep is how long an import record is kept after its import:
// far beyond any call a mover may still have in flight (they time out in
// 30 s), so an import of the same transfer by a deposed mover is still a
// no-op.
const importKeep = 5 * time.Minute

// importSweepEvery bounds how often an import sweeps old import records,
// and importSweepMax how many one sweep deletes.
const (
	importSweepEvery = time.Minute
	importSweepMax   = 4096
)

// importSeqSource is the source id under which imports keep their
// highest sequence record in the target (movedSeqKey): imports are
// written under the engine's import lock, not under any source queue's
// lock, so they are a writer of their own. Queue ids never reach it.
const importSeqSource = math.MaxUint32

// TransferID names one transfer.
type TransferID [16]byte

// String is the id in hex.
func (id TransferID) String() string { return fmt.Sprintf("%x", id[:]) }

// Transfer is a dead letter on its way out of this engine to a queue that
// lives elsewhere.
type Transfer struct {
	ID     TransferID
	Target string // the dead-letter queue
	Source string // the queue it left
	Reason string // a dead letter's reason
	// Redrive is set for a message a redrive (move task) moves back to
	// its source or to a destination: its target's RedriveAllowPolicy,
	// which is about dead letters, does not apply.
	Redrive bool
	// Route is set for a route transfer (routed.go): a dead letter of a
	// queue whose dead letters are routed outside this engine
	// (Options.RouteElsewhere), with no Target: the routing engine's
	// ImportRouted chooses its targets.
	Route bool
	// Record is the copy the target holds, as a content record of this
	// engine's format (storage-format.md), opaque to a mover.
	Record []byte
}

func transferKey(id TransferID) []byte { return append([]byte{prefixTransfer}, id[:]...) }
func importKey(id TransferID) []byte   { return append([]byte{prefixImport}, id[:]...) }

func encodeTransfer(t *Transfer) []byte {
	e := encoder{b: make([]byte, 0, 1+3*binary.MaxVarintLen64+len(t.Target)+len(t.Source)+len(t.Reason)+len(t.Record)+binary.MaxVarintLen64)}
	e.b = append(e.b, recordV1)
	e.str(t.Target)
	e.str(t.Source)
	e.str(t.Reason)
	e.bytes(t.Record)
	e.boolean(t.Redrive)
	if t.Route {
		e.boolean(true) // absent (false) in records of earlier builds
	}
	return e.b
}

func decodeTransfer(key, v []byte) (Transfer, error) {
	var t Transfer
	if len(key) != 17 || len(v) < 1 || v[0] != recordV1 {
		return t, fmt.Errorf("%w: transfer record %x", errCorrupt, key)
	}
	copy(t.ID[:], key[1:])
	d := decoder{b: v[1:]}
	t.Target = d.str()
	t.Source = d.str()
	t.Reason = d.str()
	t.Record = append([]byte(nil), d.bytes()...)
	t.Redrive = d.boolean()
	if len(d.b) > 0 {
		t.Route = d.boolean()
	}
	if d.err != nil {
		return t, fmt.Errorf("%w: transfer record %x", errCorrupt, key)
	}
	return t, nil
}

func (e *Engine) newTransferID(now int64) TransferID {
	var id TransferID
	binary.BigEndian.PutUint64(id[:8], uint64(now))
	_, _ = rand.Read(id[8:]) // crypto/rand does not fail
	return id
}

// heldElsewhere reports whether a dead-letter target that this engine does
// not hold lives outside it (Options.QueueHeldElsewhere). Called under a
// queue's lock.
func (e *Engine) heldElsewhere(name string) bool {
	if e.elsewhere == nil {
		return false
	}
	if q, _ := e.lookup(name); q != nil {
		return false
	}
	return e.elsewhere(name)
}

// transferDeadLetterLocked writes m's dead-letter copy as transfer t (for
// a queue held elsewhere, or a route transfer: routed.go) in b, the batch
// that takes m out of q, so the two are one atomic write.
func (e *Engine) transferDeadLetterLocked(q *queue, m *message, t *Transfer, env []byte, now int64, b *store.Batch) {
	n := e.deadLetterCopyLocked(q, m, t.Reason, env, now, q.isFIFO)
	n.group = &group{id: m.groupID()}
	e.writeTransferLocked(q, t, n, now, b)
}

// writeTransferLocked writes t, carrying n, in b, a batch of q's under its
// lock; the unlock that follows the batch's write tells the mover
// (pokeTransfers). Not here: a mover told now could read the outbox
// before b is in the store, find nothing, and wait out its backoff.
func (e *Engine) writeTransferLocked(q *queue, t *Transfer, n *message, now int64, b *store.Batch) {
	t.ID = e.newTransferID(now)
	t.Record = encodeContent(n)
	b.Set(transferKey(t.ID), encodeTransfer(t))
	e.transfers.Add(1)
	q.transferOut = true
}

// pokeTransfersLocked tells the mover that transfers were written
// (TransferReady), if q's batch, now in the store, carried some; q's lock
// is held.
func (e *Engine) pokeTransfersLocked(q *queue) {
	if !q.transferOut {
		return
	}
	q.transferOut = false
	select {
	case e.transferPoke <- struct{}{}:
	default:
	}
}

// TransferReady returns a channel that receives a value (coalesced) after
// a transfer has been written: a mover waits on it, and also polls (it is
// not told of transfers a restart or a new leader found).
func (e *Engine) TransferReady() <-chan struct{} { return e.transferPoke }

// TransfersPending is the number of transfers written and not yet ended:
// dead letters between their source and a dead-letter queue held elsewhere.
func (e *Engine) TransfersPending() int64 { return e.transfers.Load() }

// countTransfers sets the pending count from the store at open.
func (e *Engine) countTransfers() error {
	var n int64
	err := e.st.Scan([]byte{prefixTransfer}, func(k, v []byte) error {
		n++
		return nil
	})
	e.transfers.Store(n)
	return err
}

// Transfers returns up to max transfers (and, past the first, up to about
// maxBytes of their copies), oldest first (after the one
// named by after, when not nil: a mover goes on past transfers it cannot
// move yet), each of them durable: a transfer returned here is never
// undone by a crash or a lost leadership of this engine's store, so
// importing it elsewhere cannot duplicate a message that then comes back
// in its source.
func (e *Engine) Transfers(after *TransferID, max int, maxBytes int) ([]Transfer, error) {
	var out []Transfer
	bytes := 0
	start := []byte{prefixTransfer}
	if after != nil {
		start = append(transferKey(*after), 0)
	}
	err := e.st.ScanRange(start, []byte{prefixTransfer + 1}, func(k, v []byte) error {
		t, err := decodeTransfer(k, v)
		if err != nil {
			return err
		}
		out = append(out, t)
		bytes += len(t.Record)
		if len(out) >= max || bytes >= maxBytes {
			return store.ErrStopScan
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	// Everything read was written before this barrier: durable once it is.
	p, err := e.write(&store.Batch{}, true)
	if err == nil {
		err = e.wait(p)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EndTransfers deletes ended transfers (their copies are in their
// targets), durably. Ending one already ended is a no-op.
func (e *Engine) EndTransfers(ids []TransferID) error {
	if len(ids) == 0 {
		return nil
	}
	e.transferMu.Lock()
	defer e.transferMu.Unlock()
	var b store.Batch
	n := int64(0)
	for _, id := range ids {
		if _, err := e.st.Get(transferKey(id)); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			return err
		}
		b.Delete(transferKey(id))
		n++
	}
	p, err := e.write(&b, true)
	if err == nil {
		err = e.wait(p)
	}
	if err != nil {
		return err
	}
	e.transfers.Add(-n)
	return nil
}

// ImportTransfers puts the copies of transfers into their target, queue
// target of this engine, each with its import record, in one durable
// write; the copies are receivable once it is on disk. A transfer whose id
// has an import record is skipped (imported before: a mover retrying).
// It fails without importing anything when the target does not exist
// (ErrQueueNotFound), is not of the copies' type or refuses a source
// (a *ConfigError), or has no room for them (ErrQueueFull): the mover
// keeps the transfers and tries again later.
func (e *Engine) ImportTransfers(target string, ts []Transfer) error {
	t, err := e.lookup(target)
	if err != nil {
		return err
	}
	e.importMu.Lock()
	defer e.importMu.Unlock()
	now := e.now()
	var b store.Batch
	if err := e.sweepImportsLocked(now, &b); err != nil {
		return err
	}
	var copies []pendingCopy
	release := func() { releaseCopies(copies) }
	seen := make(map[TransferID]bool, len(ts))
	var high uint64
	for i := range ts {
		x := &ts[i]
		if x.Target != target {
			release()
			return fmt.Errorf("engine: transfer %s is for queue %q, not %q", x.ID, x.Target, target)
		}
		if seen[x.ID] {
			continue
		}
		seen[x.ID] = true
		if _, err := e.st.Get(importKey(x.ID)); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			release()
			return err
		}
		m := &message{}
		g, err := decodeContent(m, x.Record)
		if err != nil {
			release()
			return fmt.Errorf("transfer %s: %w", x.ID, err)
		}
		if fifo := g != ""; fifo != t.isFIFO {
			release()
			return &ConfigError{Setting: "RedrivePolicy", Reason: "dead-letter queue " + target + " is not of the same type as source " + x.Source}
		}
		if !x.Redrive && !t.accepts(x.Source) {
			release()
			return &ConfigError{Setting: "RedrivePolicy", Reason: "the RedriveAllowPolicy of " + target + " does not allow source " + x.Source}
		}
		size := int64(len(m.body))
		// A redrive waits for room below the destination's length limit
		// (DLQ-97, as moveBatch does for a destination here); a dead
		// letter is refused by a full reject-publish queue only.
		if !t.room.reserve(t.snap.Load(), size, x.Redrive) {
			release()
			return fmt.Errorf("%w: dead-letter queue %s", ErrQueueFull, target)
		}
		recLen := importCopy(t, m, g, now, &b)
		high = max(high, m.seq)
		b.Set(importKey(x.ID), binary.AppendVarint(nil, now))
		var age time.Duration
		if m.sentAt != 0 {
			age = time.Duration(now - m.sentAt)
		}
		c := pendingCopy{target: t, m: m, group: g, purges: t.purges.Load(), size: size, recLen: recLen}
		if !x.Redrive {
			c.dead = &deadLetterEvent{source: x.Source, reason: x.Reason, age: age}
		}
		copies = append(copies, c)
	}
	if len(copies) == 0 {
		// Every one imported before: answer once those imports are
		// durable (with the sweep's deletes, if any).
		p, err := e.write(&b, true)
		if err == nil {
			err = e.wait(p)
		}
		return err
	}
	b.Set(movedSeqKey(t.id, importSeqSource), binary.BigEndian.AppendUint64(nil, high))
	p, err := e.write(&b, true)
	if err != nil {
		release()
		return err
	}
	return e.insertCopies(copies, p)
}

// importCopy writes m, a copy imported into t (group g; its room
// reserved), as t's next message, visible now, into b, and returns the
// length of the content record written. insertCopies inserts it once b is
// durable.
func importCopy(t *queue, m *message, g string, now int64, b *store.Batch) int {
	m.seq = t.nextSeq.Add(1) - 1
	m.visibleAt = now
	m.state = stateVisible
	if cfg := t.snap.Load(); cfg.HasMessageTTL {
		m.ttlAt = now + int64(cfg.MessageTTL)
	}
	m.group = &group{id: g}  // replaced by the target's group on insert
	t.cold.addPending(m.seq) // not refilled before insertCopies inserts it
	return t.writeCopy(m, b)
}

// releaseCopies gives back what copies decided and not written reserved
// in their targets (room, the cold index's pending mark).
func releaseCopies(copies []pendingCopy) {
	for _, c := range copies {
		c.target.room.release(c.size)
		c.target.cold.donePending(c.m.seq)
	}
}

// sweepImportsLocked deletes, into b, the import records older than
// importKeep, at most once every importSweepEvery (e.importMu held). The
// records are in the order of their transfer ids, whose first 8 bytes are
// the writer's clock when the transfer was written, never after its
// import: the scan stops at the first id younger than importKeep, after
// which every record is younger too.
func (e *Engine) sweepImportsLocked(now int64, b *store.Batch) error {
	if now-e.importSwept < int64(importSweepEvery) {
		return nil
	}
	e.importSwept = now
	cutoff := now - int64(importKeep)
	n := 0
	return e.st.ScanRange([]byte{prefixImport}, []byte{prefixImport + 1}, func(k, v []byte) error {
		if len(k) != 17 || int64(binary.BigEndian.Uint64(k[1:9])) > cutoff || n >= importSweepMax {
			return store.ErrStopScan
		}
		if at, m := binary.Varint(v); m > 0 && at <= cutoff {
			b.Delete(append([]byte(nil), k...))
			n++
		}
		return nil
	})
}
