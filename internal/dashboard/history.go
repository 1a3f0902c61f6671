package dashboard

import (
	"sort"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// History is kept as runs: most queues of a broker with many are idle, and
// an idle queue's readings do not change from one sample to the next. A
// ring of every sample cost each queue its full History (182 samples of
// 120 bytes at the defaults) from its first sample on: 182 MB of heap for
// 9,900 idle queues. A series now holds one run per change, and the times
// of the samples are kept once, in the timeline every series shares.

// reading is what one sample of a queue says, without its time. The oldest
// message's age is kept as its send time, which stays the same while the
// queue does; the age is derived when the sample is read.
type reading struct {
	visible, inflight, delayed int
	oldestSentAt               int64 // Unix nanoseconds; 0: no message
	sent, received, redeliv    uint64
	deleted, deadLettered, exp uint64
}

// timeline holds the times of the last len(times) ticks; every queue's
// samples of one tick share its time. Ticks are numbered from 1.
type timeline struct {
	times []time.Time
	last  uint64 // the newest tick; 0: none yet
}

func newTimeline(capacity int) *timeline { return &timeline{times: make([]time.Time, capacity)} }

// add records a tick taken at t and returns its number.
func (tl *timeline) add(t time.Time) uint64 {
	tl.last++
	tl.times[tl.last%uint64(len(tl.times))] = t
	return tl.last
}

// oldest is the oldest tick whose time is kept (1 before the first).
func (tl *timeline) oldest() uint64 {
	if n := uint64(len(tl.times)); tl.last > n {
		return tl.last - n + 1
	}
	return 1
}

func (tl *timeline) at(k uint64) time.Time { return tl.times[k%uint64(len(tl.times))] }

// run is one reading that held from tick first to tick last, sampled at
// every tick between them.
type run struct {
	r           reading
	first, last uint64
}

// series is one queue's samples within the timeline, as runs, oldest
// first. A tick that could not read the queue leaves a gap between runs.
type series struct {
	tl   *timeline
	runs []run
}

func newSeries(tl *timeline) *series { return &series{tl: tl} }

// push records r as the queue's sample at tick k (the timeline's newest)
// and forgets samples older than the timeline keeps.
func (s *series) push(k uint64, r reading) {
	if n := len(s.runs); n > 0 && s.runs[n-1].r == r && s.runs[n-1].last+1 == k {
		s.runs[n-1].last = k
	} else {
		s.runs = append(s.runs, run{r: r, first: k, last: k})
	}
	s.trim()
}

// trim drops the runs that ended before the timeline's oldest tick and
// cuts the first one there; the backing array is given back once most of
// it is unused.
func (s *series) trim() {
	oldest := s.tl.oldest()
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].last >= oldest })
	if i > 0 {
		s.runs = s.runs[i:]
		if cap(s.runs) > 8 && len(s.runs) < cap(s.runs)/4 {
			s.runs = append(make([]run, 0, 2*len(s.runs)), s.runs...)
		}
	}
	if len(s.runs) > 0 && s.runs[0].first < oldest {
		s.runs[0].first = oldest
	}
}

// n is how many samples the series holds.
func (s *series) n() int {
	s.trim()
	n := 0
	for _, r := range s.runs {
		n += int(r.last - r.first + 1)
	}
	return n
}

// sampleAt is the sample of run i at tick k.
func (s *series) sampleAt(i int, k uint64) sample { return s.runs[i].r.at(s.tl.at(k)) }

// at is the sample that says rd at time t.
func (rd *reading) at(t time.Time) sample {
	sm := sample{
		at: t, visible: rd.visible, inflight: rd.inflight, delayed: rd.delayed,
		sent: rd.sent, received: rd.received, redeliv: rd.redeliv,
		deleted: rd.deleted, deadLettered: rd.deadLettered, exp: rd.exp,
	}
	if rd.oldestSentAt != 0 {
		sm.oldestAge = max(0, t.Sub(time.Unix(0, rd.oldestSentAt)).Seconds())
	}
	return sm
}

// since copies the samples taken at or after t, oldest first.
func (s *series) since(t time.Time) []sample {
	s.trim() // a tick that could not read the queue did not
	var out []sample
	for i := len(s.runs) - 1; i >= 0; i-- {
		r := s.runs[i]
		k := r.last
		for ; k >= r.first && !s.tl.at(k).Before(t); k-- {
			out = append(out, s.sampleAt(i, k))
		}
		if k >= r.first {
			break
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if out == nil {
		out = []sample{}
	}
	return out
}

// baseline returns the newest sample taken at or before t, else the
// oldest one; ok is false when the series is empty.
func (s *series) baseline(t time.Time) (sample, bool) {
	s.trim()
	if len(s.runs) == 0 {
		return sample{}, false
	}
	for i := len(s.runs) - 1; i >= 0; i-- {
		r := s.runs[i]
		for k := r.last; k >= r.first; k-- {
			if !s.tl.at(k).After(t) {
				return s.sampleAt(i, k), true
			}
		}
	}
	return s.sampleAt(0, s.runs[0].first), true
}

// readingOf is what info says at this sample.
func readingOf(info *engine.QueueInfo) reading {
	r := reading{
		visible: info.Visible, inflight: info.InFlight, delayed: info.Delayed,
		sent: info.Sent, received: info.Received, redeliv: info.Redelivered,
		deleted: info.Deleted, deadLettered: info.DeadLettered, exp: info.Expired,
	}
	if !info.OldestSentAt.IsZero() {
		r.oldestSentAt = info.OldestSentAt.UnixNano()
	}
	return r
}
