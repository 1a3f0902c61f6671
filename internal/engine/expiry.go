package engine

import "container/heap"

// expiryOrder keeps a queue's messages in the order retention ends them:
// by enqueue time, then sequence number. Almost every message enters a
// queue later than the one before it (a send takes the current time and
// the next sequence number), and consumers delete in roughly that order
// too, so the order is mostly a FIFO: a binary heap paid O(log n) with a
// cache miss per level on every delete (under a 100k-message backlog,
// container/heap.Remove was 5% of the SQS server's CPU). Messages that
// arrive in order are appended to a slice and removed by clearing their
// slot (O(1)); the few that arrive out of order (dead-letter copies keep
// their original enqueue time, the wall clock can step back) go to a
// heap. The oldest message is the older of the slice's first live slot
// and the heap's top.
//
// The slice holds cleared slots until the head passes them; when cleared
// slots outnumber live ones it is compacted (amortised O(1) per removal),
// so its length stays within twice the live count plus a constant.
//
// A message in the slice has expiryIdx = its slot and lateIdx = -1; one in
// the heap has lateIdx = its heap index and expiryIdx = -1. Callers hold
// the queue lock.
type expiryOrder struct {
	fifo []*message // in (enqueuedAt, seq) order; nil = removed
	head int        // first live slot of fifo (len(fifo) when none)
	live int        // non-nil slots
	// lastAt, lastSeq: the key of the last message appended to fifo; a
	// message sorting after it may be appended.
	lastAt  int64
	lastSeq uint64
	late    lateHeap
}

// byEnqueuedAtLate is byEnqueuedAt for the out-of-order heap, which keeps
// its positions in lateIdx.
type byEnqueuedAtLate struct{ byEnqueuedAt }

func (byEnqueuedAtLate) index(m *message) *int32 { return &m.lateIdx }

type lateHeap = msgHeap[byEnqueuedAtLate]

// compactMin is the smallest slice compact bothers to rebuild.
const compactMin = 64

func (o *expiryOrder) len() int { return o.live + len(o.late) }

// push adds m (whose expiryIdx and lateIdx are -1).
func (o *expiryOrder) push(m *message) {
	if o.live > 0 && (m.enqueuedAt < o.lastAt || m.enqueuedAt == o.lastAt && m.seq < o.lastSeq) {
		heap.Push(&o.late, m)
		return
	}
	if o.live == 0 {
		o.fifo, o.head = o.fifo[:0], 0
	}
	m.expiryIdx = int32(len(o.fifo))
	o.fifo = append(o.fifo, m)
	o.live++
	o.lastAt, o.lastSeq = m.enqueuedAt, m.seq
}

// remove takes m out of the order.
func (o *expiryOrder) remove(m *message) {
	if m.lateIdx >= 0 {
		heap.Remove(&o.late, int(m.lateIdx))
		return
	}
	i := int(m.expiryIdx)
	if i < 0 {
		return
	}
	o.fifo[i] = nil
	m.expiryIdx = -1
	o.live--
	if o.live == 0 {
		clear(o.fifo[o.head:])
		o.fifo, o.head = o.fifo[:0], 0
		return
	}
	for o.fifo[o.head] == nil {
		o.head++
	}
	if dead := len(o.fifo) - o.live; dead > o.live && dead > compactMin {
		o.compact()
	}
}

// compact moves the live slots to the front of fifo, in order.
func (o *expiryOrder) compact() {
	n := 0
	for _, m := range o.fifo[o.head:] {
		if m != nil {
			o.fifo[n] = m
			m.expiryIdx = int32(n)
			n++
		}
	}
	clear(o.fifo[n:])
	o.fifo, o.head = o.fifo[:n], 0
}

// oldest returns the message retention ends first, or nil.
func (o *expiryOrder) oldest() *message {
	var m *message
	if o.live > 0 {
		m = o.fifo[o.head]
	}
	if len(o.late) > 0 && (m == nil || (byEnqueuedAt{}).less(o.late[0], m)) {
		m = o.late[0]
	}
	return m
}
