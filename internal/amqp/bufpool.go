package amqp

import (
	"math/bits"
	"sync"
)

// frameBufs recycles the buffers deliveries are encoded into. A consumer
// encodes every delivery (method, header and body frames) into one
// buffer, which the connection's writer owns once it is queued; after the
// socket write the writer gives it back here, so a busy consumer encodes
// into the same few buffers instead of allocating one per message (the
// largest allocation per delivered message before this).
//
// Buffers are pooled by power-of-two capacity, from 512 bytes to 64 KiB;
// a delivery larger than that gets a buffer of its own, which is not
// kept. sync.Pool lets the garbage collector take buffers that are not
// reused, so an idle broker holds none.
type frameBufs struct {
	classes [frameBufClasses]sync.Pool
}

const (
	frameBufMinShift = 9  // 512 bytes
	frameBufMaxShift = 16 // 64 KiB
	frameBufClasses  = frameBufMaxShift - frameBufMinShift + 1
)

// get returns a buffer of length 0 and capacity at least n: a pooled one
// (ok true: give it back with put once nothing reads it) when n fits a
// class, else a new one (ok false).
func (p *frameBufs) get(n int) (buf *[]byte, ok bool) {
	if n <= 0 || n > 1<<frameBufMaxShift {
		b := make([]byte, 0, max(n, 0))
		return &b, false
	}
	shift := max(bits.Len(uint(n-1)), frameBufMinShift)
	if v := p.classes[shift-frameBufMinShift].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:0]
		return b, true
	}
	b := make([]byte, 0, 1<<shift)
	return &b, true
}

// put gives back a buffer get returned with ok true. Its contents must
// no longer be read by anyone.
func (p *frameBufs) put(b *[]byte) {
	c := cap(*b)
	shift := bits.Len(uint(c)) - 1
	if c != 1<<shift || shift < frameBufMinShift || shift > frameBufMaxShift {
		return // not a pooled buffer's capacity: let it go
	}
	p.classes[shift-frameBufMinShift].Put(b)
}
