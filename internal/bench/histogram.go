package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets, in the manner of
// HdrHistogram: values below 2^subBits ns are counted exactly; above, each
// power-of-two range is split into 2^subBits equal buckets, so any recorded
// value is known to within 1/2^subBits (0.8 %) of its true size. Memory is
// fixed (histBuckets counters, 36 KiB) whatever the number of samples, and
// Record is a few instructions with no allocation, so each consumer keeps its
// own Histogram and they are merged at the end.
//
// Values above maxTrackable (about 73 minutes) count in the last bucket; Max
// stays exact. A Histogram is not safe for concurrent use.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      time.Duration
	min, max time.Duration
}

const (
	subBits      = 7
	subCount     = 1 << subBits
	maxExp       = 42 // values up to 2^42 ns ≈ 73 min are bucketed precisely
	histBuckets  = (maxExp - subBits + 1) * subCount
	maxTrackable = time.Duration(1)<<maxExp - 1
)

// bucketOf maps a non-negative value to its bucket index.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits // ≥ 0
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// bucketHigh is the largest value that maps to bucket i.
func bucketHigh(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	mant := uint64(i%subCount + subCount)
	return (mant+1)<<uint(shift) - 1
}

// Record adds one value; negative values count as 0.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
	if d > maxTrackable {
		d = maxTrackable
	}
	h.counts[bucketOf(uint64(d))]++
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Min is the smallest recorded value, exactly.
func (h *Histogram) Min() time.Duration { return h.min }

// Mean is the exact arithmetic mean.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the value at quantile q (0–1): the upper bound of the
// bucket holding the ceil(q·n)-th smallest value, capped at Max. It is never
// below the true quantile and at most 0.8 % above it. 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return h.min
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank >= h.n {
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := time.Duration(bucketHigh(i))
			if v > h.max {
				v = h.max
			}
			if v < h.min {
				v = h.min
			}
			return v
		}
	}
	return h.max
}
