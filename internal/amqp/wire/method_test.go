package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// fill sets every field of the struct *m to a pseudo-random value, tables
// to one holding every field type.
func fill(m any, r *rand.Rand) {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(r.IntN(2) == 1)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(r.Uint64())
		case reflect.String:
			b := make([]byte, r.IntN(64))
			for j := range b {
				b[j] = byte(r.UintN(256))
			}
			f.SetString(string(b))
		case reflect.Slice:
			if f.Type() != reflect.TypeFor[Table]() {
				panic(fmt.Sprintf("unexpected field type %s", f.Type()))
			}
			if r.IntN(4) == 0 {
				f.Set(reflect.ValueOf(Table{}))
			} else {
				f.Set(reflect.ValueOf(allTypesTable()))
			}
		default:
			panic(fmt.Sprintf("unexpected field kind %s", f.Kind()))
		}
	}
}

func TestSpecMethodsAreComplete(t *testing.T) {
	if len(specMethods) != 64 {
		t.Errorf("spec defines %d methods, want 64 (0-9-1 plus RabbitMQ's extensions)", len(specMethods))
	}
	seen := 0
	for c := range 256 {
		for id := range 256 {
			m := newMethod(uint16(c), uint16(id))
			if m == nil {
				continue
			}
			seen++
			if gc, gid := m.IDs(); gc != uint16(c) || gid != uint16(id) {
				t.Errorf("newMethod(%d, %d) reports ids %d, %d", c, id, gc, gid)
			}
		}
	}
	if seen != len(specMethods) {
		t.Errorf("newMethod knows %d methods, spec lists %d", seen, len(specMethods))
	}
	for _, s := range specMethods {
		m := s.new()
		if c, id := m.IDs(); c != s.classID || id != s.methodID || m.Name() != s.name {
			t.Errorf("%s: ids %d/%d name %q", s.name, c, id, m.Name())
		}
	}
}

func TestMethodFlags(t *testing.T) {
	for _, c := range []struct {
		m             Method
		sync, content bool
	}{
		{&BasicPublish{}, false, true},
		{&BasicDeliver{}, false, true},
		{&BasicGetOK{}, true, true},
		{&BasicReturn{}, false, true},
		{&BasicAck{}, false, false},
		{&QueueDeclare{}, true, false},
		{&ConnectionBlocked{}, false, false},
		{&ChannelFlowOK{}, false, false},
	} {
		if c.m.Synchronous() != c.sync || c.m.HasContent() != c.content {
			t.Errorf("%s: sync=%v content=%v", c.m.Name(), c.m.Synchronous(), c.m.HasContent())
		}
	}
	// RabbitMQ's ids that differ from the pattern.
	if c, id := (&ExchangeUnbindOK{}).IDs(); c != 40 || id != 51 {
		t.Errorf("exchange.unbind-ok = %d/%d, want 40/51", c, id)
	}
	if !ReceivedByServer(ClassBasic, MethodBasicPublish) || ReceivedByServer(ClassBasic, MethodBasicDeliver) {
		t.Error("ReceivedByServer wrong for publish/deliver")
	}
	if !ReceivedByClient(ClassBasic, MethodBasicCancel) || !ReceivedByServer(ClassBasic, MethodBasicNack) {
		t.Error("RabbitMQ's server-sent cancel / client-sent nack missing")
	}
}

// TestEveryMethodRoundTrip encodes every method with random arguments,
// decodes it through ParseMethod and checks that both the value and the
// bytes survive; every proper prefix of the encoding must fail with
// ErrSyntax, and a trailing byte too.
func TestEveryMethodRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range specMethods {
		t.Run(s.name, func(t *testing.T) {
			for range 20 {
				m := s.new()
				fill(m, r)
				b, err := AppendMethod(nil, m)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ParseMethod(b)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, m) {
					t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
				}
				b2, err := AppendMethod(nil, got)
				if err != nil || !bytes.Equal(b, b2) {
					t.Fatalf("re-encode differs: %v", err)
				}
				for n := 4; n < len(b); n++ {
					if _, err := ParseMethod(b[:n]); !errors.Is(err, ErrSyntax) {
						t.Fatalf("prefix of %d/%d bytes: err = %v", n, len(b), err)
					}
				}
				if _, err := ParseMethod(append(b, 0)); !errors.Is(err, ErrSyntax) {
					t.Fatalf("trailing byte: err = %v", err)
				}
			}
		})
	}
}

func TestBitPacking(t *testing.T) {
	for _, c := range []struct {
		m    Method
		wire string // arguments only
	}{
		// queue.declare: reserved, queue "q", then five bits in one octet.
		{&QueueDeclare{Queue: "q", Passive: true, AutoDelete: true}, "0000 01 71 09 00000000"},
		{&QueueDeclare{Durable: true, Exclusive: true, NoWait: true}, "0000 00 16 00000000"},
		// exchange.declare: reserved, exchange, type, five bits.
		{&ExchangeDeclare{Exchange: "x", Type: "direct", Durable: true, Internal: true}, "0000 01 78 06 646972656374 0a 00000000"},
		// basic.nack: delivery tag, then multiple and requeue.
		{&BasicNack{DeliveryTag: 7, Multiple: true, Requeue: true}, "0000000000000007 03"},
		{&BasicNack{DeliveryTag: 7, Requeue: true}, "0000000000000007 02"},
		// basic.deliver: bits separated by other fields get their own octet.
		{&BasicDeliver{ConsumerTag: "c", DeliveryTag: 1, Redelivered: true, Exchange: "", RoutingKey: "k"}, "01 63 0000000000000001 01 00 01 6b"},
		// connection.open: reserved bit after two shortstrs.
		{&ConnectionOpen{VirtualHost: "/", Reserved2: true}, "01 2f 00 01"},
		// confirm.select: its field is spelled nowait in the spec.
		{&ConfirmSelect{NoWait: true}, "01"},
	} {
		got, err := c.m.AppendArgs(nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := unhex(t, c.wire); !bytes.Equal(got, want) {
			t.Errorf("%s: % x, want % x", c.m.Name(), got, want)
		}
	}
}

func TestUnusedBitsIgnored(t *testing.T) {
	m, err := ReadMethod(ClassBasic, MethodBasicAck, unhex(t, "0000000000000001 ff"))
	if err != nil {
		t.Fatal(err)
	}
	if a := m.(*BasicAck); a.DeliveryTag != 1 || !a.Multiple {
		t.Fatalf("%#v", a)
	}
}

// AppendMethodFrame writes the bytes AppendFrame(MethodFrame) writes, after
// whatever dst held, and leaves dst as it was when the method fails.
func TestAppendMethodFrame(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	prefix := []byte("prefix")
	for _, s := range specMethods {
		m := s.new()
		fill(m, r)
		f, err := MethodFrame(7, m)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		want, err := AppendFrame(append([]byte(nil), prefix...), f)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got, err := AppendMethodFrame(append([]byte(nil), prefix...), 7, m)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: AppendMethodFrame = %x, %v; want %x", s.name, got, err, want)
		}
	}
	dst := append(make([]byte, 0, 64), prefix...)
	got, err := AppendMethodFrame(dst, 1, &BasicPublish{Exchange: string(make([]byte, 256))})
	if !errors.Is(err, ErrFieldTooLong) || !bytes.Equal(got, prefix) {
		t.Fatalf("long shortstr: %q, %v", got, err)
	}
}

func TestMethodErrors(t *testing.T) {
	_, err := ReadMethod(60, 999, nil)
	if !errors.Is(err, ErrUnknownMethod) || ReplyCodeFor(err) != CommandInvalid {
		t.Errorf("unknown method: %v", err)
	}
	_, err = ParseMethod([]byte{0, 60, 0})
	if !errors.Is(err, ErrMalformedFrame) || ReplyCodeFor(err) != FrameError {
		t.Errorf("short method frame: %v", err)
	}
	_, err = AppendMethod(nil, &BasicPublish{Exchange: string(make([]byte, 256))})
	if !errors.Is(err, ErrFieldTooLong) {
		t.Errorf("long shortstr: %v", err)
	}
	_, err = MethodFrame(1, &QueueDeclare{Arguments: Table{{"x-max-length", 5}}})
	if !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("int argument: %v", err)
	}
}

func TestReplyCodes(t *testing.T) {
	for code, name := range map[uint16]string{
		200: "REPLY_SUCCESS", 311: "CONTENT_TOO_LARGE", 312: "NO_ROUTE", 313: "NO_CONSUMERS",
		320: "CONNECTION_FORCED", 402: "INVALID_PATH", 403: "ACCESS_REFUSED", 404: "NOT_FOUND",
		405: "RESOURCE_LOCKED", 406: "PRECONDITION_FAILED", 501: "FRAME_ERROR", 502: "SYNTAX_ERROR",
		503: "COMMAND_INVALID", 504: "CHANNEL_ERROR", 505: "UNEXPECTED_FRAME", 506: "RESOURCE_ERROR",
		530: "NOT_ALLOWED", 540: "NOT_IMPLEMENTED", 541: "INTERNAL_ERROR",
	} {
		if got := ReplyText(code); got != name {
			t.Errorf("ReplyText(%d) = %q, want %q", code, got, name)
		}
		if hard := code >= 500 || code == 320 || code == 402; IsHardError(code) != hard {
			t.Errorf("IsHardError(%d) = %v", code, !hard)
		}
	}
	if ReplyText(999) != "" {
		t.Error("ReplyText(999) not empty")
	}
	if ReplyCodeFor(nil) != 0 || ReplyCodeFor(errors.New("x")) != 0 || ReplyCodeFor(ErrBadProtocolHeader) != 0 {
		t.Error("ReplyCodeFor maps non-wire errors")
	}
	if ReplyCodeFor(fmt.Errorf("ctx: %w", ErrBadFrameEnd)) != FrameError {
		t.Error("ReplyCodeFor does not unwrap")
	}
}
