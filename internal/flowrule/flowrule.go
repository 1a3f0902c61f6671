// Package flowrule is the rule both protocol front-ends use to decide when
// publishers (AMQP basic.publish, SQS SendMessage) are slowed for a queue's
// consumers (issue #13): it holds them back while the backlog grows past a
// mark, not while an old backlog is drained.
//
// A depth rule alone ("slow the publishers while more than M messages are
// ready and consumers are attached") punishes the wrong night: consumers
// back from an outage find a backlog of millions, and a depth rule would
// hold every publisher until that backlog was drained, although the
// consumers are shrinking it. The rule here measures the backlog against a
// floor: the lowest backlog seen since consumers began to drain the queue
// (re-anchored at the backlog of the moment whenever the queue has no
// consumers, or when nothing looked at it for longer than Gap). A queue is
// over when its backlog is above both the mark and the floor plus half
// the mark (Over), and relieved once it is back at the higher of half the
// mark and the floor plus a quarter of the mark (Relieved). From an empty
// queue that is the depth rule (floor 0: over at the mark, relieved at
// half); over an old backlog it allows half a mark of growth above the
// lowest point its consumers have reached, so publishers are held only
// while they outrun the consumers, and then only by what they add.
//
// The package knows nothing of protocols; what "consumers are draining"
// means is the caller's (AMQP: the queue has consumers; SQS: a receive
// within the last second).
package flowrule

import (
	"sync/atomic"
	"time"
)

// Gap is the time without an observation after which Observe re-anchors
// the floor: what happened to the backlog meanwhile is unknown.
const Gap = time.Second

// seenGrain is how stale Trend.seen may be before Observe writes it again:
// it spares the shared cache line a write per publish.
const seenGrain = 10 * time.Millisecond

// Trend follows one queue's backlog floor. The zero value is ready for
// use (no floor yet); it is safe for concurrent use and lock-free.
type Trend struct {
	floor atomic.Int64 // the floor + 1; 0: none yet
	seen  atomic.Int64 // Unix nanoseconds of the last observation, to seenGrain
}

// Observe records n, the queue's backlog now, and returns the floor. With
// draining false (no consumers), with no floor yet, or when the last
// observation is older than Gap, the floor is re-anchored at n; otherwise
// it is lowered to n when n is below it.
func (t *Trend) Observe(n int, draining bool, now time.Time) int {
	if stale := t.touch(now); !draining || stale {
		t.floor.Store(int64(n) + 1)
		return n
	}
	return t.lower(n)
}

// Lower records n, the queue's backlog now, without knowing whether
// consumers are draining it: it lowers the floor to n when the floor is
// above n (a lower floor only makes the rule stricter), anchors it at n
// when there is none, and returns the floor.
func (t *Trend) Lower(n int, now time.Time) int {
	t.touch(now)
	return t.lower(n)
}

// touch notes an observation at now and reports whether the previous one
// is older than Gap (or there was none).
func (t *Trend) touch(now time.Time) bool {
	at := now.UnixNano()
	last := t.seen.Load()
	if at-last > int64(seenGrain) {
		t.seen.Store(at)
	}
	return at-last > int64(Gap)
}

func (t *Trend) lower(n int) int {
	for {
		f := t.floor.Load()
		if f != 0 && f-1 <= int64(n) {
			return int(f - 1)
		}
		if t.floor.CompareAndSwap(f, int64(n)+1) { // none yet, or above n
			return n
		}
	}
}

// Over reports whether a queue with backlog n and the given floor is over
// its mark: above mark and above floor + mark/2. mark ≤ 0 is never over.
func Over(n, floor, mark int) bool {
	return mark > 0 && n > max(mark, floor+mark/2)
}

// Relieved reports whether a queue with backlog n and the given floor is
// back under: at or under the higher of mark/2 and floor + mark/4.
func Relieved(n, floor, mark int) bool {
	return n <= max(mark/2, floor+mark/4)
}
