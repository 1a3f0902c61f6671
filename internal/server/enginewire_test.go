package server

import (
	"bytes"
	"encoding/gob"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// fill sets every settable field under v: with full, each to a value
// other than its zero (a slice gets two elements, a pointer a value);
// otherwise at random, zero values and empty slices included. Times are
// instants in UTC (what the wire gives back).
func fill(t testing.TB, v reflect.Value, r *rand.Rand, full bool) {
	t.Helper()
	if !full && v.Kind() != reflect.Struct && r.IntN(4) == 0 {
		v.SetZero()
		return
	}
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Unix(r.Int64N(1<<36)-1<<35, r.Int64N(1e9)).UTC()))
		return
	}
	switch v.Kind() {
	case reflect.String:
		b := make([]byte, 1+r.IntN(12))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		v.SetString(string(b))
	case reflect.Bool:
		v.SetBool(full || r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := 1 + r.Int64N(min(int64(1)<<(v.Type().Bits()-2), 1<<40))
		if r.IntN(2) == 0 {
			n = -n
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1 + r.Uint64N(1<<(v.Type().Bits()-1)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1 + r.Float64())
	case reflect.Array:
		for i := range v.Len() {
			fill(t, v.Index(i), r, true)
		}
	case reflect.Slice:
		n := 2
		if !full {
			n = r.IntN(4)
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(t, s.Index(i), r, full)
			if s.Index(i).IsZero() {
				fill(t, s.Index(i), r, true)
			}
		}
		if n > 0 {
			v.Set(s)
		} else {
			v.SetZero()
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, r, true)
			fill(t, e, r, true)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), r, full)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), r, full)
			}
		}
	default:
		t.Fatalf("fill: no value for a field of kind %v (%v)", v.Kind(), v.Type())
	}
}

// TestEngineWireRoundTrip: every field of an engine call and of its
// answer, the engine types they carry included, comes back as it was sent
// through the binary wire — filled in whole (a field the wire forgot, or
// one added to those types later and not to the wire, fails this) and at
// random. A sent body arrives lent (BodyBorrowed); times come back as the
// same instants.
func TestEngineWireRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		full := i == 0
		var c engineCall
		fill(t, reflect.ValueOf(&c).Elem(), r, full)
		got, err := decodeEngineCallWire(encodeEngineCall(&c))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		for j := range c.Msgs {
			c.Msgs[j].BodyBorrowed = true // the wire lends every sent body
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("call %d (full %v) came back as\n%+v\nsent\n%+v", i, full, got, c)
		}

		var rep engineReply
		fill(t, reflect.ValueOf(&rep).Elem(), r, full)
		if full || r.IntN(3) > 0 {
			rep.Info = engine.QueueInfo{} // as in every answer but a get-queue's
		}
		out, err := encodeEngineReply(&rep)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeEngineReplyWire(out)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		utc(reflect.ValueOf(&back.Info).Elem()) // gob gives Local for UTC
		if !reflect.DeepEqual(back, rep) {
			t.Fatalf("reply %d (full %v) came back as\n%+v\nsent\n%+v", i, full, back, rep)
		}
	}
	// An info filled in whole crosses too.
	var rep engineReply
	fill(t, reflect.ValueOf(&rep.Info).Elem(), r, true)
	out, err := encodeEngineReply(&rep)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeEngineReplyWire(out)
	if err != nil {
		t.Fatal(err)
	}
	utc(reflect.ValueOf(&back.Info).Elem())
	if !reflect.DeepEqual(back.Info, rep.Info) {
		t.Fatalf("info came back as %+v, sent %+v", back.Info, rep.Info)
	}
}

// utc turns every time under v into UTC.
func utc(v reflect.Value) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(v.Interface().(time.Time).UTC()))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				utc(v.Field(i))
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			utc(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			utc(v.Index(i))
		}
	}
}

// TestEngineWireTellsGobApart: no gob stream begins like the binary wire,
// so a leader reads either; its answer comes in the wire it was asked in
// (a caller of an older build reads gob alone); and a call turned into gob
// for a leader of an older build is the same call.
func TestEngineWireTellsGobApart(t *testing.T) {
	s, stop := startShardLeader(t, nil)
	defer stop()
	if _, _, err := s.eng.CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	call := engineCall{Op: opSend, Queue: "q", Msgs: []engine.Message{{Body: []byte("hello"), Priority: 3,
		Attributes: []engine.Attribute{{Name: "a", DataType: "String", StringValue: "b"}}}}}
	asGob, err := encodeGob(call)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		body     []byte
		wire     bool
		response string
	}{
		{"wire", encodeEngineCall(&call), true, "application/x-sluice-engine"},
		{"gob", asGob, false, "application/x-gob"},
	} {
		if isEngineWire(tc.body) != tc.wire {
			t.Fatalf("%s: told as wire %v", tc.name, !tc.wire)
		}
		req := httptest.NewRequest(http.MethodPost, ShardEnginePath, bytes.NewReader(tc.body))
		rec := httptest.NewRecorder()
		s.serveShardEngine(rec, req)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != tc.response || isEngineWire(rec.Body.Bytes()) != tc.wire {
			t.Fatalf("%s: answered %d %s (wire %v)", tc.name, rec.Code, rec.Header().Get("Content-Type"), isEngineWire(rec.Body.Bytes()))
		}
		if !tc.wire {
			// What a caller of an older build does with it.
			var rep engineReply
			if err := gob.NewDecoder(bytes.NewReader(rec.Body.Bytes())).Decode(&rep); err != nil || len(rep.Results) != 1 || rep.Results[0].MessageID == "" {
				t.Fatalf("gob answer: %+v, %v", rep, err)
			}
			continue
		}
		rep, err := decodeEngineReply(rec.Body.Bytes())
		if err != nil || len(rep.Results) != 1 || rep.Results[0].MessageID == "" || !rep.VisibleOK || rep.Visible != 1 {
			t.Fatalf("wire answer: %+v, %v", rep, err)
		}
	}

	old, err := EngineCallAsGob(encodeEngineCall(&call))
	if err != nil {
		t.Fatal(err)
	}
	var c engineCall
	if err := gob.NewDecoder(bytes.NewReader(old)).Decode(&c); err != nil {
		t.Fatalf("not gob: %v", err)
	}
	if !reflect.DeepEqual(c, call) {
		t.Fatalf("turned into gob: %+v, sent %+v", c, call)
	}
	if same, err := EngineCallAsGob(asGob); err != nil || !bytes.Equal(same, asGob) {
		t.Fatalf("gob turned into gob: %v", err)
	}

	// A version this build does not know is refused, not misread.
	bad := encodeEngineCall(&call)
	bad[len(engineWireMagic)] = engineWireVersion + 1
	rec := httptest.NewRecorder()
	s.serveShardEngine(rec, httptest.NewRequest(http.MethodPost, ShardEnginePath, bytes.NewReader(bad)))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("an unknown wire version: %d", rec.Code)
	}
	if info, err := s.eng.GetQueue("q"); err != nil || info.Visible != 2 {
		t.Fatalf("after the refused call: %+v, %v", info, err)
	}
}

// FuzzEngineWire: the binary wire's decoders take any bytes without a
// panic or an allocation beyond the input's size, and what they accept
// encodes to the same value again.
func FuzzEngineWire(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		var c engineCall
		fill(f, reflect.ValueOf(&c).Elem(), r, false)
		f.Add(encodeEngineCall(&c))
		var rep engineReply
		fill(f, reflect.ValueOf(&rep).Elem(), r, false)
		rep.Info = engine.QueueInfo{}
		out, err := encodeEngineReply(&rep)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(out)
	}
	f.Add(append(engineWireMagic[:], engineWireVersion, 0xff, 0xff, 0xff, 0xff, 0x0f))
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := decodeEngineCallWire(data); err == nil {
			again, err := decodeEngineCallWire(encodeEngineCall(&c))
			if err != nil || !reflect.DeepEqual(again, c) {
				t.Fatalf("a decoded call encodes to another: %+v, %v", again, err)
			}
		}
		if rep, err := decodeEngineReplyWire(data); err == nil {
			out, err := encodeEngineReply(&rep)
			if err != nil {
				t.Fatal(err)
			}
			again, err := decodeEngineReplyWire(out)
			utc(reflect.ValueOf(&again.Info).Elem())
			utc(reflect.ValueOf(&rep.Info).Elem())
			if err != nil || !reflect.DeepEqual(again, rep) {
				t.Fatalf("a decoded reply encodes to another: %+v, %v", again, err)
			}
		}
	})
}
