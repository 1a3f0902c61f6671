package engine

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Name reservations (ADR 0015): in a cluster with shards, a queue name
// lives on one shard, and two creates of one name must not make it on two.
// A create placed by its name goes to the shard the name hashes to, whose
// engine serialises it with every other create there; one placed with the
// queue it is tied to (its dead-letter queue) goes elsewhere, and two such
// creates of one name tied to queues on two shards, or one of them and a
// create placed by the name, would each pass its own engine's check that
// no other shard holds the name (neither has applied yet). So the router
// first reserves the name on the shard it hashes to: ReserveName writes,
// durably and in that shard's log, the shard the name's create goes to,
// unless a create already went somewhere; the other creates of the name
// are then sent there, and the hash shard's own CreateQueue refuses a
// name reserved for another shard.
//
// A reservation matters only while its create is in flight: once the
// queue exists, the catalogue (Options.NameTaken) finds it. So it lives
// reserveKeep, and reservations older than that are swept by later
// reservations.

// prefixReserve keys a reservation: "V" name → format byte 1, uvarint
// shard, varint Unix ns of the reservation.
const prefixReserve = 'V'

// reserveKeep is how long a reservation binds the creates of its name:
// far more than a create's round trip, short enough that a create that
// failed on the reserved shard (refused attributes) holds up the name's
// placement for no longer than this (such creates are sent to that shard
// meanwhile, and succeed there); and, for a queue deleted on another
// shard (HoldDeletedName), a single node's NameReuseDelay.
const reserveKeep = NameReuseDelay

// reserveSweepEvery bounds how often a reservation sweeps the old ones.
const reserveSweepEvery = time.Minute

func reserveKey(name string) []byte { return append([]byte{prefixReserve}, name...) }

func encodeReservation(shard int, at int64) []byte {
	b := []byte{recordV1}
	b = binary.AppendUvarint(b, uint64(shard))
	return binary.AppendVarint(b, at)
}

func decodeReservation(v []byte) (shard int, at int64, err error) {
	if len(v) < 1 || v[0] != recordV1 {
		return 0, 0, errors.New("engine: reservation record: unknown format")
	}
	s, n := binary.Uvarint(v[1:])
	if n <= 0 || s > 1<<16 {
		return 0, 0, errors.New("engine: reservation record: bad shard")
	}
	t, m := binary.Varint(v[1+n:])
	if m <= 0 || 1+n+m != len(v) {
		return 0, 0, errors.New("engine: reservation record: bad time")
	}
	return int(s), t, nil
}

// ReserveName is the reservation of queue name for a create the router
// sends to shard (ADR 0015; this engine is the shard name hashes to). It
// answers where that create is to go instead, if anywhere: here (this
// engine holds the queue, or deleted it less than NameReuseDelay ago), or
// the shard of a reservation younger than
// reserveKeep (a create of the name is, or was a moment ago, in flight
// there). Else it reserves the name for shard, durably — unless shard is
// own, this engine's shard, whose CreateQueue needs no reservation — and
// answers shard.
func (e *Engine) ReserveName(name string, shard, own int) (to int, here bool, err error) {
	if !ValidQueueName(name) {
		return 0, false, &ConfigError{Setting: "QueueName", Reason: fmt.Sprintf("%q is not a queue name", name)}
	}
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if q, _ := e.lookup(name); q != nil {
		return own, true, nil
	}
	if err := e.Failed(); err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	now := e.now()
	e.mu.RLock()
	at, recently := e.deleted[name]
	e.mu.RUnlock()
	if recently && now-at < int64(NameReuseDelay) {
		// Deleted here a moment ago: the create comes here, and is
		// refused as a single node refuses it.
		return own, false, nil
	}
	if s, ok, err := e.reservedLocked(name, now); err != nil || ok {
		return s, false, err
	}
	if shard == own {
		return own, false, nil
	}
	var b store.Batch
	b.Set(reserveKey(name), encodeReservation(shard, now))
	if err := e.sweepReservationsLocked(now, &b); err != nil {
		return 0, false, err
	}
	if err := e.writeSynced(&b); err != nil {
		return 0, false, err
	}
	return shard, false, nil
}

// HoldDeletedName is, on the shard queue name hashes to (own), the note
// that the queue was deleted on shard a moment ago: for reserveKeep (the
// NameReuseDelay of a single node) the name's creates are sent to that
// shard, whose engine refuses them as deleted recently (ErrQueueDeletedRecently),
// wherever placement would have put them (another dead-letter queue, or
// none), and this engine's own CreateQueue refuses the name. It writes
// nothing when shard is own (this engine's own note of the delete does
// that) or when this engine holds a queue of that name (made again here
// already).
func (e *Engine) HoldDeletedName(name string, shard, own int) error {
	if !ValidQueueName(name) || shard == own {
		return nil
	}
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if q, _ := e.lookup(name); q != nil {
		return nil
	}
	if err := e.Failed(); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	var b store.Batch
	b.Set(reserveKey(name), encodeReservation(shard, e.now()))
	return e.writeSynced(&b)
}

// nameElsewhereLocked returns ErrQueueElsewhere, in a cluster with
// shards (Options.NameTaken), when name lives on another shard or a
// create of it is on its way to one (a young reservation); e.adminMu is
// held, by CreateQueue.
func (e *Engine) nameElsewhereLocked(name string, now int64) error {
	if e.taken == nil {
		return nil
	}
	if e.taken(name) {
		return ErrQueueElsewhere
	}
	if _, reserved, err := e.reservedLocked(name, now); err != nil || reserved {
		return cmp.Or(err, ErrQueueElsewhere)
	}
	return nil
}

// reservedLocked returns the shard name is reserved for, if a reservation
// younger than reserveKeep holds it (e.adminMu held). Only SQS queue names
// are ever reserved: an AMQP-only name (a server-named reply queue) costs
// no read. The read is settled (no wait for this node's last proposal
// under adminMu): every reservation was written by a leader that waited
// for its sync (ReserveName, HoldDeletedName), and a previous leader's
// applied before this one served.
func (e *Engine) reservedLocked(name string, now int64) (int, bool, error) {
	if !ValidQueueName(name) {
		return 0, false, nil
	}
	v, err := getSettled(e.st, reserveKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s, at, err := decodeReservation(v)
	if err != nil {
		return 0, false, err
	}
	return s, now-at < int64(reserveKeep), nil
}

// sweepReservationsLocked deletes, into b, the reservations older than
// reserveKeep, at most once every reserveSweepEvery (e.adminMu held).
func (e *Engine) sweepReservationsLocked(now int64, b *store.Batch) error {
	return e.sweepAgedLocked(prefixReserve, &e.reserveSwept, reserveSweepEvery, reserveKeep, now, b, func(v []byte) (int64, error) {
		_, at, err := decodeReservation(v)
		return at, err
	})
}

// sweepAgedLocked deletes, into b, the records under prefix whose time
// (read by at) is keep or more before now, and those at cannot read, at
// most once every `every` (*swept: when it last did; e.adminMu held).
// Name reservations and deleted names' records are swept so.
func (e *Engine) sweepAgedLocked(prefix byte, swept *int64, every, keep time.Duration, now int64, b *store.Batch, at func([]byte) (int64, error)) error {
	if now-*swept < int64(every) {
		return nil
	}
	*swept = now
	return e.st.ScanRange([]byte{prefix}, []byte{prefix + 1}, func(k, v []byte) error {
		if t, err := at(v); err != nil || now-t >= int64(keep) {
			b.Delete(append([]byte(nil), k...))
		}
		return nil
	})
}
