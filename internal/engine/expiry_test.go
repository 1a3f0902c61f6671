package engine

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// TestExpiryOrderAgainstModel drives expiryOrder with random pushes
// (mostly in order, some late, some with equal times) and removals (mostly
// the oldest, some anywhere) and checks after every step that oldest() is
// the minimum by (enqueuedAt, seq) of what is held, that len() counts it,
// and that every held message's index fields point at it.
func TestExpiryOrderAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		var o expiryOrder
		held := map[*message]bool{}
		var seq uint64
		now := int64(1000)
		for step := 0; step < 5000; step++ {
			switch k := r.IntN(10); {
			case k < 5 || len(held) == 0: // push
				seq++
				at := now
				switch r.IntN(10) {
				case 0:
					at = now - int64(r.IntN(500)) // a dead-letter copy, a clock step back
				case 1, 2:
					// same time as the previous message
				default:
					now += int64(r.IntN(3))
					at = now
				}
				m := &message{seq: seq, enqueuedAt: at, expiryIdx: -1, lateIdx: -1}
				o.push(m)
				held[m] = true
			case k < 8: // consume the oldest
				m := o.oldest()
				o.remove(m)
				delete(held, m)
			default: // delete one anywhere
				for m := range held {
					o.remove(m)
					delete(held, m)
					break
				}
			}
			var want *message
			for m := range held {
				if want == nil || (byEnqueuedAt{}).less(m, want) {
					want = m
				}
				switch {
				case m.expiryIdx >= 0 && m.lateIdx < 0:
					if o.fifo[m.expiryIdx] != m {
						t.Fatalf("seed %d step %d: slot %d does not hold seq %d", seed, step, m.expiryIdx, m.seq)
					}
				case m.lateIdx >= 0 && m.expiryIdx < 0:
					if o.late[m.lateIdx] != m {
						t.Fatalf("seed %d step %d: heap index %d does not hold seq %d", seed, step, m.lateIdx, m.seq)
					}
				default:
					t.Fatalf("seed %d step %d: seq %d has expiryIdx %d lateIdx %d", seed, step, m.seq, m.expiryIdx, m.lateIdx)
				}
			}
			if got := o.oldest(); got != want {
				t.Fatalf("seed %d step %d: oldest %+v, want %+v", seed, step, got, want)
			}
			if o.len() != len(held) {
				t.Fatalf("seed %d step %d: len %d, holding %d", seed, step, o.len(), len(held))
			}
			if len(o.fifo) > 2*o.live+compactMin+1 {
				t.Fatalf("seed %d step %d: %d slots for %d live messages", seed, step, len(o.fifo), o.live)
			}
		}
	}
}

// BenchmarkExpiryBacklog: one op is what a send and its delete cost the
// retention order with a 100,000-message backlog (push the newest, remove
// the oldest), for expiryOrder and for the binary heap it replaced.
func BenchmarkExpiryBacklog(b *testing.B) {
	const backlog = 100_000
	newMsgs := func(n int) []*message {
		msgs := make([]*message, backlog+n)
		for i := range msgs {
			msgs[i] = &message{seq: uint64(i), enqueuedAt: int64(i), expiryIdx: -1, lateIdx: -1}
		}
		return msgs
	}
	b.Run("order", func(b *testing.B) {
		msgs := newMsgs(b.N)
		var o expiryOrder
		for _, m := range msgs[:backlog] {
			o.push(m)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			o.push(msgs[backlog+i])
			o.remove(o.oldest())
		}
	})
	b.Run("heap", func(b *testing.B) {
		msgs := newMsgs(b.N)
		var h msgHeap[byEnqueuedAt]
		for _, m := range msgs[:backlog] {
			heap.Push(&h, m)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			heap.Push(&h, msgs[backlog+i])
			heap.Remove(&h, 0)
		}
	})
}
