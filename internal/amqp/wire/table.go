package wire

import (
	"math"
	"time"
)

// MaxTableDepth bounds how deeply field tables and arrays may nest, on
// decode and on encode. A table or array inside a table is depth 2.
// RabbitMQ's x-death header needs 4 (headers table → x-death array → entry
// table → routing-keys array); 64 leaves room for any real application
// while keeping a hostile frame from exhausting the stack.
const MaxTableDepth = 64

// Table is an AMQP field table, in wire order.
//
// It is a slice rather than a map so that decode→encode reproduces the
// input byte for byte: entry order and duplicate keys survive. Lookups
// follow RabbitMQ, which takes the first entry with a matching key.
//
// Values use RabbitMQ's tag set (the AMQP 0-9-1 errata, not the spec's own
// table), one Go type per tag so that every value round-trips with its tag:
//
//	tag  Go type    wire
//	't'  bool       octet, non-zero is true (encoded as 1)
//	'b'  int8       octet
//	'B'  uint8      octet
//	's'  int16      short (RabbitMQ: int16, not a short string)
//	'u'  uint16     short
//	'I'  int32      long
//	'i'  uint32     long
//	'l'  int64      longlong
//	'f'  float32    IEEE 754, 4 bytes
//	'd'  float64    IEEE 754, 8 bytes
//	'D'  Decimal    scale octet, int32 value
//	'S'  string     long string: u32 length, bytes
//	'x'  []byte     byte array: u32 length, bytes
//	'A'  []any      array: u32 byte length, then tagged values
//	'T'  Timestamp  u64 seconds since the Unix epoch
//	'F'  Table      nested table: u32 byte length, then entries
//	'V'  nil        void, no bytes
//
// Encoding any other Go type (int, map[string]any, time.Time, …) fails with
// ErrUnsupportedType; decoding any other tag (including the spec's 'U' and
// 'L', which RabbitMQ does not use) fails with ErrSyntax.
type Table []Field

// Field is one entry of a Table. Key is a short string (at most 255 bytes).
type Field struct {
	Key   string
	Value any
}

// Get returns the value of the first entry named key.
func (t Table) Get(key string) (any, bool) {
	for _, f := range t {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// Set replaces the value of the first entry named key and removes any later
// duplicates, or appends a new entry. It returns the updated table.
func (t Table) Set(key string, value any) Table {
	for i, f := range t {
		if f.Key == key {
			t[i].Value = value
			return append(t[:i+1], t[i+1:].Delete(key)...)
		}
	}
	return append(t, Field{Key: key, Value: value})
}

// Delete returns t without any entry named key. It reuses t's storage.
func (t Table) Delete(key string) Table {
	out := t[:0]
	for _, f := range t {
		if f.Key != key {
			out = append(out, f)
		}
	}
	clear(t[len(out):])
	return out
}

// Decimal is the 'D' field value: Value × 10^-Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Timestamp is an AMQP timestamp: seconds since the Unix epoch, as the
// unsigned 64-bit integer the wire carries (so every value round-trips).
type Timestamp uint64

// TimestampOf returns t truncated to whole seconds. Times before 1970 wrap
// around, as they do on the wire.
func TimestampOf(t time.Time) Timestamp { return Timestamp(t.Unix()) }

// Time returns ts as a UTC time.Time.
func (ts Timestamp) Time() time.Time { return time.Unix(int64(ts), 0).UTC() }

// tableBody decodes entries until the end of d.buf.
func (d *decoder) tableBody() Table {
	t := Table{}
	for d.err == nil && d.off < len(d.buf) {
		k := d.shortstr()
		v := d.value()
		if d.err != nil {
			return nil
		}
		t = append(t, Field{Key: k, Value: v})
	}
	if d.err != nil {
		return nil
	}
	return t
}

func (d *decoder) array() []any {
	s := d.sub("array")
	a := []any{}
	for s.err == nil && s.off < len(s.buf) {
		v := s.value()
		if s.err == nil {
			a = append(a, v)
		}
	}
	if d.err == nil {
		d.err = s.err
	}
	if d.err != nil {
		return nil
	}
	return a
}

// value decodes one tagged field value.
func (d *decoder) value() any {
	tag := d.octet()
	if d.err != nil {
		return nil
	}
	switch tag {
	case 't':
		return d.octet() != 0
	case 'b':
		return int8(d.octet())
	case 'B':
		return d.octet()
	case 's':
		return int16(d.short())
	case 'u':
		return d.short()
	case 'I':
		return int32(d.long())
	case 'i':
		return d.long()
	case 'l':
		return int64(d.longlong())
	case 'f':
		return math.Float32frombits(d.long())
	case 'd':
		return math.Float64frombits(d.longlong())
	case 'D':
		scale := d.octet()
		return Decimal{Scale: scale, Value: int32(d.long())}
	case 'S':
		return d.longstr()
	case 'x':
		return d.bytes()
	case 'A':
		return d.array()
	case 'T':
		return d.timestamp()
	case 'F':
		return d.table()
	case 'V':
		return nil
	}
	d.failf("unknown field-value tag %q at offset %d", tag, d.off-1)
	return nil
}

func (e *encoder) tableBody(t Table) {
	for _, f := range t {
		if e.err != nil {
			return
		}
		e.shortstr(f.Key)
		e.value(f.Value)
	}
}

func (e *encoder) array(a []any) {
	e.block("array", func() {
		for _, v := range a {
			if e.err != nil {
				return
			}
			e.value(v)
		}
	})
}

// value encodes one tagged field value; see Table for the type mapping.
func (e *encoder) value(v any) {
	switch v := v.(type) {
	case bool:
		var b uint8
		if v {
			b = 1
		}
		e.buf = append(e.buf, 't', b)
	case int8:
		e.buf = append(e.buf, 'b', uint8(v))
	case uint8:
		e.buf = append(e.buf, 'B', v)
	case int16:
		e.octet('s')
		e.short(uint16(v))
	case uint16:
		e.octet('u')
		e.short(v)
	case int32:
		e.octet('I')
		e.long(uint32(v))
	case uint32:
		e.octet('i')
		e.long(v)
	case int64:
		e.octet('l')
		e.longlong(uint64(v))
	case float32:
		e.octet('f')
		e.long(math.Float32bits(v))
	case float64:
		e.octet('d')
		e.longlong(math.Float64bits(v))
	case Decimal:
		e.buf = append(e.buf, 'D', v.Scale)
		e.long(uint32(v.Value))
	case string:
		e.octet('S')
		e.longstr(v)
	case []byte:
		e.octet('x')
		e.bytes(v)
	case []any:
		e.octet('A')
		e.array(v)
	case Timestamp:
		e.octet('T')
		e.timestamp(v)
	case Table:
		e.octet('F')
		e.table(v)
	case nil:
		e.octet('V')
	default:
		e.failf(ErrUnsupportedType, "%T", v)
	}
}

// ParseTable decodes a complete field table including its u32 length prefix;
// b must hold exactly that. Decoded values never alias b.
func ParseTable(b []byte) (Table, error) {
	d := decoder{buf: b}
	t := d.table()
	if err := d.finish("table"); err != nil {
		return nil, err
	}
	return t, nil
}

// ParseTableBody decodes field-table entries that fill b, without a length
// prefix. It exists for AMQPLAIN responses, which amqplib sends as a table
// without its length.
func ParseTableBody(b []byte) (Table, error) {
	d := decoder{buf: b, depth: 1}
	t := d.tableBody()
	if err := d.finish("table"); err != nil {
		return nil, err
	}
	return t, nil
}

// AppendTable appends t with its u32 length prefix to dst. On error it
// returns dst unchanged.
func AppendTable(dst []byte, t Table) ([]byte, error) {
	e := encoder{buf: dst}
	e.table(t)
	if e.err != nil {
		return dst, e.err
	}
	return e.buf, nil
}
