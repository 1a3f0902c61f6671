package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/internal/store"
)

func sampleBatch() *store.Batch {
	var b store.Batch
	b.Set([]byte("q/1"), []byte("body"))
	b.Set([]byte(""), nil)
	b.Delete([]byte("q/0"))
	b.SingleDelete([]byte("m/7"))
	b.DeleteRange([]byte("a"), []byte("b"))
	return &b
}

func TestBatchCodecRoundTrip(t *testing.T) {
	id := proposalID{node: 3, epoch: 0xfeedface, seq: 42}
	data, err := appendBatch(appendHeader(nil, entryBatch, id), sampleBatch())
	if err != nil {
		t.Fatal(err)
	}
	kind, gotID, body, err := decodeHeader(data)
	if err != nil || kind != entryBatch || gotID != id {
		t.Fatalf("header: %d %+v %v", kind, gotID, err)
	}
	var b store.Batch
	if err := decodeBatch(body, &b); err != nil {
		t.Fatal(err)
	}
	if !sameOps(b.Ops, sampleBatch().Ops) {
		t.Fatalf("decoded %+v", b.Ops)
	}
}

func TestBatchCodecRefuses(t *testing.T) {
	bad := &store.Batch{Ops: []store.Op{{Kind: 99, Key: []byte("k")}}}
	if _, err := appendBatch(nil, bad); err == nil {
		t.Fatal("unknown operation kind encoded")
	}
	var res store.Batch
	res.Set([]byte("\x00sluice/format"), []byte("2"))
	if _, err := appendBatch(nil, &res); err == nil {
		t.Fatal("reserved key encoded")
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"version", []byte{9, 0}},
		{"count lies", []byte{batchVersion, 100, 1, 0}},
		{"kind", []byte{batchVersion, 1, 99, 0}},
		{"key length", []byte{batchVersion, 1, 1, 50, 'k'}},
		{"trailing", []byte{batchVersion, 1, 2, 1, 'k', 0}},
	} {
		var b store.Batch
		if err := decodeBatch(tc.data, &b); !errors.Is(err, errCodec) {
			t.Errorf("%s: %v, want errCodec", tc.name, err)
		}
	}
}

// TestWriteRefusesBadBatch checks that the replicated store refuses an
// operation kind it does not know before it reaches the log.
func TestWriteRefusesBadBatch(t *testing.T) {
	c := newCluster(t, 1)
	c.leader(-1)
	s := c.nodes[0].Store()
	if _, err := s.Write(&store.Batch{Ops: []store.Op{{Kind: 99, Key: []byte("k")}}}, true); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("unknown kind: %v, want store.ErrFailed", err)
	}
	var big store.Batch
	big.Set([]byte("big"), make([]byte, MaxEntrySize))
	if _, err := c.nodes[0].Store().Write(&big, true); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("oversized batch: %v, want ErrEntryTooLarge", err)
	}
	// The node is fine; a new view writes.
	if err := writeKV(c.nodes[0].Store(), "k", "v"); err != nil {
		t.Fatal(err)
	}
}

func sameOps(a, b []store.Op) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Kind != b[i].Kind || !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// FuzzBatchCodec decodes arbitrary bytes as an entry: it must never panic,
// and whatever decodes must encode to something that decodes the same.
func FuzzBatchCodec(f *testing.F) {
	good, _ := appendBatch(appendHeader(nil, entryBatch, proposalID{1, 2, 3}), sampleBatch())
	f.Add(good)
	empty, _ := appendBatch(appendHeader(nil, entryBatch, proposalID{1, 2, 4}), &store.Batch{})
	f.Add(empty)
	f.Add(appendHeader(nil, entryAdvertise, proposalID{2, 0, 1}))
	f.Add([]byte{entryBatch, 1})
	f.Add([]byte{batchVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		kind, id, body, err := decodeHeader(data)
		if err != nil {
			// Also try it as a bare batch.
			body, kind = data, entryBatch
		}
		if kind != entryBatch {
			return
		}
		var b store.Batch
		if err := decodeBatch(body, &b); err != nil {
			return
		}
		re, err := appendBatch(appendHeader(nil, entryBatch, id), &b)
		if err != nil {
			// Only a reserved key may be refused on the way back.
			return
		}
		_, id2, body2, err := decodeHeader(re)
		if err != nil || id2 != id {
			t.Fatalf("re-encoded header: %+v %v", id2, err)
		}
		var b2 store.Batch
		if err := decodeBatch(body2, &b2); err != nil || !sameOps(b.Ops, b2.Ops) {
			t.Fatalf("round trip changed the batch: %v", err)
		}
	})
}

func TestFrameTooLarge(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, MaxFrameSize+1)
	if _, _, err := readFrame(bytes.NewReader(hdr), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
}

func sampleMessage() *pb.Message {
	return &pb.Message{
		Type: pb.MessageType_MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Term: new(uint64(5)), Index: new(uint64(9)), Commit: new(uint64(8)),
		Entries: []*pb.Entry{{Term: new(uint64(5)), Index: new(uint64(10)), Data: []byte("x")}},
	}
}

// FuzzFrame feeds arbitrary bytes to the frame decoder: it must never
// panic, and every message it returns must frame and decode again equal.
func FuzzFrame(f *testing.F) {
	one, _ := appendFrame(nil, sampleMessage())
	f.Add(one)
	two, _ := appendFrame(append([]byte(nil), one...), &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum()})
	f.Add(two)
	f.Add(one[:len(one)-1])
	f.Add(binary.BigEndian.AppendUint32(nil, MaxFrameSize+1))
	f.Add([]byte{0, 0, 0, 2, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var buf []byte
		for {
			m, b, err := readFrame(r, buf)
			buf = b
			if err != nil {
				if errors.Is(err, io.EOF) && r.Len() != 0 {
					t.Fatalf("EOF with %d bytes left", r.Len())
				}
				return
			}
			fr, err := appendFrame(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			m2, _, err := readFrame(bytes.NewReader(fr), nil)
			if err != nil || !proto.Equal(m, m2) {
				t.Fatalf("re-framed message differs: %v", err)
			}
		}
	})
}

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	msgs := []*pb.Message{sampleMessage(), {Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(uint64(3))}}
	for _, m := range msgs {
		var err error
		if stream, err = appendFrame(stream, m); err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(stream)
	for _, want := range msgs {
		got, _, err := readFrame(r, nil)
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("got %v, %v", got, err)
		}
	}
	if _, _, err := readFrame(r, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v, want io.EOF", err)
	}
}
