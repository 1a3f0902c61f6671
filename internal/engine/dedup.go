package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/store"
)

// FIFO deduplication (issue #13): the store is the index, memory holds
// only the young entries.
//
// Every FIFO send that stores a message writes, in its own batch, a dedup
// record ("D" qid id 0x00 group, see dedupKey) holding the message id,
// sequence number and expiry, and an expiry index record ("E" qid
// expiresAt seq, see dedupExpiryKey) whose value is the D key's suffix.
// A send looks its dedup id up in the queue's young set first, then in
// the store: with queue scope one bounded ScanRange over "D" qid id 0x00
// finds the id in every group; with message-group scope one Get of the
// exact key. A record past its expiry is treated as absent.
//
// The young set holds the entries whose batch may not yet be readable
// through the store (a replicated store makes a write readable when its
// Raft entry is applied, which is when its Pending's Wait returns). Each
// entry gets an ordinal in write order; a send whose Wait returned raises
// the queue's settled ordinal, and since the store applies batches in
// order, every entry at or below it is readable, so advanceLocked drops
// them from memory. Memory therefore holds about one group commit's worth
// of entries, not the 5-minute window.
//
// Expiry reads the E index in time order (sweepDedupLocked), a bounded
// number of records at a time, and deletes both records. Restart reads no
// dedup record: only the first E record of each FIFO queue, for the time
// of its next sweep (and, once, the upgrade of an older layout,
// upgradeDedup in dedup_upgrade.go). Reads of the replicated store skip
// its read-your-writes wait (dedupGetLocked).

// dedupSweepMax bounds the E records one sweep deletes, so that a sweep
// never holds the queue's lock for long; the queue is woken again at once
// when more are due.
const dedupSweepMax = 512

// dedupYoungLinger is how long after a young entry was written the
// scheduler looks again at the young set of a queue that is otherwise
// idle, to drop the entries whose writes have settled.
const dedupYoungLinger = 1e9 // 1 s in ns

// recordDedupV2 is the format byte of a dedup value in the current layout
// (key "D" qid id 0x00 group, with an E record). Format 1 values sit at
// the older key "D" qid group 0x00 id, without an E record: Open rewrites
// them (upgradeDedup), and a build that only knows format 1 refuses to
// start on a format 2 record instead of misreading the key.
const recordDedupV2 = 2

// escapeDedupID makes a dedup id free of 0x00 so that 0x00 can end it in
// a key: 0x01 becomes 0x01 0x02 and 0x00 becomes 0x01 0x01. Ids from SQS
// never hold either byte (they are printable ASCII) and are returned as is.
func escapeDedupID(dst []byte, id string) []byte {
	if !containsLow(id) {
		return append(dst, id...)
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; c {
		case 0, 1:
			dst = append(dst, 1, c+1)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func containsLow(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 1 {
			return true
		}
	}
	return false
}

// dedupSuffix is the part of a D key after the queue id: the escaped id,
// 0x00, the group.
func dedupSuffix(dst []byte, id, group string) []byte {
	dst = escapeDedupID(dst, id)
	dst = append(dst, 0)
	return append(dst, group...)
}

// dedupKey is the key of the dedup record of (id, group) in queue qid.
func dedupKey(qid uint32, id, group string) []byte {
	return dedupSuffix(qidPrefix(prefixDedup, qid), id, group)
}

// dedupIDPrefix is the start of every D key of id in queue qid, any group;
// the range ends at the same bytes with a last byte of 0x01.
func dedupIDPrefix(qid uint32, id string) (lo, hi []byte) {
	lo = append(escapeDedupID(qidPrefix(prefixDedup, qid), id), 0)
	hi = bytes.Clone(lo)
	hi[len(hi)-1] = 1
	return lo, hi
}

// dedupExpiryKey is the E index record of an entry: it sorts by expiry
// time, and seq (unique in the queue) keeps entries of one instant apart.
func dedupExpiryKey(qid uint32, expiresAt int64, seq uint64) []byte {
	k := qidPrefix(prefixDedupExpiry, qid)
	k = binary.BigEndian.AppendUint64(k, uint64(max(expiresAt, 0)))
	return binary.BigEndian.AppendUint64(k, seq)
}

func encodeDedup(ent *dedupEntry) []byte {
	e := encoder{b: make([]byte, 0, 32)}
	e.b = append(e.b, recordDedupV2)
	e.b = append(e.b, ent.msgID[:]...)
	e.uvarint(ent.seq)
	e.varint(ent.expiresAt)
	return e.b
}

// decodeDedup reads a dedup value of format 1 or 2 (the same fields; the
// formats differ in their keys).
func decodeDedup(ent *dedupEntry, b []byte) error {
	if len(b) < 17 || (b[0] != recordV1 && b[0] != recordDedupV2) {
		return fmt.Errorf("%w: unknown dedup record format", errCorrupt)
	}
	copy(ent.msgID[:], b[1:17])
	d := decoder{b: b[17:]}
	ent.seq = d.uvarint()
	ent.expiresAt = d.varint()
	return d.err
}

// dedupHit is what a lookup found.
type dedupHit struct {
	live  *dedupEntry // a live entry: the send is a duplicate
	stale *dedupEntry // an expired record at exactly (id, group), not yet swept
}

// findDedupLocked looks id up for a send to group: a live entry (with
// queue scope of any group, with messageGroup scope of the same group),
// else any expired record at the same key, whose E record a new entry
// must delete. Entries are kept with their group whatever the scope at
// the time, so changing the scope later never lets a duplicate in.
func (q *queue) findDedupLocked(id, group string, now int64) (dedupHit, error) {
	var hit dedupHit
	anyGroup := q.cfg.DedupScope == DedupScopeQueue
	for ent := q.dedup[id]; ent != nil; ent = ent.next {
		if ent.expiresAt <= now {
			// Young for a whole window only if its write never
			// settled; its records may be on disk all the same.
			if ent.group == group && hit.stale == nil {
				hit.stale = ent
			}
			continue
		}
		if anyGroup || ent.group == group {
			hit.live = ent
			return hit, nil
		}
	}
	consider := func(g string, v []byte) error {
		ent := &dedupEntry{id: id, group: g}
		if err := decodeDedup(ent, v); err != nil {
			return fmt.Errorf("queue %q: dedup record: %w", q.name, err)
		}
		switch {
		case ent.expiresAt > now && (anyGroup || g == group):
			hit.live = ent
			return store.ErrStopScan
		case ent.expiresAt <= now && g == group:
			hit.stale = ent
		}
		return nil
	}
	if !anyGroup {
		v, err := q.dedupGetLocked(dedupKey(q.id, id, group))
		if errors.Is(err, store.ErrNotFound) {
			return hit, nil
		}
		if err != nil {
			return hit, err
		}
		err = consider(group, v)
		if errors.Is(err, store.ErrStopScan) {
			err = nil
		}
		return hit, err
	}
	lo, hi := dedupIDPrefix(q.id, id)
	err := q.dedupScanLocked(lo, hi, func(k, v []byte) error {
		return consider(string(k[len(lo):]), v)
	})
	return hit, err
}

// dedupGetLocked and dedupScanLocked read dedup records. A store whose
// reads wait for this engine's own writes (store.SettledReader: the
// replicated store) is read without that wait: the entries not yet
// settled are in the young set, and an expired record is absent whether
// or not its delete has applied. Only a purge's range delete must be seen
// (its records are live); until the purge's write has settled, reads
// wait.
func (q *queue) dedupGetLocked(key []byte) ([]byte, error) {
	if sr, ok := q.eng.st.(store.SettledReader); ok && q.dedupSettledOrd.Load() >= q.dedupBarrier {
		return sr.GetSettled(key)
	}
	return q.eng.st.Get(key)
}

func (q *queue) dedupScanLocked(lo, hi []byte, fn func(k, v []byte) error) error {
	if sr, ok := q.eng.st.(store.SettledReader); ok && q.dedupSettledOrd.Load() >= q.dedupBarrier {
		return sr.ScanRangeSettled(lo, hi, fn)
	}
	return q.eng.st.ScanRange(lo, hi, fn)
}

// dedupPurgedLocked takes the ordinal of a purge's batch: lookups read the
// store with its read-your-writes until the purge settles (pass the
// ordinal to dedupSettled once its Wait has returned).
func (q *queue) dedupPurgedLocked() uint64 {
	q.dedupOrd++
	q.dedupBarrier = q.dedupOrd
	return q.dedupOrd
}

// addDedupLocked records a new entry: in the young set (memory) and in b
// (its D and E records). stale, if set, is an expired record the D record
// replaces: its E record goes too, so that every D record has exactly one
// E record and the sweep never deletes a newer D record.
func (q *queue) addDedupLocked(ent *dedupEntry, stale *dedupEntry, b *store.Batch) {
	if stale != nil {
		b.Delete(dedupExpiryKey(q.id, stale.expiresAt, stale.seq))
	}
	b.Set(dedupKey(q.id, ent.id, ent.group), encodeDedup(ent))
	ek := dedupExpiryKey(q.id, ent.expiresAt, ent.seq)
	b.Set(ek, dedupSuffix(nil, ent.id, ent.group))
	if q.dedupSweptTo != nil && bytes.Compare(ek, q.dedupSweptTo) < 0 {
		// The clock went back past the last sweep: start over.
		q.dedupSweptTo = nil
	}
	q.dedupOrd++
	ent.ord = q.dedupOrd
	q.accountLocked(dedupHeld(ent))
	ent.next = q.dedup[ent.id]
	q.dedup[ent.id] = ent
	q.dedupYoung = append(q.dedupYoung, ent)
	if q.dedupExpireAt == 0 || ent.expiresAt < q.dedupExpireAt {
		q.dedupExpireAt = ent.expiresAt
	}
}

// dedupWrittenLocked is the ordinal of the latest entry written; pass it
// to dedupSettled once the batch that wrote it has been waited for.
func (q *queue) dedupWrittenLocked() uint64 { return q.dedupOrd }

// dedupSettled notes that every entry up to ordinal ord is readable
// through the store (the Wait of the batch that wrote it returned nil).
// It needs no lock.
func (q *queue) dedupSettled(ord uint64) {
	for {
		cur := q.dedupSettledOrd.Load()
		if ord <= cur || q.dedupSettledOrd.CompareAndSwap(cur, ord) {
			return
		}
	}
}

// trimYoungLocked drops the young entries whose writes have settled.
func (q *queue) trimYoungLocked(now int64) {
	if len(q.dedupYoung) == 0 {
		return
	}
	settled := q.dedupSettledOrd.Load()
	n := 0
	for n < len(q.dedupYoung) && q.dedupYoung[n].ord <= settled {
		q.forgetYoungLocked(q.dedupYoung[n])
		q.dedupYoung[n] = nil
		n++
	}
	q.dedupYoung = q.dedupYoung[n:]
	if len(q.dedupYoung) == 0 {
		q.dedupYoung = nil
		q.dedupTrimAt = 0
	} else {
		q.dedupTrimAt = now + dedupYoungLinger
	}
}

func (q *queue) forgetYoungLocked(ent *dedupEntry) {
	q.accountLocked(-dedupHeld(ent))
	head := q.dedup[ent.id]
	if head == ent {
		if ent.next == nil {
			delete(q.dedup, ent.id)
		} else {
			q.dedup[ent.id] = ent.next
		}
		return
	}
	for p := head; p != nil; p = p.next {
		if p.next == ent {
			p.next = ent.next
			return
		}
	}
}

// dedupWakeLocked is when the scheduler should next look at q's dedup
// state (0: never): the next expiry, or the young set's next trim.
func (q *queue) dedupWakeLocked() int64 {
	t := q.dedupExpireAt
	if len(q.dedupYoung) > 0 {
		y := max(q.dedupYoung[0].expiresAt-int64(DedupWindow)+dedupYoungLinger, q.dedupTrimAt)
		if t == 0 || y < t {
			t = y
		}
	}
	return t
}

// sweepDedupLocked deletes up to dedupSweepMax entries whose window has
// ended (their E and D records) and sets when the next one ends. A store
// read error fails the engine (the records stay; they are absent to
// lookups anyway, being expired).
func (q *queue) sweepDedupLocked(now int64, b *store.Batch) {
	if q.dedupExpireAt == 0 || q.dedupExpireAt > now {
		return
	}
	n := 0
	next := int64(0)
	lo := q.dedupSweptTo
	if lo == nil {
		lo = qidPrefix(prefixDedupExpiry, q.id)
	}
	err := q.dedupScanLocked(lo, qidPrefix(prefixDedupExpiry, q.id+1), func(k, v []byte) error {
		if len(k) != 21 {
			return fmt.Errorf("%w: dedup expiry key %x", errCorrupt, k)
		}
		at := int64(binary.BigEndian.Uint64(k[5:]))
		if at > now || n == dedupSweepMax {
			next = at
			return store.ErrStopScan
		}
		b.Delete(bytes.Clone(k))
		if !q.replacedLocked(v, binary.BigEndian.Uint64(k[13:])) {
			b.Delete(append(qidPrefix(prefixDedup, q.id), v...))
		}
		// E keys only ever come after the ones swept (a new entry
		// expires a window from now), so the next sweep starts here
		// and never reads these again, even before their deletes
		// are readable.
		q.dedupSweptTo = append(bytes.Clone(k), 0)
		n++
		return nil
	})
	if err != nil {
		_ = q.eng.fail(fmt.Errorf("reading the deduplication expiry index of queue %q: %w", q.name, err))
		q.dedupExpireAt = 0
		return
	}
	// Young entries may not be readable yet.
	if len(q.dedupYoung) > 0 {
		if y := q.dedupYoung[0].expiresAt; y > now && (next == 0 || y < next) {
			next = y
		}
	}
	q.dedupExpireAt = next
}

// replacedLocked reports whether the D record at suffix has been replaced
// by a young entry other than the one of sequence number seq: a send that
// found the record expired wrote a new one at the same key and deleted the
// old E record, but with settled reads the sweep may not see that delete
// yet, and must not delete the new D record.
func (q *queue) replacedLocked(suffix []byte, seq uint64) bool {
	if len(q.dedupYoung) == 0 {
		return false
	}
	id, group, ok := splitDedupSuffix(suffix)
	if !ok {
		return false
	}
	for ent := q.dedup[id]; ent != nil; ent = ent.next {
		if ent.group == group && ent.seq != seq {
			return true
		}
	}
	return false
}

// splitDedupSuffix undoes dedupSuffix.
func splitDedupSuffix(s []byte) (id, group string, ok bool) {
	var out []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return string(out), string(s[i+1:]), true
		case c == 1:
			if i+1 == len(s) || s[i+1] < 1 || s[i+1] > 2 {
				return "", "", false
			}
			out = append(out, s[i+1]-1)
			i++
		default:
			out = append(out, c)
		}
	}
	return "", "", false
}

// loadDedupExpiryLocked reads the first E record of q (one bounded read
// at Open), for the time of its first sweep.
func (q *queue) loadDedupExpiryLocked() error {
	q.dedupExpireAt = 0
	return q.eng.st.ScanRange(qidPrefix(prefixDedupExpiry, q.id), qidPrefix(prefixDedupExpiry, q.id+1), func(k, _ []byte) error {
		if len(k) != 21 {
			return fmt.Errorf("%w: dedup expiry key %x", errCorrupt, k)
		}
		q.dedupExpireAt = max(int64(binary.BigEndian.Uint64(k[5:])), 1)
		return store.ErrStopScan
	})
}

// clearDedupLocked forgets q's young set (purge, delete); the caller
// deletes the D and E ranges.
func (q *queue) clearDedupLocked() {
	q.dedup = make(map[string]*dedupEntry)
	q.dedupYoung = nil
	q.dedupExpireAt = 0
	q.dedupSweptTo = nil
	q.dedupTrimAt = 0
}
