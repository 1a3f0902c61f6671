package dashboard

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// refHistory is the plain layout the runs replace: every sample with its
// time, those of the timeline's last ticks kept.
type refHistory struct {
	ticks   []uint64
	samples []sample
}

// TestSeriesMatchesEverySample pushes random histories (idle stretches,
// changes at every tick, ticks that miss the queue) through a series and a
// plain list of samples, and asks both the same questions.
func TestSeriesMatchesEverySample(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := 1 + rng.IntN(20)
		tl := newTimeline(capacity)
		s := newSeries(tl)
		var ref refHistory
		t0 := time.Unix(1_700_000_000, 0)
		now := t0
		cur := reading{}
		for range 3 * capacity {
			now = now.Add(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
			k := tl.add(now)
			switch rng.IntN(6) {
			case 0: // the tick could not read the queue
				continue
			case 1, 2: // a change
				cur.visible = rng.IntN(3)
				cur.sent += uint64(rng.IntN(2))
				if rng.IntN(2) == 0 {
					cur.oldestSentAt = 0
				} else {
					cur.oldestSentAt = now.Add(-time.Duration(rng.IntN(10)) * time.Second).UnixNano()
				}
			}
			s.push(k, cur)
			sm := sample{at: now, visible: cur.visible, sent: cur.sent}
			if cur.oldestSentAt != 0 {
				sm.oldestAge = max(0, now.Sub(time.Unix(0, cur.oldestSentAt)).Seconds())
			}
			ref.ticks = append(ref.ticks, k)
			ref.samples = append(ref.samples, sm)

			var kept []sample
			for i, tk := range ref.ticks {
				if tk >= tl.oldest() {
					kept = append(kept, ref.samples[i])
				}
			}
			if got := s.n(); got != len(kept) {
				t.Fatalf("seed %d: n %d, want %d", seed, got, len(kept))
			}
			for range 5 {
				at := t0.Add(time.Duration(rng.Int64N(int64(now.Sub(t0)) + int64(time.Second))))
				want := []sample{}
				for _, sm := range kept {
					if !sm.at.Before(at) {
						want = append(want, sm)
					}
				}
				if got := s.since(at); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d: since(%v):\n got %+v\nwant %+v", seed, at.Sub(t0), got, want)
				}
				var wb sample
				wok := len(kept) > 0
				if wok {
					wb = kept[0]
					for _, sm := range kept {
						if !sm.at.After(at) {
							wb = sm
						}
					}
				}
				if gb, gok := s.baseline(at); gok != wok || !reflect.DeepEqual(gb, wb) {
					t.Fatalf("seed %d: baseline(%v): %+v %v, want %+v %v", seed, at.Sub(t0), gb, gok, wb, wok)
				}
			}
		}
	}
}

// TestIdleQueueHistoryIsOneRun: a queue that does not change holds one run
// whatever the history's length, where it held a sample per tick.
func TestIdleQueueHistoryIsOneRun(t *testing.T) {
	tl := newTimeline(182)
	s := newSeries(tl)
	now := time.Unix(1_700_000_000, 0)
	for range 1000 {
		now = now.Add(5 * time.Second)
		s.push(tl.add(now), reading{sent: 3})
	}
	if len(s.runs) != 1 || s.n() != 182 {
		t.Fatalf("%d runs holding %d samples, want 1 holding 182", len(s.runs), s.n())
	}
	if got := s.since(now.Add(-time.Minute)); len(got) != 13 || got[12].at != now {
		t.Fatalf("the last minute: %d samples", len(got))
	}
}
