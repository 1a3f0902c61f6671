package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// decoder reads AMQP primitive types from a byte slice. Errors are sticky:
// after the first failure every read returns a zero value and err keeps the
// first error, so generated code can read all fields and check once.
//
// Every length field is checked against the bytes that remain before
// anything is allocated, so a hostile length costs nothing. Decoded strings
// and byte slices are copies: they never alias buf.
type decoder struct {
	buf   []byte
	off   int
	depth int // table/array nesting depth of buf, for MaxTableDepth
	err   error
}

func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, args...)...)
	}
}

// take returns the next n bytes (aliasing buf) or nil after recording an
// error if fewer than n remain.
func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.buf)-d.off {
		d.failf("%s needs %d bytes at offset %d, %d left", what, n, d.off, len(d.buf)-d.off)
		return nil
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b
}

func (d *decoder) octet() uint8 {
	if b := d.take(1, "octet"); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) short() uint16 {
	if b := d.take(2, "short"); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) long() uint32 {
	if b := d.take(4, "long"); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) longlong() uint64 {
	if b := d.take(8, "longlong"); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) timestamp() Timestamp { return Timestamp(d.longlong()) }

func (d *decoder) shortstr() string {
	n := int(d.octet())
	return string(d.take(n, "shortstr"))
}

// longLen reads a u32 length and checks it against the remaining bytes
// (on 32-bit platforms a length above MaxInt fails the same check).
func (d *decoder) longLen(what string) int {
	n := d.long()
	if d.err == nil && uint64(n) > uint64(len(d.buf)-d.off) {
		d.failf("%s length %d at offset %d exceeds the %d bytes left", what, n, d.off, len(d.buf)-d.off)
		return 0
	}
	return int(n)
}

func (d *decoder) longstr() string {
	n := d.longLen("longstr")
	return string(d.take(n, "longstr"))
}

func (d *decoder) bytes() []byte {
	n := d.longLen("byte array")
	b := d.take(n, "byte array")
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// sub returns a decoder over the next n-byte block (a table or array body),
// one nesting level deeper.
func (d *decoder) sub(what string) decoder {
	n := d.longLen(what)
	b := d.take(n, what)
	s := decoder{buf: b, depth: d.depth + 1, err: d.err}
	if s.err == nil && s.depth > MaxTableDepth {
		s.failf("%s nested deeper than %d", what, MaxTableDepth)
		d.err = s.err
	}
	return s
}

func (d *decoder) table() Table {
	s := d.sub("table")
	t := s.tableBody()
	if d.err == nil {
		d.err = s.err
	}
	return t
}

// finish returns the first error, or an error if bytes are left over: every
// AMQP structure this package decodes has an exact length, and refusing
// trailing bytes makes decode→encode reproduce the input.
func (d *decoder) finish(what string) error {
	if d.err == nil && d.off != len(d.buf) {
		d.failf("%d trailing bytes after %s", len(d.buf)-d.off, what)
	}
	if d.err != nil {
		return fmt.Errorf("%s: %w", what, d.err)
	}
	return nil
}

// encoder appends AMQP primitive types to buf. Errors are sticky like the
// decoder's.
type encoder struct {
	buf   []byte
	depth int
	err   error
}

func (e *encoder) failf(base error, format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: "+format, append([]any{base}, args...)...)
	}
}

func (e *encoder) octet(v uint8)         { e.buf = append(e.buf, v) }
func (e *encoder) short(v uint16)        { e.buf = binary.BigEndian.AppendUint16(e.buf, v) }
func (e *encoder) long(v uint32)         { e.buf = binary.BigEndian.AppendUint32(e.buf, v) }
func (e *encoder) longlong(v uint64)     { e.buf = binary.BigEndian.AppendUint64(e.buf, v) }
func (e *encoder) timestamp(v Timestamp) { e.longlong(uint64(v)) }

func (e *encoder) shortstr(s string) {
	if len(s) > math.MaxUint8 {
		e.failf(ErrFieldTooLong, "shortstr of %d bytes", len(s))
		return
	}
	e.buf = append(e.buf, uint8(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *encoder) longLen(n int, what string) bool {
	if uint64(n) > math.MaxUint32 {
		e.failf(ErrFieldTooLong, "%s of %d bytes", what, n)
		return false
	}
	e.long(uint32(n))
	return true
}

func (e *encoder) longstr(s string) {
	if e.longLen(len(s), "longstr") {
		e.buf = append(e.buf, s...)
	}
}

func (e *encoder) bytes(b []byte) {
	if e.longLen(len(b), "byte array") {
		e.buf = append(e.buf, b...)
	}
}

// block writes a u32 length placeholder, runs body one nesting level deeper
// and patches the length in.
func (e *encoder) block(what string, body func()) {
	if e.depth >= MaxTableDepth {
		e.failf(ErrTooDeep, "%s deeper than %d", what, MaxTableDepth)
		return
	}
	at := len(e.buf)
	e.long(0)
	e.depth++
	body()
	e.depth--
	n := len(e.buf) - at - 4
	if uint64(n) > math.MaxUint32 {
		e.failf(ErrFieldTooLong, "%s of %d bytes", what, n)
		return
	}
	binary.BigEndian.PutUint32(e.buf[at:], uint32(n))
}

func (e *encoder) table(t Table) { e.block("table", func() { e.tableBody(t) }) }
