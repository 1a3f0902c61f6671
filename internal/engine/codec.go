package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"
)

// Key layout in the store (all integers big-endian so keys sort numerically):
//
//	"Q" name                   queue record (settings, tags, id, timestamps)
//	"I"                        next queue id (uint32)
//	"M" qid:4 seq:8 0x00       message record: immutable content
//	"M" qid:4 seq:8 0x01       message state: receive count, lease, visibility
//	"D" qid:4 dedup-id 0x00 group  FIFO deduplication entry (survives delete; dedup.go)
//	"E" qid:4 expiresAt:8 seq:8    its expiry index record (value: the D key after qid)
//	"W" qid:4 seq:8            end of a send's delay (so a restart can count it)
//	"N" qid:4                  highest sequence number its own sends assigned
//	"N" qid:4 src:4            highest sequence number of copies moved in from src
//	"K"                        receipt key: 32 random bytes (see receiptKey)
//	"R" qid:4                  session mark: every message with a lower sequence
//	                           number may have gone to a connection (sessionMarkKey)
//	"P" qid:4 255-band:1 seq:8 priority record of a priority queue's message of
//	                           priority above 0 (prioKey, priority.go)
//
// A queue's data all share the prefix qid, so dropping a queue is one
// DeleteRange per prefix. Queue ids are never reused, so a late write for a
// deleted queue can never surface in a new queue of the same name; recovery
// deletes such leftovers (see recoveryAudit).
//
// Records start with a format byte (recordV1). Fields are appended with
// uvarint lengths; a reader rejects a record whose format it does not know,
// which is how a downgrade across an incompatible format fails loudly.
const (
	prefixQueue   = 'Q'
	prefixNextID  = 'I'
	prefixMessage = 'M'
	prefixDedup   = 'D'
	// prefixDedupExpiry is the time-ordered index of the D records.
	prefixDedupExpiry = 'E'
	prefixDelay       = 'W'
	prefixSeq         = 'N'
	prefixKey         = 'K'
	prefixSessionMark = 'R'
	prefixPriority    = 'P'

	kindContent = 0x00
	kindState   = 0x01

	recordV1 = 1
)

var errCorrupt = errors.New("engine: corrupt record")

func queueKey(name string) []byte { return append([]byte{prefixQueue}, name...) }

func qidPrefix(p byte, qid uint32) []byte {
	k := make([]byte, 5, 18)
	k[0] = p
	binary.BigEndian.PutUint32(k[1:], qid)
	return k
}

// movedSeqKey is the highest-sequence record of queue qid for the copies
// that queue src moves into it (dead-letter moves and redrives). They are
// reserved and written under src's lock, not qid's, so they cannot share
// qid's own record (written under qid's lock by sends and imports): two
// writers of one key under different locks could store an older value
// last, and the highest sequence number would go backwards. One key per
// writer lock keeps every key monotonic; recovery takes the largest.
func movedSeqKey(qid, src uint32) []byte {
	return binary.BigEndian.AppendUint32(qidPrefix(prefixSeq, qid), src)
}

func messageKey(qid uint32, seq uint64, kind byte) []byte {
	k := qidPrefix(prefixMessage, qid)
	k = binary.BigEndian.AppendUint64(k, seq)
	return append(k, kind)
}

// sessionMarkKey is queue qid's session mark: a big-endian uint64 above the
// sequence number of every message delivered to a connection
// (ReceiveRequest.Session) without a state record (see coverSessionLocked).
func sessionMarkKey(qid uint32) []byte { return qidPrefix(prefixSessionMark, qid) }

// delayKey is the delay record of message seq of queue qid: written with a
// message sent with a delay (DelaySeconds), holding when the delay ends
// (a varint of UnixNano), and single-deleted with the message (dropLocked).
// It lets a restart count the cold messages that are still delayed from a
// few small records instead of reading every cold message's content
// (countColdLocked).
func delayKey(qid uint32, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(qidPrefix(prefixDelay, qid), seq)
}

// encoder appends fields to a record.
type encoder struct{ b []byte }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// decoder reads fields; the first error sticks and later reads return zero
// values, so callers check err once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) boolean() bool {
	if len(d.b) < 1 {
		d.fail()
		return false
	}
	v := d.b[0] != 0
	d.b = d.b[1:]
	return v
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// queueRecord is the persisted form of a queue.
type queueRecord struct {
	ID         uint32
	Name       string
	Config     QueueConfig
	Tags       map[string]string
	CreatedAt  int64
	ModifiedAt int64
}

func encodeQueue(r *queueRecord) []byte {
	e := encoder{b: []byte{recordV1}}
	c := &r.Config
	e.uvarint(uint64(r.ID))
	e.str(r.Name)
	e.varint(r.CreatedAt)
	e.varint(r.ModifiedAt)
	e.boolean(c.FIFO)
	e.boolean(c.ContentBasedDedup)
	e.uvarint(uint64(c.DedupScope))
	e.str(c.FifoThroughputLimit)
	e.varint(int64(c.Delay))
	e.uvarint(uint64(c.MaxMessageSize))
	e.varint(int64(c.Retention))
	e.varint(int64(c.ReceiveWait))
	e.varint(int64(c.Visibility))
	e.boolean(c.DeadLetter != nil)
	if c.DeadLetter != nil {
		e.str(c.DeadLetter.Target)
		e.uvarint(uint64(c.DeadLetter.MaxReceiveCount))
	}
	e.boolean(c.RedriveAllow != nil)
	if c.RedriveAllow != nil {
		e.str(c.RedriveAllow.Permission)
		e.uvarint(uint64(len(c.RedriveAllow.SourceQueues)))
		for _, s := range c.RedriveAllow.SourceQueues {
			e.str(s)
		}
	}
	encodeMap(&e, c.Extra)
	encodeMap(&e, r.Tags)
	// Optional trailing fields (absent in older records).
	e.boolean(c.Retry != nil)
	if c.Retry != nil {
		e.str(c.Retry.Strategy)
		e.varint(int64(c.Retry.Base))
		e.varint(int64(c.Retry.Cap))
	}
	e.uvarint(uint64(c.MaxLength))
	e.varint(c.MaxLengthBytes)
	e.str(c.Overflow)
	e.boolean(c.HasMessageTTL)
	e.varint(int64(c.MessageTTL))
	e.boolean(c.DeadLetter != nil && c.DeadLetter.Routed)
	// Sluice's dead-letter practice settings (absent in older records).
	e.str(c.Requeue)
	e.uvarint(uint64(c.CrashLimit))
	e.varint(int64(c.CrashWindow))
	e.boolean(c.Paused)
	e.uvarint(uint64(c.RetryBudgetPercent))
	e.str(c.UnknownFailure)
	e.uvarint(uint64(c.MaxPriority))
	e.boolean(c.DeadLetter != nil && c.DeadLetter.RoutedElsewhere)
	return e.b
}

func encodeMap(e *encoder, m map[string]string) {
	e.uvarint(uint64(len(m)))
	for _, k := range sortedKeys(m) {
		e.str(k)
		e.str(m[k])
	}
}

func decodeMap(d *decoder) map[string]string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.str()
		m[k] = d.str()
	}
	return m
}

func decodeQueue(b []byte) (*queueRecord, error) {
	if len(b) == 0 || b[0] != recordV1 {
		return nil, fmt.Errorf("%w: unknown queue record format", errCorrupt)
	}
	d := decoder{b: b[1:]}
	r := &queueRecord{}
	c := &r.Config
	r.ID = uint32(d.uvarint())
	r.Name = d.str()
	r.CreatedAt = d.varint()
	r.ModifiedAt = d.varint()
	c.FIFO = d.boolean()
	c.ContentBasedDedup = d.boolean()
	c.DedupScope = DedupScope(d.uvarint())
	c.FifoThroughputLimit = d.str()
	c.Delay = time.Duration(d.varint())
	c.MaxMessageSize = int(d.uvarint())
	c.Retention = time.Duration(d.varint())
	c.ReceiveWait = time.Duration(d.varint())
	c.Visibility = time.Duration(d.varint())
	if d.boolean() {
		c.DeadLetter = &DeadLetterPolicy{Target: d.str(), MaxReceiveCount: int(d.uvarint())}
	}
	if d.boolean() {
		ra := &RedriveAllowPolicy{Permission: d.str()}
		n := d.uvarint()
		for i := uint64(0); i < n && d.err == nil; i++ {
			ra.SourceQueues = append(ra.SourceQueues, d.str())
		}
		c.RedriveAllow = ra
	}
	c.Extra = decodeMap(&d)
	r.Tags = decodeMap(&d)
	if len(d.b) > 0 && d.boolean() {
		c.Retry = &RetryPolicy{Strategy: d.str(), Base: time.Duration(d.varint()), Cap: time.Duration(d.varint())}
	}
	if len(d.b) > 0 {
		c.MaxLength = int(d.uvarint())
		c.MaxLengthBytes = d.varint()
		c.Overflow = d.str()
		c.HasMessageTTL = d.boolean()
		c.MessageTTL = time.Duration(d.varint())
		if routed := d.boolean(); routed && c.DeadLetter != nil {
			c.DeadLetter.Routed = true
		}
	}
	if len(d.b) > 0 {
		c.Requeue = d.str()
		c.CrashLimit = int(d.uvarint())
		c.CrashWindow = time.Duration(d.varint())
	}
	if len(d.b) > 0 {
		c.Paused = d.boolean()
	}
	if len(d.b) > 0 {
		c.RetryBudgetPercent = int(d.uvarint())
	}
	if len(d.b) > 0 {
		c.UnknownFailure = d.str()
	}
	if len(d.b) > 0 {
		c.MaxPriority = int(d.uvarint())
	}
	if len(d.b) > 0 {
		if elsewhere := d.boolean(); elsewhere && c.DeadLetter != nil {
			c.DeadLetter.RoutedElsewhere = true
		}
	}
	return r, d.err
}

// Extension tags: optional fields after a message record's fixed fields.
// A reader skips tags it does not know, so adding one is compatible.
const (
	tagDeadLetter = 1
	tagFailure    = 2
	tagRedrive    = 3
	tagParked     = 4
	tagEnvelope   = 5
	tagTTL        = 6
	tagCrashes    = 7
	tagBodyMD5    = 8
	tagSession    = 9  // state record: the lease is a connection's (message.session)
	tagPriority   = 10 // content record: Message.Priority when above 0 (one byte)
)

func encodeExt(e *encoder, x *messageExt, withDead, withRedrive bool) {
	if x == nil {
		return
	}
	if withDead && len(x.envelope) > 0 {
		e.uvarint(tagEnvelope)
		e.bytes(x.envelope)
	}
	if withDead && x.dead != nil {
		var f encoder
		d := x.dead
		f.str(d.SourceQueue)
		f.str(d.Reason)
		f.uvarint(uint64(d.Attempts))
		f.varint(nanos(d.FirstReceiveAt))
		f.varint(nanos(d.LastReceiveAt))
		f.varint(nanos(d.DeadLetteredAt))
		e.uvarint(tagDeadLetter)
		e.bytes(f.b)
	}
	if x.failure != nil {
		var f encoder
		r := x.failure
		f.str(r.ErrorClass)
		f.str(r.Message)
		f.str(r.Trace)
		f.str(r.ConsumerID)
		f.str(r.ConsumerVersion)
		f.varint(nanos(r.ReportedAt))
		f.uvarint(uint64(r.Attempt))
		e.uvarint(tagFailure)
		e.bytes(f.b)
	}
	if len(x.crashes) > 0 {
		var f encoder
		f.uvarint(uint64(len(x.crashes)))
		for _, t := range x.crashes {
			f.varint(t)
		}
		e.uvarint(tagCrashes)
		e.bytes(f.b)
	}
	if withRedrive && x.redrive != nil {
		var f encoder
		r := x.redrive
		f.str(r.OriginalMessageID)
		f.uvarint(uint64(r.Count))
		f.str(r.TaskID)
		f.varint(nanos(r.At))
		e.uvarint(tagRedrive)
		e.bytes(f.b)
	}
}

// decodeExt reads extension fields until the record ends.
func decodeExt(d *decoder, m *message) {
	for len(d.b) > 0 && d.err == nil {
		tag := d.uvarint()
		f := decoder{b: d.bytes()}
		switch tag {
		case tagDeadLetter:
			m.extension().dead = &DeadLetterInfo{
				SourceQueue:    f.str(),
				Reason:         f.str(),
				Attempts:       int(f.uvarint()),
				FirstReceiveAt: fromNanos(f.varint()),
				LastReceiveAt:  fromNanos(f.varint()),
				DeadLetteredAt: fromNanos(f.varint()),
			}
		case tagFailure:
			m.extension().failure = &FailureRecord{
				ErrorClass:      f.str(),
				Message:         f.str(),
				Trace:           f.str(),
				ConsumerID:      f.str(),
				ConsumerVersion: f.str(),
				ReportedAt:      fromNanos(f.varint()),
				Attempt:         int(f.uvarint()),
			}
		case tagRedrive:
			m.extension().redrive = &RedriveInfo{
				OriginalMessageID: f.str(),
				Count:             int(f.uvarint()),
				TaskID:            f.str(),
				At:                fromNanos(f.varint()),
			}
		case tagParked:
			m.parked = true
		case tagSession:
			m.session = true
		case tagEnvelope:
			m.extension().envelope = append([]byte(nil), f.b...)
		case tagTTL:
			m.ttlAt = f.varint()
		case tagBodyMD5:
			if len(f.b) != len(m.bodyMD5) {
				f.fail()
				break
			}
			copy(m.bodyMD5[:], f.b)
			m.hasMD5 = true
		case tagPriority:
			if len(f.b) != 1 {
				f.fail()
				break
			}
			m.prio = f.b[0]
		case tagCrashes:
			n := f.uvarint()
			if n > uint64(len(f.b)) {
				f.fail()
				break
			}
			x := m.extension()
			x.crashes = make([]int64, 0, n)
			for i := uint64(0); i < n && f.err == nil; i++ {
				x.crashes = append(x.crashes, f.varint())
			}
		default:
			continue // a newer field: skip it
		}
		if f.err != nil {
			d.err = f.err
		}
	}
}

// encodeContent is the immutable part of a message: written once on send
// (or on a dead-letter move) and deleted with the message.
func encodeContent(m *message) []byte {
	rec, _ := encodeContentBodyAt(m)
	return rec
}

// encodeContentBodyAt is encodeContent that also returns where in the
// record the body's bytes start.
func encodeContentBodyAt(m *message) (rec []byte, bodyAt int) {
	e := encoder{b: make([]byte, 0, contentSizeHint(m))}
	e.b = append(e.b, recordV1)
	e.b = append(e.b, m.id[:]...)
	e.varint(m.sentAt)
	e.varint(m.enqueuedAt)
	e.varint(m.visibleAt)
	e.str(m.groupID())
	e.str(m.dedupID)
	e.str(m.sender)
	e.str(m.traceHeader())
	e.str(m.deadLetterSource())
	e.uvarint(uint64(m.recvCount))
	e.varint(m.firstRecvAt)
	e.uvarint(uint64(len(m.attrs)))
	for _, a := range m.attrs {
		e.str(a.Name)
		e.str(a.DataType)
		e.str(a.StringValue)
		e.bytes(a.BinaryValue)
	}
	e.bytes(m.body)
	bodyAt = len(e.b) - len(m.body)
	encodeExt(&e, m.ext, true, true)
	if m.hasMD5 {
		e.uvarint(tagBodyMD5)
		e.bytes(m.bodyMD5[:])
	}
	if m.ttlAt != 0 {
		var f encoder
		f.varint(m.ttlAt)
		e.uvarint(tagTTL)
		e.bytes(f.b)
	}
	if m.prio != 0 {
		e.uvarint(tagPriority)
		e.bytes([]byte{m.prio})
	}
	return e.b, bodyAt
}

// contentSizeHint bounds the encoded size of m's content record closely
// enough that encodeContent never regrows its buffer (a regrow copies the
// body and doubles the allocation).
func contentSizeHint(m *message) int {
	// Fixed part: format byte, id, six varints (≤10 bytes each), nine
	// length prefixes, the body MD5 with its tag and length, and the
	// priority with its tag and length.
	n := 1 + 16 + 6*10 + 9*binary.MaxVarintLen64 + 2 + 16 + 3
	n += len(m.body) + len(m.groupID()) + len(m.dedupID) + len(m.sender) + len(m.traceHeader()) + len(m.deadLetterSource())
	for _, a := range m.attrs {
		n += 4*binary.MaxVarintLen64 + len(a.Name) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	if x := m.ext; x != nil {
		n += len(x.envelope) + 256 // dead-letter, redrive info: small fixed fields and names
		if f := x.failure; f != nil {
			n += len(f.ErrorClass) + len(f.Message) + len(f.Trace) + len(f.ConsumerID) + len(f.ConsumerVersion) + 64
		}
	}
	return n
}

// decodeContent fills m from a content record. Byte slices are copied, since
// store values are valid only during a scan.
func decodeContent(m *message, b []byte) (group string, err error) {
	return decodeContentBody(m, b, true)
}

// decodeContentBody is decodeContent that, without keepBody, skips copying
// the body (recording only its length): recovery beyond the body budget
// leaves bodies on disk.
func decodeContentBody(m *message, b []byte, keepBody bool) (group string, err error) {
	if len(b) < 17 || b[0] != recordV1 {
		return "", fmt.Errorf("%w: unknown message record format", errCorrupt)
	}
	copy(m.id[:], b[1:17])
	d := decoder{b: b[17:]}
	m.sentAt = d.varint()
	m.enqueuedAt = d.varint()
	m.visibleAt = d.varint()
	group = d.str()
	m.dedupID = d.str()
	m.sender = d.str()
	if t := d.str(); t != "" {
		m.extension().trace = t
	}
	if s := d.str(); s != "" {
		m.extension().dlqSource = s
	}
	m.recvCount = int32(d.uvarint())
	m.firstRecvAt = d.varint()
	// A message sent with a delay has a delay record (delayKey) unless
	// it was a moved copy; deleting one that was never written is
	// harmless, so the content alone decides.
	m.delayRec = m.visibleAt > m.enqueuedAt && m.recvCount == 0
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
	}
	if n > 0 && d.err == nil {
		m.attrs = make([]Attribute, n)
		for i := range m.attrs {
			a := &m.attrs[i]
			a.Name = d.str()
			a.DataType = d.str()
			a.StringValue = d.str()
			if bv := d.bytes(); len(bv) > 0 {
				a.BinaryValue = append([]byte(nil), bv...)
			}
		}
	}
	if body := d.bytes(); keepBody {
		m.body = append([]byte(nil), body...)
	} else {
		m.bodyLen = int32(len(body))
	}
	decodeExt(&d, m)
	return group, d.err
}

// encodeState is the mutable part of a message, rewritten on every receive
// and visibility change. It is small so receives do not rewrite bodies.
func encodeState(m *message) []byte {
	e := encoder{b: make([]byte, 0, 40)}
	e.b = append(e.b, recordV1)
	e.uvarint(uint64(m.recvCount))
	e.varint(m.firstRecvAt)
	e.varint(m.visibleAt)
	e.varint(m.leaseAt)
	e.uvarint(m.receipt)
	encodeExt(&e, m.ext, false, false)
	if m.parked {
		e.uvarint(tagParked)
		e.bytes(nil)
	}
	if m.session {
		e.uvarint(tagSession)
		e.bytes(nil)
	}
	return e.b
}

func decodeState(m *message, b []byte) error {
	if len(b) < 1 || b[0] != recordV1 {
		return fmt.Errorf("%w: unknown message state format", errCorrupt)
	}
	d := decoder{b: b[1:]}
	m.recvCount = int32(d.uvarint())
	m.firstRecvAt = d.varint()
	m.visibleAt = d.varint()
	m.leaseAt = d.varint()
	m.receipt = d.uvarint()
	m.parked, m.session = false, false
	decodeExt(&d, m)
	return d.err
}

// Receipt handles are base64url (unpadded) of
//
//	version 2: version(1) qid(4) seq(8) receipt(8) receiveCount(4) idTag(8) mac(12)  (60 chars)
//	version 1: version(1) qid(4) seq(8) receipt(8)                                   (28 chars)
//
// The receipt number is random per receive, so each receive issues a new
// handle and an old handle can be told from the current one. Version 2
// adds the receive count the lease was issued at and the first 8 bytes of
// the message id: a lease is written without a sync, so after a crash the
// store may hold an older state of the message than a handle a consumer
// still has. A handle whose count is higher than the stored one, for the
// same message (the id tag matches), is a lease the crash lost, not a
// stale one. Its random receipt can no longer be checked (the broker
// forgot it), so version 2 ends with an HMAC-SHA256 (truncated to 12
// bytes) of everything before it under the store's receipt key (see
// receiptKey): only a handle this broker issued passes, and a client that
// knows a MessageId and a sequence number cannot forge one. Version 1
// handles (issued before version 2 existed) are still accepted, without the
// lost-lease rule. Handles come from clients: the decoder accepts exactly
// these two shapes and nothing else (FuzzDecodeReceipt).
const (
	receiptV1 = 1
	receiptV2 = 2

	receiptV2Body = 33 // bytes before the MAC
	receiptMACLen = 12
	receiptV2Len  = 60 // characters of an encoded version 2 handle
)

// receiptHandle is a decoded receipt handle. count, idTag, body and mac
// are zero in a version 1 handle.
type receiptHandle struct {
	qid     uint32
	seq     uint64
	receipt uint64
	count   uint32
	idTag   uint64
	v2      bool
	body    [receiptV2Body]byte
	mac     [receiptMACLen]byte
}

// receiptSigner computes the MACs of version 2 handles under one key. Every
// receive signs one handle per message, and hmac.New allocates two SHA-256
// states and its pads each time, so keyed HMACs are kept for reuse
// (hmac's Reset returns to the keyed state without rehashing the key).
// Safe for concurrent use; the zero value is not usable (newReceiptSigner).
type receiptSigner struct {
	key  []byte
	macs sync.Pool // of hash.Hash: HMAC-SHA256 under key
}

func newReceiptSigner(key []byte) *receiptSigner {
	s := &receiptSigner{key: key}
	s.macs.New = func() any { return hmac.New(sha256.New, s.key) }
	return s
}

// mac is the MAC of a version 2 handle's body: HMAC-SHA256 under the key,
// truncated to receiptMACLen bytes.
func (s *receiptSigner) mac(body []byte) (out [receiptMACLen]byte) {
	h := s.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(body)
	var sum [sha256.Size]byte
	copy(out[:], h.Sum(sum[:0]))
	s.macs.Put(h)
	return out
}

func encodeReceipt(key *receiptSigner, qid uint32, m *message) string {
	var b [receiptV2Body + receiptMACLen]byte
	b[0] = receiptV2
	binary.BigEndian.PutUint32(b[1:], qid)
	binary.BigEndian.PutUint64(b[5:], m.seq)
	binary.BigEndian.PutUint64(b[13:], m.receipt)
	binary.BigEndian.PutUint32(b[21:], uint32(m.recvCount))
	copy(b[25:], m.id[:8])
	mac := key.mac(b[:receiptV2Body])
	copy(b[receiptV2Body:], mac[:])
	// Encoded on the stack: one allocation (the string), not two.
	var out [receiptV2Len]byte
	base64.RawURLEncoding.Encode(out[:], b[:])
	return string(out[:])
}

// decodeReceipt parses a handle. It does not check a version 2 handle's
// MAC: only the lost-lease rule needs it (validMAC).
func decodeReceipt(s string) (h receiptHandle, ok bool) {
	var b [receiptV2Body + receiptMACLen]byte
	var src [receiptV2Len]byte // s copied here: no allocation per handle
	switch len(s) {
	case 28:
		n, err := base64.RawURLEncoding.Decode(b[:], src[:copy(src[:], s)])
		if err != nil || n != 21 || b[0] != receiptV1 {
			return receiptHandle{}, false
		}
	case receiptV2Len:
		n, err := base64.RawURLEncoding.Decode(b[:], src[:copy(src[:], s)])
		if err != nil || n != len(b) || b[0] != receiptV2 {
			return receiptHandle{}, false
		}
		h.v2 = true
		h.count = binary.BigEndian.Uint32(b[21:])
		h.idTag = binary.BigEndian.Uint64(b[25:])
		copy(h.body[:], b[:receiptV2Body])
		copy(h.mac[:], b[receiptV2Body:])
	default:
		return receiptHandle{}, false
	}
	h.qid = binary.BigEndian.Uint32(b[1:])
	h.seq = binary.BigEndian.Uint64(b[5:])
	h.receipt = binary.BigEndian.Uint64(b[13:])
	return h, true
}

// validMAC reports whether a version 2 handle was issued under key.
func (h *receiptHandle) validMAC(key *receiptSigner) bool {
	want := key.mac(h.body[:])
	return h.v2 && hmac.Equal(want[:], h.mac[:])
}

func binaryUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
