package wire

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// everyProperty sets all 14 basic properties.
func everyProperty() Properties {
	return Properties{
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		Headers:         allTypesTable(),
		DeliveryMode:    2,
		Priority:        9,
		CorrelationID:   "corr",
		ReplyTo:         "amq.rabbitmq.reply-to",
		Expiration:      "60000",
		MessageID:       "id-1",
		Timestamp:       1700000000,
		Type:            "order.created",
		UserID:          "guest",
		AppID:           "app",
		ClusterID:       "c",
	}
}

func TestPropertyFlags(t *testing.T) {
	// The 14 flags from bit 15 down, in the reference's order.
	flags := []uint16{FlagContentType, FlagContentEncoding, FlagHeaders, FlagDeliveryMode,
		FlagPriority, FlagCorrelationID, FlagReplyTo, FlagExpiration, FlagMessageID,
		FlagTimestamp, FlagType, FlagUserID, FlagAppID, FlagClusterID}
	for i, f := range flags {
		if f != 1<<(15-i) {
			t.Errorf("flag %d = %#04x", i, f)
		}
	}
	p := everyProperty()
	if got := p.PresentFlags(); got != 0xfffc {
		t.Errorf("PresentFlags = %#04x, want 0xfffc", got)
	}
}

func TestEachPropertyAlone(t *testing.T) {
	all := everyProperty()
	av := reflect.ValueOf(all)
	for i := 1; i < av.NumField(); i++ { // field 0 is Flags
		var p Properties
		reflect.ValueOf(&p).Elem().Field(i).Set(av.Field(i))
		h := ContentHeader{ClassID: ClassBasic, BodySize: 1, Properties: p}
		b, err := AppendContentHeader(nil, &h)
		if err != nil {
			t.Fatal(err)
		}
		wantFlag := uint16(1) << (15 - (i - 1))
		if got := uint16(b[12])<<8 | uint16(b[13]); got != wantFlag {
			t.Errorf("%s: flags %#04x, want %#04x", av.Type().Field(i).Name, got, wantFlag)
		}
		got, err := ParseContentHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		p.Flags = wantFlag
		if !reflect.DeepEqual(got.Properties, p) {
			t.Errorf("%s: got %#v", av.Type().Field(i).Name, got.Properties)
		}
	}
}

func TestContentHeaderRoundTrip(t *testing.T) {
	for _, h := range []ContentHeader{
		{ClassID: 60, BodySize: 0},
		{ClassID: 60, BodySize: 1 << 40, Properties: everyProperty()},
		// Present but empty: the flags carry what zero values cannot.
		{ClassID: 60, Properties: Properties{Flags: FlagContentType | FlagHeaders | FlagPriority, Headers: Table{}}},
		// Low flag bits are kept as they came (RabbitMQ ignores them).
		{ClassID: 60, Weight: 3, Properties: Properties{Flags: 0x0003}},
	} {
		b, err := AppendContentHeader(nil, &h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseContentHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		h.Properties.Flags = h.Properties.PresentFlags()
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("got %#v\nwant %#v", got, h)
		}
		b2, _ := AppendContentHeader(nil, &got)
		if !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs")
		}
	}
}

func TestContentHeaderErrors(t *testing.T) {
	_, err := ParseContentHeader(make([]byte, 13))
	if !errors.Is(err, ErrMalformedFrame) {
		t.Errorf("short header: %v", err)
	}
	// content-type flagged but absent.
	_, err = ParseContentHeader(unhex(t, "003c 0000 0000000000000000 8000"))
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("missing property: %v", err)
	}
	// trailing byte after the properties.
	_, err = ParseContentHeader(unhex(t, "003c 0000 0000000000000000 0000 00"))
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("trailing byte: %v", err)
	}
	h := ContentHeader{Properties: Properties{Headers: Table{{"k", 1}}}}
	if _, err := AppendContentHeader(nil, &h); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("bad header value: %v", err)
	}
}

func TestWriteContentSplitsBody(t *testing.T) {
	const frameMax = 4096
	body := bytes.Repeat([]byte{7}, 2*(frameMax-FrameOverhead)+1)
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	deliver := &BasicDeliver{ConsumerTag: "c", DeliveryTag: 1, RoutingKey: "q"}
	if err := WriteContent(w, 3, frameMax, deliver, nil, body); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	r := reader(buf.Bytes())
	var types []uint8
	var sizes []int
	var got []byte
	for {
		f, err := ReadFrame(r, frameMax)
		if err != nil {
			break
		}
		if f.Channel != 3 {
			t.Fatalf("channel %d", f.Channel)
		}
		types = append(types, f.Type)
		if f.Type == FrameBody {
			sizes = append(sizes, len(f.Payload))
			got = append(got, f.Payload...)
		}
		if f.Type == FrameHeader {
			h, err := ParseContentHeader(f.Payload)
			if err != nil || h.BodySize != uint64(len(body)) || h.ClassID != ClassBasic {
				t.Fatalf("header %#v %v", h, err)
			}
		}
	}
	if !reflect.DeepEqual(types, []uint8{1, 2, 3, 3, 3}) || !reflect.DeepEqual(sizes, []int{4088, 4088, 1}) {
		t.Fatalf("frames %v sizes %v", types, sizes)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("body differs")
	}
}

func TestWriteContentEmptyBody(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteContent(w, 1, 0, &BasicPublish{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	r := reader(buf.Bytes())
	n := 0
	for {
		f, err := ReadFrame(r, 0)
		if err != nil {
			break
		}
		if f.Type == FrameBody {
			t.Fatal("an empty body must have no body frames")
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d frames, want method + header", n)
	}
}

func TestWriteContentErrors(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteContent(w, 1, 0, &BasicAck{}, nil, nil); err == nil {
		t.Error("basic.ack accepted as content-carrying")
	}
	if err := WriteContent(w, 1, FrameOverhead, &BasicPublish{}, nil, []byte("x")); err == nil {
		t.Error("frame_max 8 accepted")
	}
	bad := &Properties{Headers: Table{{"k", 1}}}
	if err := WriteContent(w, 1, 0, &BasicPublish{}, bad, []byte("x")); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("bad headers: %v", err)
	}
	w.Flush()
	if buf.Len() != 0 {
		t.Errorf("failed writes left %d bytes on the stream", buf.Len())
	}
}
