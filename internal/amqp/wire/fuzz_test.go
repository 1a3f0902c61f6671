package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// The fuzz targets check that no input panics, that decoders reject rather
// than allocate for lengths the input cannot back (bounded by the fuzzer's
// memory limit), and that whatever decodes re-encodes to a fixed point of
// the same length as the input.

func FuzzReadFrame(f *testing.F) {
	f.Add(unhex(f, goldenConnectionStart))
	f.Add(unhex(f, goldenPublish))
	f.Add([]byte(heartbeatFrame))
	f.Add(unhex(f, "01 0000 ffffffff"))
	f.Add(unhex(f, "03 0001 00000001 41 00"))
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range specMethods {
		m := s.new()
		fill(m, r)
		if fr, err := MethodFrame(1, m); err == nil && len(fr.Payload)+FrameOverhead <= FrameMinSize {
			b, _ := AppendFrame(nil, fr)
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, maxSize := range []uint32{FrameMinSize, 131072} {
			r := bufio.NewReader(bytes.NewReader(data))
			var again []byte
			for {
				fr, err := ReadFrame(r, maxSize)
				if err != nil {
					break
				}
				if uint64(len(fr.Payload))+FrameOverhead > uint64(maxSize) {
					t.Fatalf("frame of %d bytes passed frame_max %d", len(fr.Payload), maxSize)
				}
				if again, err = AppendFrame(again, fr); err != nil {
					t.Fatal(err)
				}
				switch fr.Type {
				case FrameMethod:
					checkMethodPayload(t, fr.Payload)
				case FrameHeader:
					checkContentHeader(t, fr.Payload)
				}
			}
			// Frames read back-to-back re-encode to exactly the bytes consumed.
			if !bytes.HasPrefix(data, again) {
				t.Fatalf("re-encoded frames are not a prefix of the input")
			}
		}
	})
}

func checkMethodPayload(t *testing.T, p []byte) {
	m, err := ParseMethod(p)
	if err != nil {
		return
	}
	b, err := AppendMethod(nil, m)
	if err != nil {
		t.Fatalf("%s decoded but does not encode: %v", m.Name(), err)
	}
	if len(b) != len(p) {
		t.Fatalf("%s: %d bytes re-encode to %d", m.Name(), len(p), len(b))
	}
	m2, err := ParseMethod(b)
	if err != nil {
		t.Fatalf("%s: re-encoding does not decode: %v", m.Name(), err)
	}
	if b2, _ := AppendMethod(nil, m2); !bytes.Equal(b, b2) {
		t.Fatalf("%s: encoding is not stable", m.Name())
	}
}

func checkContentHeader(t *testing.T, p []byte) {
	h, err := ParseContentHeader(p)
	if err != nil {
		return
	}
	b, err := AppendContentHeader(nil, &h)
	if err != nil {
		t.Fatalf("header decoded but does not encode: %v", err)
	}
	if len(b) != len(p) {
		t.Fatalf("header of %d bytes re-encodes to %d", len(p), len(b))
	}
	h2, err := ParseContentHeader(b)
	if err != nil {
		t.Fatalf("re-encoded header does not decode: %v", err)
	}
	if b2, _ := AppendContentHeader(nil, &h2); !bytes.Equal(b, b2) {
		t.Fatal("header encoding is not stable")
	}
}

func FuzzTable(f *testing.F) {
	all, err := AppendTable(nil, allTypesTable())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(all)
	f.Add(unhex(f, "00000000"))
	f.Add(unhex(f, "00000008 01 6b 53 ffffffff 00"))
	for _, c := range fieldValueCases {
		v := unhex(f, c.wire)
		f.Add(append([]byte{0, 0, 0, byte(2 + len(v)), 1, 'k'}, v...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := ParseTable(data)
		if err == nil {
			b, err := AppendTable(nil, tab)
			if err != nil {
				t.Fatalf("decoded table does not encode: %v", err)
			}
			// Byte-exact except a non-0/1 boolean octet, so compare lengths
			// and the fixed point.
			if len(b) != len(data) {
				t.Fatalf("%d bytes re-encode to %d", len(data), len(b))
			}
			tab2, err := ParseTable(b)
			if err != nil {
				t.Fatalf("re-encoded table does not decode: %v", err)
			}
			if b2, _ := AppendTable(nil, tab2); !bytes.Equal(b, b2) {
				t.Fatal("table encoding is not stable")
			}
		}
		// The same bytes as an AMQPLAIN body (no length prefix).
		if len(data) >= 4 {
			if tab, err := ParseTableBody(data[4:]); err == nil {
				b, err := AppendTable(nil, tab)
				if err != nil || len(b) != len(data) {
					t.Fatalf("table body re-encodes to %d bytes, %v", len(b), err)
				}
			}
		}
	})
}

func FuzzReadMethod(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range specMethods {
		m := s.new()
		f.Add(s.classID, s.methodID, mustArgs(f, m))
		fill(m, r)
		f.Add(s.classID, s.methodID, mustArgs(f, m))
	}
	f.Add(uint16(60), uint16(999), []byte{})
	f.Fuzz(func(t *testing.T, classID, methodID uint16, args []byte) {
		if _, err := ReadMethod(classID, methodID, args); err != nil {
			return
		}
		p := binary.BigEndian.AppendUint16(nil, classID)
		p = binary.BigEndian.AppendUint16(p, methodID)
		checkMethodPayload(t, append(p, args...))
	})
}

func mustArgs(f *testing.F, m Method) []byte {
	b, err := m.AppendArgs(nil)
	if err != nil {
		f.Fatal(err)
	}
	return b
}
