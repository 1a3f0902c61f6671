package server

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// The engine calls' binary wire (ShardEnginePath). Until 2026-12-05 every
// call and answer was a gob stream of its own: a new gob encoder sends
// the type descriptions of engineCall and engineReply with each one and a
// new decoder compiles them again, which was a quarter of both nodes' CPU
// when an AMQP client used a queue of another shard (a 2-core profile:
// gob's encode and decode 28 % of the caller's and 23 % of the leader's).
// This wire writes the same fields in a fixed order with no description.
//
// A body in it begins with engineWireMagic and a version byte. No gob
// stream begins with a zero byte (gob prefixes every message with its
// length, never 0), so a leader tells the two apart by the first byte and
// answers in the wire it was asked in: a caller of an older build still
// speaks gob to it. A caller sends this wire only to a leader whose
// advertisement says it reads it (the cluster node turns the call into
// gob for one of an older build: EngineCallAsGob).
//
// What it carries is exactly engineCall's and engineReply's fields (the
// round trip of every field filled in is TestEngineWireRoundTrip, so a
// field added to them or to an engine type they hold fails it until it is
// written here too), with two differences from gob: times come back in
// UTC, and a sent message's Body arrives lent (BodyBorrowed: it points
// into the request, and the engine keeps its own copy). A reply's bytes
// (bodies, envelopes) point into the reply, which the caller owns. The
// rare QueueInfo of a get-queue answer is carried as a gob blob inside.

var engineWireMagic = [4]byte{0, 'S', 'E', 'W'}

const engineWireVersion = 1

// maxWireSeconds bounds a time's Unix seconds (about 35,000 years either
// way; the zero time is written as absent): time.Unix past it would wrap.
const maxWireSeconds = 1 << 40

var errEngineWire = errors.New("malformed engine call")

// isEngineWire reports whether body is in the binary wire (else gob).
func isEngineWire(body []byte) bool {
	return len(body) >= len(engineWireMagic) && [4]byte(body[:4]) == engineWireMagic
}

// wenc appends the wire's values to b.
type wenc struct{ b []byte }

func newWenc(size int) wenc {
	e := wenc{b: make([]byte, 0, size+len(engineWireMagic)+1)}
	e.b = append(e.b, engineWireMagic[:]...)
	e.b = append(e.b, engineWireVersion)
	return e
}

func (e *wenc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *wenc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *wenc) num(v int)        { e.varint(int64(v)) }
func (e *wenc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *wenc) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *wenc) dur(d time.Duration) {
	e.varint(int64(d))
}

func (e *wenc) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// tm writes a time as present, Unix seconds, nanoseconds: any instant,
// the zero time included.
func (e *wenc) tm(t time.Time) {
	if t.IsZero() {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(e.b, 1)
	e.varint(t.Unix())
	e.uvarint(uint64(t.Nanosecond()))
}

func (e *wenc) md5(sum [16]byte, set bool) {
	e.boolean(set)
	e.boolean(sum != [16]byte{})
	if sum != [16]byte{} {
		e.b = append(e.b, sum[:]...)
	}
}

func (e *wenc) rerr(r remoteError) { e.num(r.Sentinel); e.str(r.Text) }

func (e *wenc) attrs(as []engine.Attribute) {
	e.uvarint(uint64(len(as)))
	for _, a := range as {
		e.str(a.Name)
		e.str(a.DataType)
		e.str(a.StringValue)
		e.bytes(a.BinaryValue)
	}
}

// wdec reads the wire's values from b; the first error sticks and every
// later read returns a zero value. With alias, bytes point into b.
type wdec struct {
	b     []byte
	err   error
	alias bool
}

func (d *wdec) fail() {
	if d.err == nil {
		d.err = errEngineWire
	}
	d.b = nil
}

func (d *wdec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *wdec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *wdec) num() int {
	v := d.varint()
	if v > math.MaxInt || v < math.MinInt {
		d.fail()
		return 0
	}
	return int(v)
}

func (d *wdec) raw(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *wdec) str() string { return string(d.raw(d.uvarint())) }

// bytes returns a byte string, nil when empty (as gob gives it).
func (d *wdec) bytes() []byte {
	p := d.raw(d.uvarint())
	if len(p) == 0 {
		return nil
	}
	if d.alias {
		return p
	}
	return bytes.Clone(p)
}

func (d *wdec) dur() time.Duration { return time.Duration(d.varint()) }

func (d *wdec) boolean() bool {
	p := d.raw(1)
	if len(p) == 1 && p[0] > 1 {
		d.fail()
	}
	return len(p) == 1 && p[0] == 1
}

func (d *wdec) tm() time.Time {
	if !d.boolean() {
		return time.Time{}
	}
	sec, nsec := d.varint(), d.uvarint()
	if nsec >= 1e9 || sec > maxWireSeconds || sec < -maxWireSeconds {
		d.fail()
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (d *wdec) md5() (sum [16]byte, set bool) {
	set = d.boolean()
	if d.boolean() {
		copy(sum[:], d.raw(16))
	}
	return sum, set
}

// count reads a slice's length, refused when the bytes left could not
// hold that many elements of at least min bytes each (no allocation
// larger than the body).
func (d *wdec) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/min) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *wdec) rerr() remoteError { return remoteError{Sentinel: d.num(), Text: d.str()} }

func (d *wdec) attrs() []engine.Attribute {
	n := d.count(4)
	if n == 0 {
		return nil
	}
	as := make([]engine.Attribute, n)
	for i := range as {
		as[i] = engine.Attribute{Name: d.str(), DataType: d.str(), StringValue: d.str(), BinaryValue: d.bytes()}
	}
	return as
}

// end checks that the whole body was read.
func (d *wdec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = errEngineWire
	}
	return d.err
}

// open checks body's magic and version and returns a decoder of the rest.
func openEngineWire(body []byte, alias bool) (*wdec, error) {
	if !isEngineWire(body) || len(body) < len(engineWireMagic)+1 {
		return nil, errEngineWire
	}
	if v := body[len(engineWireMagic)]; v != engineWireVersion {
		return nil, fmt.Errorf("%w: wire version %d", errEngineWire, v)
	}
	return &wdec{b: body[len(engineWireMagic)+1:], alias: alias}, nil
}

// encodeEngineCall writes c in the binary wire.
func encodeEngineCall(c *engineCall) []byte {
	size := 64 + len(c.Queue) + len(c.Session)
	for i := range c.Msgs {
		size += 48 + c.Msgs[i].Size() + len(c.Msgs[i].GroupID) + len(c.Msgs[i].DedupID) + 32*len(c.Msgs[i].Attributes)
	}
	for _, h := range c.Handles {
		size += 2 + len(h)
	}
	for i := range c.Transfers {
		size += 40 + len(c.Transfers[i].Record)
	}
	e := newWenc(size)
	e.str(c.Op)
	e.str(c.Queue)
	e.str(c.Session)
	e.uvarint(uint64(len(c.Msgs)))
	for i := range c.Msgs {
		m := &c.Msgs[i]
		e.bytes(m.Body)
		e.attrs(m.Attributes)
		e.str(m.TraceHeader)
		e.str(m.SenderID)
		e.str(m.GroupID)
		e.str(m.DedupID)
		e.dur(m.Delay)
		e.boolean(m.DelaySet)
		e.dur(m.TTL)
		e.boolean(m.TTLSet)
		e.bytes(m.Envelope)
		e.md5(m.BodyMD5, m.BodyMD5Set)
		e.b = append(e.b, m.Priority)
	}
	e.uvarint(uint64(len(c.Handles)))
	for _, h := range c.Handles {
		e.str(h)
	}
	e.boolean(c.Front)
	f := &c.Failure
	e.str(f.ErrorClass)
	e.str(f.Message)
	e.str(f.Trace)
	e.str(f.ConsumerID)
	e.str(f.ConsumerVersion)
	e.boolean(f.Terminal)
	e.dur(f.RetryAfter)
	e.boolean(f.RetryAfterSet)
	e.num(c.Max)
	e.dur(c.Visibility)
	e.dur(c.Wait)
	e.boolean(c.VisibilitySet)
	e.boolean(c.WaitSet)
	e.boolean(c.SessionLease)
	e.uvarint(uint64(len(c.Transfers)))
	for i := range c.Transfers {
		t := &c.Transfers[i]
		e.b = append(e.b, t.ID[:]...)
		e.str(t.Target)
		e.str(t.Source)
		e.str(t.Reason)
		e.b = append(e.b, transferFlags(t))
		e.bytes(t.Record)
	}
	e.num(c.Shard)
	e.num(c.Own)
	return e.b
}

// decodeEngineCallWire reads a call in the binary wire. Sent bodies point
// into body (BodyBorrowed); everything else is copied.
func decodeEngineCallWire(body []byte) (engineCall, error) {
	var c engineCall
	d, err := openEngineWire(body, false)
	if err != nil {
		return c, err
	}
	c.Op, c.Queue, c.Session = d.str(), d.str(), d.str()
	if n := d.count(15); n > 0 { // a message takes 15 bytes at least
		c.Msgs = make([]engine.Message, n)
		for i := range c.Msgs {
			m := &c.Msgs[i]
			d.alias = true
			m.Body = d.bytes()
			d.alias = false
			m.BodyBorrowed = true
			m.Attributes = d.attrs()
			m.TraceHeader, m.SenderID, m.GroupID, m.DedupID = d.str(), d.str(), d.str(), d.str()
			m.Delay, m.DelaySet = d.dur(), d.boolean()
			m.TTL, m.TTLSet = d.dur(), d.boolean()
			m.Envelope = d.bytes()
			m.BodyMD5, m.BodyMD5Set = d.md5()
			if p := d.raw(1); len(p) == 1 {
				m.Priority = p[0]
			}
		}
	}
	if n := d.count(1); n > 0 {
		c.Handles = make([]string, n)
		for i := range c.Handles {
			c.Handles[i] = d.str()
		}
	}
	c.Front = d.boolean()
	c.Failure = engine.Failure{ErrorClass: d.str(), Message: d.str(), Trace: d.str(), ConsumerID: d.str(),
		ConsumerVersion: d.str(), Terminal: d.boolean(), RetryAfter: d.dur(), RetryAfterSet: d.boolean()}
	c.Max = d.num()
	c.Visibility, c.Wait = d.dur(), d.dur()
	c.VisibilitySet, c.WaitSet, c.SessionLease = d.boolean(), d.boolean(), d.boolean()
	if n := d.count(21); n > 0 { // a transfer takes 21 bytes at least
		c.Transfers = make([]engine.Transfer, n)
		for i := range c.Transfers {
			t := &c.Transfers[i]
			copy(t.ID[:], d.raw(16))
			t.Target, t.Source, t.Reason = d.str(), d.str(), d.str()
			t.Redrive, t.Route = transferFlagsOf(d)
			t.Record = d.bytes()
		}
	}
	c.Shard, c.Own = d.num(), d.num()
	if err := d.end(); err != nil {
		return engineCall{}, err
	}
	return c, nil
}

// encodeEngineReply writes r in the binary wire.
func encodeEngineReply(r *engineReply) ([]byte, error) {
	size := 64 + len(r.Err.Text) + 24*len(r.Errs) + 48*len(r.Results)
	for i := range r.Deliveries {
		dl := &r.Deliveries[i]
		size += 160 + len(dl.MessageID) + len(dl.ReceiptHandle) + len(dl.Body) + len(dl.Envelope) + 32*len(dl.Attributes)
	}
	var info []byte
	if !isZeroInfo(&r.Info) {
		var err error
		if info, err = encodeGob(r.Info); err != nil {
			return nil, err
		}
	}
	e := newWenc(size + len(info))
	e.rerr(r.Err)
	e.uvarint(uint64(len(r.Errs)))
	for _, x := range r.Errs {
		e.rerr(x)
	}
	e.uvarint(uint64(len(r.Results)))
	for _, x := range r.Results {
		e.str(x.MessageID)
		e.str(x.SequenceNumber)
		e.rerr(x.Err)
	}
	e.uvarint(uint64(len(r.Deliveries)))
	for i := range r.Deliveries {
		dl := &r.Deliveries[i]
		e.str(dl.MessageID)
		e.str(dl.ReceiptHandle)
		e.bytes(dl.Body)
		e.attrs(dl.Attributes)
		e.str(dl.TraceHeader)
		e.str(dl.SenderID)
		e.tm(dl.SentAt)
		e.tm(dl.FirstReceiveAt)
		e.num(dl.ReceiveCount)
		e.str(dl.GroupID)
		e.str(dl.DedupID)
		e.str(dl.SequenceNumber)
		e.str(dl.DeadLetterSource)
		e.bytes(dl.Envelope)
		e.boolean(dl.Redelivered)
		e.md5(dl.BodyMD5, dl.BodyMD5Set)
		e.b = append(e.b, dl.Priority)
		e.boolean(dl.DeadLetter != nil)
		if x := dl.DeadLetter; x != nil {
			e.str(x.SourceQueue)
			e.str(x.Reason)
			e.num(x.Attempts)
			e.tm(x.FirstReceiveAt)
			e.tm(x.LastReceiveAt)
			e.tm(x.DeadLetteredAt)
		}
		e.boolean(dl.LastFailure != nil)
		if x := dl.LastFailure; x != nil {
			e.str(x.ErrorClass)
			e.str(x.Message)
			e.str(x.Trace)
			e.str(x.ConsumerID)
			e.str(x.ConsumerVersion)
			e.tm(x.ReportedAt)
			e.num(x.Attempt)
		}
		e.boolean(dl.Redrive != nil)
		if x := dl.Redrive; x != nil {
			e.str(x.OriginalMessageID)
			e.num(x.Count)
			e.str(x.TaskID)
			e.tm(x.At)
		}
	}
	e.bytes(info)
	e.tm(r.Time)
	e.num(r.N)
	e.num(r.Visible)
	e.boolean(r.VisibleOK)
	return e.b, nil
}

// isZeroInfo reports whether info is the zero QueueInfo (every answer but
// a get-queue's), which the wire leaves out.
func isZeroInfo(info *engine.QueueInfo) bool { return reflect.ValueOf(info).Elem().IsZero() }

// decodeEngineReplyWire reads an answer in the binary wire; its bytes
// point into body.
func decodeEngineReplyWire(body []byte) (engineReply, error) {
	var r engineReply
	d, err := openEngineWire(body, true)
	if err != nil {
		return r, err
	}
	r.Err = d.rerr()
	if n := d.count(2); n > 0 {
		r.Errs = make([]remoteError, n)
		for i := range r.Errs {
			r.Errs[i] = d.rerr()
		}
	}
	if n := d.count(4); n > 0 {
		r.Results = make([]remoteSendResult, n)
		for i := range r.Results {
			r.Results[i] = remoteSendResult{MessageID: d.str(), SequenceNumber: d.str(), Err: d.rerr()}
		}
	}
	if n := d.count(21); n > 0 { // a delivery takes 21 bytes at least
		r.Deliveries = make([]engine.Delivery, n)
		for i := range r.Deliveries {
			dl := &r.Deliveries[i]
			dl.MessageID, dl.ReceiptHandle = d.str(), d.str()
			dl.Body = d.bytes()
			dl.Attributes = d.attrs()
			dl.TraceHeader, dl.SenderID = d.str(), d.str()
			dl.SentAt, dl.FirstReceiveAt = d.tm(), d.tm()
			dl.ReceiveCount = d.num()
			dl.GroupID, dl.DedupID, dl.SequenceNumber, dl.DeadLetterSource = d.str(), d.str(), d.str(), d.str()
			dl.Envelope = d.bytes()
			dl.Redelivered = d.boolean()
			dl.BodyMD5, dl.BodyMD5Set = d.md5()
			if p := d.raw(1); len(p) == 1 {
				dl.Priority = p[0]
			}
			if d.boolean() {
				dl.DeadLetter = &engine.DeadLetterInfo{SourceQueue: d.str(), Reason: d.str(), Attempts: d.num(),
					FirstReceiveAt: d.tm(), LastReceiveAt: d.tm(), DeadLetteredAt: d.tm()}
			}
			if d.boolean() {
				dl.LastFailure = &engine.FailureRecord{ErrorClass: d.str(), Message: d.str(), Trace: d.str(),
					ConsumerID: d.str(), ConsumerVersion: d.str(), ReportedAt: d.tm(), Attempt: d.num()}
			}
			if d.boolean() {
				dl.Redrive = &engine.RedriveInfo{OriginalMessageID: d.str(), Count: d.num(), TaskID: d.str(), At: d.tm()}
			}
		}
	}
	if info := d.raw(d.uvarint()); len(info) > 0 && d.err == nil {
		if err := gob.NewDecoder(bytes.NewReader(info)).Decode(&r.Info); err != nil {
			return engineReply{}, fmt.Errorf("%w: queue info: %v", errEngineWire, err)
		}
	}
	r.Time = d.tm()
	r.N, r.Visible = d.num(), d.num()
	r.VisibleOK = d.boolean()
	if err := d.end(); err != nil {
		return engineReply{}, err
	}
	return r, nil
}

// EngineCallAsGob returns body, an engine call, in gob: unchanged when it
// is gob already, else decoded from the binary wire and encoded again
// (for a shard leader of a build before the wire, whose advertisement
// does not say it reads it).
func EngineCallAsGob(body []byte) ([]byte, error) {
	if !isEngineWire(body) {
		return body, nil
	}
	c, err := decodeEngineCallWire(body)
	if err != nil {
		return nil, err
	}
	for i := range c.Msgs {
		c.Msgs[i].BodyBorrowed = false // gob does not carry it; an old leader copies what gob decodes anyway
	}
	return encodeGob(c)
}

// A transfer's flags byte: bit 0 Redrive (a build before route transfers
// reads the byte as that boolean, 0 or 1), bit 1 Route (only opRoute
// carries route transfers, which such a build refuses as unreadable).
const (
	transferRedrive = 1 << iota
	transferRoute
)

func transferFlags(t *engine.Transfer) byte {
	var f byte
	if t.Redrive {
		f |= transferRedrive
	}
	if t.Route {
		f |= transferRoute
	}
	return f
}

func transferFlagsOf(d *wdec) (redrive, route bool) {
	p := d.raw(1)
	if len(p) != 1 {
		return false, false
	}
	if p[0]&^(transferRedrive|transferRoute) != 0 {
		d.fail()
	}
	return p[0]&transferRedrive != 0, p[0]&transferRoute != 0
}
