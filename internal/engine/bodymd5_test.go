package engine

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// TestBodyMD5KeptWithTheMessage: a digest given at send comes back with
// every delivery, after a restart (it is in the content record) and on
// the dead-letter copy; a message sent without one is delivered without
// one.
func TestBodyMD5KeptWithTheMessage(t *testing.T) {
	f := newFixture(t)
	f.withDLQ(1, nil)
	withSum := Message{Body: []byte("hashed"), BodyMD5: md5.Sum([]byte("hashed")), BodyMD5Set: true}
	f.send("q", withSum, body("plain"))
	f.restart()

	check := func(where string, ds []Delivery) {
		t.Helper()
		if len(ds) != 2 {
			t.Fatalf("%s: %d deliveries", where, len(ds))
		}
		for _, d := range ds {
			switch string(d.Body) {
			case "hashed":
				if !d.BodyMD5Set || d.BodyMD5 != withSum.BodyMD5 {
					t.Fatalf("%s: digest %x set=%v, want %x", where, d.BodyMD5, d.BodyMD5Set, withSum.BodyMD5)
				}
			case "plain":
				if d.BodyMD5Set || d.BodyMD5 != ([16]byte{}) {
					t.Fatalf("%s: a message sent without a digest has %x", where, d.BodyMD5)
				}
			default:
				t.Fatalf("%s: body %q", where, d.Body)
			}
		}
	}
	check("after restart", f.recv("q", 10, time.Second))
	// Past the visibility timeout the next receive moves both to the DLQ
	// (MaxReceiveCount 1).
	f.clk.Advance(2 * time.Second)
	if got := f.recv("q", 10, time.Second); len(got) != 0 {
		t.Fatalf("source still delivers %v", bodies(got))
	}
	f.restart()
	check("dead-letter copies after restart", f.recv("dlq", 10, time.Second))
}

// oldContentRecord is a content record written by the engine before the
// body digest existed (tag 8): generated with main at 38bb3ad for id
// 01…10, body "hello, old store", sender 000000000000, all three times
// 1,700,000,000 s, no attributes or extensions.
const oldContentRecord = "010102030405060708090a0b0c0d0e0f108080d0e2c6bfce972f8080d0e2c6bfce972f8080d0e2c6bfce972f00000c30303030303030303030303000000000001068656c6c6f2c206f6c642073746f7265"

// TestOldContentRecordWithoutBodyMD5: a store written before tag 8 opens,
// and its message is delivered whole, marked as having no digest (the SQS
// front-end then hashes the body itself).
func TestOldContentRecordWithoutBodyMD5(t *testing.T) {
	rec, err := hex.DecodeString(oldContentRecord)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.create("q", nil)
	q, _ := f.e.lookup("q")
	var b store.Batch
	b.Set(messageKey(q.id, 1, kindContent), rec)
	if _, err := f.st.Write(&b, true); err != nil {
		t.Fatal(err)
	}
	f.restart()
	ds := f.recv("q", 10, time.Minute)
	if len(ds) != 1 || string(ds[0].Body) != "hello, old store" || ds[0].MessageID != FormatID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) {
		t.Fatalf("old record delivered as %+v", ds)
	}
	if ds[0].BodyMD5Set {
		t.Fatalf("old record has a digest %x", ds[0].BodyMD5)
	}
	// The same message re-encoded today is byte for byte the old record:
	// the tag is written only for messages that carry a digest.
	var m message
	if _, err := decodeContent(&m, rec); err != nil {
		t.Fatal(err)
	}
	m.group = &group{}
	if got := encodeContent(&m); !bytes.Equal(got, rec) {
		t.Fatalf("re-encoded\n%x\nwant\n%x", got, rec)
	}
}

// FuzzDecodeContent: a content record either decodes or fails with an
// error, never panics; what decodes re-encodes to a record that decodes to
// the same body and digest.
func FuzzDecodeContent(f *testing.F) {
	old, _ := hex.DecodeString(oldContentRecord)
	f.Add(old)
	m := &message{id: newID(), body: []byte("b"), sender: "s", group: &group{id: "g"}, hasMD5: true, bodyMD5: md5.Sum([]byte("b")), ttlAt: 5}
	m.attrs = []Attribute{{Name: "n", DataType: "Binary", BinaryValue: []byte{1}}}
	f.Add(encodeContent(m))
	f.Add(append(append([]byte(nil), old...), tagBodyMD5, 3, 1, 2, 3)) // a digest of the wrong length
	f.Add(append(append([]byte(nil), old...), 99, 1, 0))               // an unknown tag
	f.Fuzz(func(t *testing.T, b []byte) {
		var m message
		g, err := decodeContent(&m, b)
		if err != nil {
			return
		}
		m.group = &group{id: g}
		var again message
		if _, err := decodeContent(&again, encodeContent(&m)); err != nil {
			t.Fatalf("re-encoded record fails: %v", err)
		}
		if !bytes.Equal(again.body, m.body) || again.hasMD5 != m.hasMD5 || again.bodyMD5 != m.bodyMD5 {
			t.Fatalf("body %q md5 %v %x became %q %v %x", m.body, m.hasMD5, m.bodyMD5, again.body, again.hasMD5, again.bodyMD5)
		}
	})
}

// TestBorrowedBodyIsCopied: a body lent for the call (Message.BodyBorrowed,
// as the SQS front-end passes a slice of its request buffer) is not
// retained: overwriting the caller's bytes after Send changes nothing that
// is delivered, whether the engine keeps the body as a slice of its record
// (large bodies), as a copy (small ones), or dead-letters a message a full
// queue rejected.
func TestBorrowedBodyIsCopied(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", nil)
	f.create("q", nil)
	f.create("full", func(c *QueueConfig) {
		c.MaxLength = 1
		c.Overflow = OverflowRejectPublishDLX
		c.DeadLetter = &DeadLetterPolicy{Target: "dlq"}
	})
	large := bytes.Repeat([]byte("L"), 4096)
	small := []byte("small")
	lent := func(b []byte) Message { return Message{Body: b, BodyBorrowed: true} }
	f.send("q", lent(large), lent(small))
	f.send("full", body("first"))
	rejected := []byte("rejected")
	if res, _ := f.e.Send("full", []Message{lent(rejected)}); len(res) != 1 || res[0].Err == nil {
		t.Fatalf("the full queue took it: %+v", res)
	}
	for _, b := range [][]byte{large, small, rejected} {
		for i := range b {
			b[i] = 'X'
		}
	}
	got := map[string]bool{}
	for _, q := range []string{"q", "dlq"} {
		for _, d := range f.recv(q, 10, time.Minute) {
			got[string(d.Body)] = true
		}
	}
	for _, want := range []string{strings.Repeat("L", 4096), "small", "rejected"} {
		if !got[want] {
			t.Errorf("%.10q… not delivered intact; got %d bodies", want, len(got))
		}
	}
}
