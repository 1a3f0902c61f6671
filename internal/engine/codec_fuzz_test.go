package engine

import "testing"

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
