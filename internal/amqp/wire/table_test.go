package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// unhex decodes hex with optional spaces, for readable golden bytes.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// fieldValueCases holds every RabbitMQ field-value tag with its encoding,
// computed by hand from the errata's type table.
var fieldValueCases = []struct {
	name  string
	value any
	wire  string // tag and value
}{
	{"t true", true, "74 01"},
	{"t false", false, "74 00"},
	{"b int8", int8(-8), "62 f8"},
	{"B uint8", uint8(200), "42 c8"},
	{"s int16", int16(-1600), "73 f9c0"},
	{"u uint16", uint16(60000), "75 ea60"},
	{"I int32", int32(-320000), "49 fffb1e00"},
	{"i uint32", uint32(4000000000), "69 ee6b2800"},
	{"l int64", int64(-1 << 40), "6c ffffff0000000000"},
	{"f float32", float32(1.5), "66 3fc00000"},
	{"d float64", 2.25, "64 4002000000000000"},
	{"D decimal", Decimal{Scale: 2, Value: -12345}, "44 02 ffffcfc7"},
	{"S longstr", "hello", "53 00000005 68656c6c6f"},
	{"S empty", "", "53 00000000"},
	{"x bytes", []byte{0, 1, 2}, "78 00000003 000102"},
	{"x empty", []byte{}, "78 00000000"},
	{"A array", []any{int32(1), "a"}, "41 0000000b 49 00000001 53 00000001 61"},
	{"A empty", []any{}, "41 00000000"},
	{"T timestamp", Timestamp(1700000000), "54 000000006553f100"},
	{"F table", Table{{"k", "v"}}, "46 00000008 01 6b 53 00000001 76"},
	{"F empty", Table{}, "46 00000000"},
	{"V void", nil, "56"},
}

func TestFieldValuesRoundTrip(t *testing.T) {
	for _, c := range fieldValueCases {
		t.Run(c.name, func(t *testing.T) {
			v := unhex(t, c.wire)
			// A one-entry table {"k": value}: length, key "k", value.
			want := append([]byte{0, 0, 0, byte(2 + len(v)), 1, 'k'}, v...)
			got, err := AppendTable(nil, Table{{"k", c.value}})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encode = % x, want % x", got, want)
			}
			tab, err := ParseTable(want)
			if err != nil {
				t.Fatal(err)
			}
			if len(tab) != 1 || tab[0].Key != "k" {
				t.Fatalf("decoded %#v", tab)
			}
			if reflect.TypeOf(tab[0].Value) != reflect.TypeOf(c.value) || !reflect.DeepEqual(tab[0].Value, c.value) {
				t.Fatalf("decoded %#v (%T), want %#v (%T)", tab[0].Value, tab[0].Value, c.value, c.value)
			}
			again, err := AppendTable(nil, tab)
			if err != nil || !bytes.Equal(again, want) {
				t.Fatalf("re-encode = % x, %v", again, err)
			}
		})
	}
}

// allTypesTable holds one value of every Go type a Table may hold, nested.
func allTypesTable() Table {
	t := Table{}
	for _, c := range fieldValueCases {
		t = append(t, Field{c.name, c.value})
	}
	return append(t, Field{"nested", Table{{"x-death", []any{Table{{"routing-keys", []any{"a", "b"}}}}}}})
}

func TestTableKeepsOrderAndDuplicates(t *testing.T) {
	in := Table{{"z", int32(1)}, {"a", "x"}, {"z", int64(2)}, {"m", nil}}
	b, err := AppendTable(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %#v", out)
	}
	if v, _ := out.Get("z"); v != int32(1) {
		t.Fatalf("Get(z) = %v, want the first entry", v)
	}
	if _, ok := out.Get("missing"); ok {
		t.Fatal("Get(missing) found something")
	}
}

func TestTableSetDelete(t *testing.T) {
	tab := Table{{"a", int32(1)}, {"b", int32(2)}, {"a", int32(3)}}
	tab = tab.Set("a", "new")
	if want := (Table{{"a", "new"}, {"b", int32(2)}}); !reflect.DeepEqual(tab, want) {
		t.Fatalf("Set = %#v", tab)
	}
	tab = tab.Set("c", true)
	tab = tab.Delete("b")
	if want := (Table{{"a", "new"}, {"c", true}}); !reflect.DeepEqual(tab, want) {
		t.Fatalf("Set+Delete = %#v", tab)
	}
}

func TestAllTypesTableRoundTrip(t *testing.T) {
	in := allTypesTable()
	b, err := AppendTable(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the table:\n in %#v\nout %#v", in, out)
	}
	b2, _ := AppendTable(nil, out)
	if !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
}

func TestFloatBitsRoundTrip(t *testing.T) {
	// NaN payloads and negative zero must come back bit for bit.
	nan32 := math.Float32frombits(0x7fc00001)
	nan64 := math.Float64frombits(0x7ff8000000000001)
	in := Table{{"f", nan32}, {"d", nan64}, {"z", math.Copysign(0, -1)}}
	b, _ := AppendTable(nil, in)
	out, err := ParseTable(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := AppendTable(nil, out)
	if !bytes.Equal(b, b2) {
		t.Fatalf("% x != % x", b, b2)
	}
}

func TestNonCanonicalBool(t *testing.T) {
	// RabbitMQ reads any non-zero octet as true; it re-encodes as 1.
	tab, err := ParseTable(unhex(t, "00000004 01 6b 74 07"))
	if err != nil || tab[0].Value != true {
		t.Fatalf("%#v %v", tab, err)
	}
}

func TestTableDecodeErrors(t *testing.T) {
	for _, c := range []struct{ name, wire string }{
		{"short length", "0000"},
		{"length past end", "00000005 01 6b 56"},
		{"huge length", "ffffffff 01 6b 56"},
		{"unknown tag U", "00000004 01 6b 55 00"},
		{"spec tag L", "00000003 01 6b 4c"},
		{"key past end", "00000002 05 6b"},
		{"value cut", "00000004 01 6b 49 00"},
		{"longstr past table", "00000007 01 6b 53 00000010"},
		{"array past end", "00000008 01 6b 41 ffffff00 56"},
		{"trailing bytes", "00000000 00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTable(unhex(t, c.wire))
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("err = %v, want ErrSyntax", err)
			}
			if ReplyCodeFor(err) != SyntaxError {
				t.Fatalf("ReplyCodeFor = %d", ReplyCodeFor(err))
			}
		})
	}
}

// nest returns a table nested depth levels deep (depth 1 is a flat table).
func nest(depth int) Table {
	t := Table{{"leaf", int32(1)}}
	for i := 1; i < depth; i++ {
		t = Table{{"t", t}}
	}
	return t
}

func TestTableDepthLimit(t *testing.T) {
	ok, err := AppendTable(nil, nest(MaxTableDepth))
	if err != nil {
		t.Fatalf("depth %d: %v", MaxTableDepth, err)
	}
	if _, err := ParseTable(ok); err != nil {
		t.Fatalf("decode depth %d: %v", MaxTableDepth, err)
	}
	if _, err := AppendTable(nil, nest(MaxTableDepth+1)); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("encode too deep: %v", err)
	}
	// Build MaxTableDepth+1 levels by hand: arrays of one array each.
	var b []byte
	b = append(b, 'V')
	for range MaxTableDepth {
		b = append([]byte{'A', 0, 0, 0, 0}, b...)
		l := len(b) - 5
		b[1], b[2], b[3], b[4] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
	}
	l := len(b) + 2
	b = append([]byte{byte(l >> 24), byte(l >> 16), byte(l >> 8), byte(l), 1, 'k'}, b...)
	if _, err := ParseTable(b); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("decode too deep: %v", err)
	}
}

func TestSelfReferenceFailsToEncode(t *testing.T) {
	a := []any{nil}
	a[0] = a
	if _, err := AppendTable(nil, Table{{"loop", a}}); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("err = %v", err)
	}
}

func TestTableEncodeErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		tab  Table
		want error
	}{
		{"int", Table{{"k", 1}}, ErrUnsupportedType},
		{"map", Table{{"k", map[string]any{}}}, ErrUnsupportedType},
		{"time", Table{{"k", time.Now()}}, ErrUnsupportedType},
		{"nested int", Table{{"k", []any{uint64(1)}}}, ErrUnsupportedType},
		{"long key", Table{{strings.Repeat("k", 256), nil}}, ErrFieldTooLong},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := []byte("prefix")
			got, err := AppendTable(dst, c.tab)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if string(got) != "prefix" {
				t.Fatalf("dst changed on error: %q", got)
			}
		})
	}
}

func TestHostileTableLengthDoesNotAllocate(t *testing.T) {
	// A table entry claiming a 4 GiB long string in a 12-byte table.
	b := unhex(t, "00000008 01 6b 53 ffffffff 00")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if _, err := ParseTable(b); !errors.Is(err, ErrSyntax) {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("allocated %d bytes decoding hostile lengths", n)
	}
}

func TestParseTableBody(t *testing.T) {
	// AMQPLAIN as amqplib sends it: entries without the table length.
	body := unhex(t, "05 4c4f47494e 53 00000005 6775657374 08 50415353574f5244 53 00000005 6775657374")
	tab, err := ParseTableBody(body)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := tab.Get("LOGIN"); u != "guest" {
		t.Fatalf("%#v", tab)
	}
	if p, _ := tab.Get("PASSWORD"); p != "guest" {
		t.Fatalf("%#v", tab)
	}
}

func TestDecodedValuesDoNotAlias(t *testing.T) {
	b := unhex(t, "0000000a 01 6b 78 00000003 010203")
	tab, err := ParseTable(b)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = 0xff
	if got := tab[0].Value.([]byte); got[2] != 3 {
		t.Fatal("decoded byte array aliases the input")
	}
}

func TestTimestampTime(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	if got := TimestampOf(now).Time(); !got.Equal(now) {
		t.Fatalf("%v", got)
	}
}
