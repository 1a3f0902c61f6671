package engine

import (
	"bytes"
	"testing"
)

// FuzzDecodeState: a message state record, including the crash history
// (tagCrashes), either decodes or fails with an error; it never panics,
// and what decodes re-encodes to a record that decodes the same.
func FuzzDecodeState(f *testing.F) {
	m := &message{recvCount: 3, firstRecvAt: 1, visibleAt: 2, leaseAt: 1, receipt: 9, parked: true}
	f.Add(encodeState(m))
	m.extension().crashes = []int64{100, 200, 300}
	m.ext.failure = &FailureRecord{ErrorClass: "KeyError", Attempt: 3}
	f.Add(encodeState(m))
	f.Add([]byte{recordV1, 1, 2, 2, 2, 9, tagCrashes, 2, 5, 2})
	f.Add([]byte{recordV1, 0, 0, 0, 0, 0, tagCrashes, 1, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m message
		if err := decodeState(&m, b); err != nil {
			return
		}
		var again message
		if err := decodeState(&again, encodeState(&m)); err != nil {
			t.Fatalf("re-encoded record fails: %v", err)
		}
		if m.ext != nil && again.ext != nil && len(m.ext.crashes) != len(again.ext.crashes) {
			t.Fatalf("crashes %v became %v", m.ext.crashes, again.ext.crashes)
		}
	})
}

// FuzzDecodeQueue: a queue record (name, configuration, tags) either
// decodes or fails with an error; it never panics, and what decodes
// re-encodes to a record that decodes to the same queue.
func FuzzDecodeQueue(f *testing.F) {
	cfg := DefaultQueueConfig()
	f.Add(encodeQueue(&queueRecord{ID: 7, Name: "orders", Config: cfg, CreatedAt: 1, ModifiedAt: 2}))
	cfg.FIFO, cfg.ContentBasedDedup = true, true
	cfg.DeadLetter = &DeadLetterPolicy{Target: "orders-dlq.fifo", MaxReceiveCount: 5}
	f.Add(encodeQueue(&queueRecord{ID: 8, Name: "orders.fifo", Config: cfg, Tags: map[string]string{"team": "payments"}}))
	f.Add([]byte{recordV1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeQueue(b)
		if err != nil {
			return
		}
		again, err := decodeQueue(encodeQueue(r))
		if err != nil {
			t.Fatalf("re-encoded record fails: %v", err)
		}
		if again.ID != r.ID || again.Name != r.Name || again.Config.FIFO != r.Config.FIFO || len(again.Tags) != len(r.Tags) {
			t.Fatalf("record %+v became %+v", r, again)
		}
	})
}

// FuzzDecodeDedup: a FIFO deduplication record either decodes or fails
// with an error, never panics, and round-trips.
func FuzzDecodeDedup(f *testing.F) {
	f.Add(encodeDedup(&dedupEntry{msgID: [16]byte{1, 2, 3}, seq: 42, expiresAt: 1_700_000_300_000_000_000}))
	f.Add([]byte{recordV1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ent dedupEntry
		if err := decodeDedup(&ent, b); err != nil {
			return
		}
		var again dedupEntry
		if err := decodeDedup(&again, encodeDedup(&ent)); err != nil || again.msgID != ent.msgID || again.seq != ent.seq || again.expiresAt != ent.expiresAt {
			t.Fatalf("entry %+v became %+v (%v)", ent, again, err)
		}
	})
}

// FuzzDedupSuffix: the part of a dedup key after the queue id splits back
// into the id and group it was made of, whatever bytes they hold, and
// splitting arbitrary bytes never panics.
func FuzzDedupSuffix(f *testing.F) {
	f.Add("abc", "group", []byte("abc\x00group"))
	f.Add("a\x00\x01b", "g\x00h", []byte{1, 1, 1, 2, 0})
	f.Add("", "", []byte{1})
	f.Fuzz(func(t *testing.T, id, group string, raw []byte) {
		s := dedupSuffix(nil, id, group)
		gotID, gotGroup, ok := splitDedupSuffix(s)
		if !ok || gotID != id || gotGroup != group {
			t.Fatalf("(%q, %q) became (%q, %q, %v) through %x", id, group, gotID, gotGroup, ok, s)
		}
		if bytes.IndexByte(escapeDedupID(nil, id), 0) >= 0 {
			t.Fatalf("escaped id %q holds 0x00", id)
		}
		_, _, _ = splitDedupSuffix(raw)
	})
}

// FuzzDecodeTransfer: a transfer record (transfer.go) either decodes or
// fails with an error; it never panics, and what decodes re-encodes to a
// record that decodes the same. A mover hands its Record to another
// shard's import, which decodes it as a content record: that must not
// panic either.
func FuzzDecodeTransfer(f *testing.F) {
	n := &message{id: [16]byte{1}, body: []byte("poison"), recvCount: 2, group: &group{id: "g"}}
	f.Add(encodeTransfer(&Transfer{Target: "dlq", Source: "q", Reason: ReasonMaxReceives, Record: encodeContent(n)}))
	f.Add(encodeTransfer(&Transfer{Target: "q", Source: "dlq", Redrive: true}))
	f.Add([]byte{recordV1, 3, 'd', 'l', 'q'})
	key := transferKey(TransferID{9})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := decodeTransfer(key, b)
		if err != nil {
			return
		}
		y, err := decodeTransfer(key, encodeTransfer(&x))
		if err != nil {
			t.Fatalf("re-encoded record fails: %v", err)
		}
		if x.Target != y.Target || x.Source != y.Source || x.Reason != y.Reason || x.Redrive != y.Redrive || !bytes.Equal(x.Record, y.Record) {
			t.Fatalf("%+v became %+v", x, y)
		}
		var m message
		_, _ = decodeContent(&m, x.Record)
	})
}
