//go:build linux

package soak

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Message bodies are self-describing: "q=QQQQ s=SSSSSSSSSS " followed by
// letters drawn from a generator seeded with (queue, seq), 256–1024 bytes
// in all. A receiver recomputes the body from its prefix, so a delivery
// from the wrong queue, of a message never sent, or with altered bytes is
// caught without keeping the bodies.
const (
	bodyPrefixLen = len("q=0000 s=0000000000 ")
	minBody       = 256
	maxBody       = 1024
)

func mix(q int, seq uint64) uint64 {
	// splitmix64 of the pair.
	x := uint64(q)<<44 ^ seq ^ 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func bodyLen(q int, seq uint64) int {
	return minBody + int(mix(q, seq)%uint64(maxBody-minBody+1))
}

// appendBody appends the body of message seq of queue q to dst.
func appendBody(dst []byte, q int, seq uint64) []byte {
	n := bodyLen(q, seq)
	dst = fmt.Appendf(dst, "q=%04d s=%010d ", q, seq)
	x := mix(q, seq) | 1
	for i := bodyPrefixLen; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		dst = append(dst, 'a'+byte(x%26))
	}
	return dst
}

// parseBody returns the queue and sequence number a body claims, and
// whether the whole body is exactly what appendBody makes for them.
func parseBody(b []byte) (q int, seq uint64, ok bool) {
	if len(b) < bodyPrefixLen || string(b[:2]) != "q=" || string(b[6:9]) != " s=" || b[19] != ' ' {
		return 0, 0, false
	}
	for _, c := range b[2:6] {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		q = q*10 + int(c-'0')
	}
	for _, c := range b[9:19] {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		seq = seq*10 + uint64(c-'0')
	}
	want := appendBody(make([]byte, 0, maxBody), q, seq)
	return q, seq, string(want) == string(b)
}

// bitset is a growable set of sequence numbers.
type bitset []uint64

func (b *bitset) set(i uint64) (was bool) {
	w := int(i / 64)
	for w >= len(*b) {
		*b = append(*b, 0)
	}
	m := uint64(1) << (i % 64)
	was = (*b)[w]&m != 0
	(*b)[w] |= m
	return was
}

func (b bitset) has(i uint64) bool {
	w := int(i / 64)
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

// tracked is one queue as the test sees it: which sequence numbers were
// handed out, acknowledged by the broker (send OK or publisher confirm),
// delivered, and certainly deleted (a delete acknowledged while the
// receive's lease was certainly still running).
type tracked struct {
	idx  int
	name string
	kind string // backlog, hot, idle, amqp
	url  string // SQS queue URL

	next atomic.Uint64 // sequence numbers handed out: [0, next)

	mu         sync.Mutex
	acked      bitset
	seen       bitset
	deleted    bitset
	nAcked     uint64
	nSeen      uint64 // distinct
	dups       uint64 // deliveries of a message already delivered
	afterDel   uint64 // deliveries of a message certainly deleted before
	unexpected uint64 // deliveries of sequence numbers never handed out
	misrouted  uint64 // bodies naming another queue
	corrupt    uint64 // bodies that are not what was sent
}

// reserve hands out n consecutive sequence numbers.
func (q *tracked) reserve(n int) uint64 { return q.next.Add(uint64(n)) - uint64(n) }

func (q *tracked) ack(seqs []uint64) {
	q.mu.Lock()
	for _, s := range seqs {
		if !q.acked.set(s) {
			q.nAcked++
		}
	}
	q.mu.Unlock()
}

// deliver records one delivery of body and returns its sequence number
// and whether it is one of this queue's messages.
func (q *tracked) deliver(body []byte) (uint64, bool) {
	qi, seq, ok := parseBody(body)
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case !ok:
		q.corrupt++
		return 0, false
	case qi != q.idx:
		q.misrouted++
		return 0, false
	case seq >= q.next.Load():
		q.unexpected++
		return 0, false
	}
	if q.deleted.has(seq) {
		q.afterDel++
	}
	if q.seen.set(seq) {
		q.dups++
	} else {
		q.nSeen++
	}
	return seq, true
}

func (q *tracked) markDeleted(seqs []uint64) {
	q.mu.Lock()
	for _, s := range seqs {
		q.deleted.set(s)
	}
	q.mu.Unlock()
}

// lost counts acknowledged messages never delivered.
func (q *tracked) lost() (n uint64, first []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for w, word := range q.acked {
		var s uint64
		if w < len(q.seen) {
			s = q.seen[w]
		}
		miss := word &^ s
		for miss != 0 {
			n++
			bit := miss & -miss
			if len(first) < 5 {
				for i := uint64(0); i < 64; i++ {
					if bit == 1<<i {
						first = append(first, uint64(w)*64+i)
					}
				}
			}
			miss &^= bit
		}
	}
	return n, first
}
