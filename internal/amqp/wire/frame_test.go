package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

func reader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func TestReadProtocolHeader(t *testing.T) {
	if err := ReadProtocolHeader(strings.NewReader("AMQP\x00\x00\x09\x01")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"AMQP\x01\x01\x00\x09", "AMQP\x00\x00\x09\x00", "GET / HTTP/1.1\r\n"} {
		err := ReadProtocolHeader(strings.NewReader(bad))
		if !errors.Is(err, ErrBadProtocolHeader) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
	if err := ReadProtocolHeader(strings.NewReader("AMQP")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short header: %v", err)
	}
	if err := ReadProtocolHeader(strings.NewReader("")); !errors.Is(err, io.EOF) {
		t.Errorf("no header: %v", err)
	}
}

func TestHeartbeatBytes(t *testing.T) {
	// Errata §12: a heartbeat is exactly 08 0000 00000000 CE.
	want := unhex(t, "08 0000 00000000 ce")
	got, err := AppendFrame(nil, Heartbeat())
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("AppendFrame = % x, %v", got, err)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteFrame(w, Heartbeat()); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("WriteFrame = % x", buf.Bytes())
	}
	f, err := ReadFrame(reader(want), 4096)
	if err != nil || !reflect.DeepEqual(f, Heartbeat()) {
		t.Fatalf("ReadFrame = %#v, %v", f, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: FrameMethod, Channel: 0, Payload: []byte{0, 10, 0, 51}},
		{Type: FrameHeader, Channel: 2047, Payload: bytes.Repeat([]byte{1}, 14)},
		{Type: FrameBody, Channel: 65535, Payload: bytes.Repeat([]byte("x"), 4096-FrameOverhead)},
		{Type: FrameBody, Channel: 1},
		Heartbeat(),
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	var appended []byte
	for _, f := range frames {
		if err := WriteFrame(w, f); err != nil {
			t.Fatal(err)
		}
		var err error
		if appended, err = AppendFrame(appended, f); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	if !bytes.Equal(buf.Bytes(), appended) {
		t.Fatal("WriteFrame and AppendFrame disagree")
	}
	// Read back through a reader that returns one byte at a time.
	r := bufio.NewReader(iotest.OneByteReader(&buf))
	for _, want := range frames {
		got, err := ReadFrame(r, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	if _, err := ReadFrame(r, 4096); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		wire    string
		maxSize uint32
		want    error
	}{
		{"too large by one", "03 0001 00000ff9" + strings.Repeat("00", 0xff9) + "ce", 4096, ErrFrameTooLarge},
		{"huge size", "01 0000 ffffffff", 131072, ErrFrameTooLarge},
		{"bad frame end", "01 0000 00000004 000a0033 00", 4096, ErrBadFrameEnd},
		{"frame end missing", "03 0001 00000001 41 41", 4096, ErrBadFrameEnd},
		{"unknown type 4", "04 0000 00000000 ce", 4096, ErrUnknownFrameType},
		{"unknown type 0", "00 0000 00000000 ce", 4096, ErrUnknownFrameType},
		{"heartbeat payload", "08 0000 00000001 00 ce", 4096, ErrMalformedFrame},
		{"cut in header", "01 00", 4096, io.ErrUnexpectedEOF},
		{"cut in payload", "01 0000 00000004 000a", 4096, io.ErrUnexpectedEOF},
		{"cut before end", "01 0000 00000004 000a0033", 4096, io.ErrUnexpectedEOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadFrame(reader(unhex(t, c.wire)), c.maxSize)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want != io.ErrUnexpectedEOF && ReplyCodeFor(err) != FrameError {
				t.Fatalf("ReplyCodeFor = %d, want 501", ReplyCodeFor(err))
			}
		})
	}
	// Exactly frame_max is fine.
	exact := unhex(t, "03 0001 00000ff8"+strings.Repeat("00", 0xff8)+"ce")
	if _, err := ReadFrame(reader(exact), 4096); err != nil {
		t.Fatalf("frame of exactly frame_max: %v", err)
	}
}

// TestHugeSizeFieldDoesNotAllocate: with no frame_max (0), a size field of
// 4 GiB followed by a few bytes must fail without allocating 4 GiB.
func TestHugeSizeFieldDoesNotAllocate(t *testing.T) {
	b := unhex(t, "03 0001 ffffffff 0102030405")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(reader(b), 0)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 4*readChunk {
		t.Fatalf("allocated %d bytes for a 5-byte payload", n)
	}
}

func TestLargeFrameWithoutLimit(t *testing.T) {
	body := bytes.Repeat([]byte("abc"), readChunk) // three chunks
	b, err := AppendFrame(nil, Frame{Type: FrameBody, Channel: 1, Payload: body})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(reader(b), 0)
	if err != nil || !bytes.Equal(f.Payload, body) {
		t.Fatalf("err = %v, %d bytes", err, len(f.Payload))
	}
}

func TestAppendFrameUnknownType(t *testing.T) {
	if _, err := AppendFrame(nil, Frame{Type: 9}); !errors.Is(err, ErrUnknownFrameType) {
		t.Fatal(err)
	}
	w := bufio.NewWriter(io.Discard)
	if err := WriteFrame(w, Frame{Type: 0}); !errors.Is(err, ErrUnknownFrameType) {
		t.Fatal(err)
	}
}
