package wire

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
)

// The golden frames below were computed by hand from the spec's frame and
// method layouts, not produced by this package or by another client.

// connection.start on channel 0: version 0-9, server-properties
// {product: "Sluice"}, mechanisms "PLAIN AMQPLAIN", locales "en_US".
const goldenConnectionStart = "" +
	"01 0000 00000038" + // method frame, channel 0, 56 payload bytes
	"000a 000a" + // class 10 connection, method 10 start
	"00 09" + // version-major 0, version-minor 9
	"00000013" + // server-properties: 19-byte table
	"07 70726f64756374" + // key "product"
	"53 00000006 536c75696365" + // 'S' "Sluice"
	"0000000e 504c41494e20414d51504c41494e" + // mechanisms "PLAIN AMQPLAIN"
	"00000005 656e5f5553" + // locales "en_US"
	"ce"

// basic.publish to the default exchange with routing key "q", then its
// content header (content-type text/plain, delivery-mode 2, 5-byte body)
// and one body frame "hello", all on channel 1.
const goldenPublish = "" +
	"01 0001 0000000a" + // method frame, channel 1, 10 bytes
	"003c 0028" + // class 60 basic, method 40 publish
	"0000" + // reserved-1
	"00" + // exchange ""
	"01 71" + // routing-key "q"
	"00" + // mandatory=false, immediate=false
	"ce" +
	"02 0001 0000001a" + // header frame, channel 1, 26 bytes
	"003c 0000" + // class 60, weight 0
	"0000000000000005" + // body size 5
	"9000" + // flags: content-type (bit 15), delivery-mode (bit 12)
	"0a 746578742f706c61696e" + // content-type "text/plain"
	"02" + // delivery-mode 2 (persistent)
	"ce" +
	"03 0001 00000005 68656c6c6f ce" // body frame "hello"

func TestGoldenConnectionStart(t *testing.T) {
	want := unhex(t, goldenConnectionStart)
	m := &ConnectionStart{
		VersionMajor:     0,
		VersionMinor:     9,
		ServerProperties: Table{{"product", "Sluice"}},
		Mechanisms:       "PLAIN AMQPLAIN",
		Locales:          "en_US",
	}
	f, err := MethodFrame(0, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encode:\n got % x\nwant % x", got, want)
	}
	rf, err := ReadFrame(reader(want), FrameMinSize)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := ParseMethod(rf.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dm, m) {
		t.Fatalf("decode = %#v", dm)
	}
}

func TestGoldenPublish(t *testing.T) {
	want := unhex(t, goldenPublish)
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	props := &Properties{ContentType: "text/plain", DeliveryMode: 2}
	if err := WriteContent(w, 1, 131072, &BasicPublish{RoutingKey: "q"}, props, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("encode:\n got % x\nwant % x", buf.Bytes(), want)
	}

	r := reader(want)
	mf, err := ReadFrame(r, 131072)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseMethod(mf.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := m.(*BasicPublish); !ok || p.RoutingKey != "q" || p.Exchange != "" || p.Mandatory || p.Immediate {
		t.Fatalf("method = %#v", m)
	}
	hf, err := ReadFrame(r, 131072)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseContentHeader(hf.Payload)
	if err != nil {
		t.Fatal(err)
	}
	wantH := ContentHeader{ClassID: 60, BodySize: 5, Properties: Properties{
		Flags: FlagContentType | FlagDeliveryMode, ContentType: "text/plain", DeliveryMode: 2,
	}}
	if !reflect.DeepEqual(h, wantH) {
		t.Fatalf("header = %#v", h)
	}
	bf, err := ReadFrame(r, 131072)
	if err != nil || bf.Type != FrameBody || bf.Channel != 1 || string(bf.Payload) != "hello" {
		t.Fatalf("body = %+v, %v", bf, err)
	}
}
