//go:build linux

package soak

import "testing"

// TestBodyAndTracker checks the checker's parts without a broker (it runs
// in `make test`).
func TestBodyAndTracker(t *testing.T) {
	for _, seq := range []uint64{0, 1, 99, 1<<32 + 7} {
		b := appendBody(nil, 17, seq)
		if len(b) < minBody || len(b) > maxBody {
			t.Fatalf("body of %d bytes", len(b))
		}
		q, s, ok := parseBody(b)
		if !ok || q != 17 || s != seq {
			t.Fatalf("parseBody(%q) = %d, %d, %v", b[:bodyPrefixLen], q, s, ok)
		}
		b[len(b)-1] ^= 1
		if _, _, ok := parseBody(b); ok {
			t.Fatalf("a flipped bit went unnoticed")
		}
	}
	q := &tracked{idx: 3}
	first := q.reserve(200)
	var acked []uint64
	for i := range uint64(200) {
		acked = append(acked, first+i)
	}
	q.ack(acked)
	for i := range uint64(200) {
		if i != 70 && i != 130 {
			q.deliver(appendBody(nil, 3, first+i))
		}
	}
	q.deliver(appendBody(nil, 3, 5))
	q.markDeleted([]uint64{6})
	q.deliver(appendBody(nil, 3, 6))
	q.deliver(appendBody(nil, 4, 7))
	q.deliver(appendBody(nil, 3, 900))
	n, firstLost := q.lost()
	if n != 2 || len(firstLost) != 2 || firstLost[0] != 70 || firstLost[1] != 130 {
		t.Fatalf("lost = %d %v, want 2 [70 130]", n, firstLost)
	}
	if q.dups != 2 || q.afterDel != 1 || q.misrouted != 1 || q.unexpected != 1 || q.nSeen != 198 {
		t.Fatalf("dups %d afterDel %d misrouted %d unexpected %d seen %d", q.dups, q.afterDel, q.misrouted, q.unexpected, q.nSeen)
	}
}
