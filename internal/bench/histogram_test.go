package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	// Every value lies within its bucket, and buckets are contiguous.
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 1<<20 + 12345, uint64(maxTrackable)} {
		i := bucketOf(v)
		if hi := bucketHigh(i); v > hi {
			t.Errorf("value %d in bucket %d whose high is %d", v, i, hi)
		}
		if i > 0 && bucketHigh(i-1) >= v {
			t.Errorf("value %d in bucket %d, but bucket %d reaches %d", v, i, i-1, bucketHigh(i-1))
		}
		if i >= histBuckets {
			t.Errorf("value %d: bucket %d out of range %d", v, i, histBuckets)
		}
	}
	for i := 1; i < histBuckets; i++ {
		if bucketOf(bucketHigh(i-1)+1) != i {
			t.Fatalf("bucket %d does not start right after bucket %d", i, i-1)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []time.Duration
	for range 100000 {
		// log-normal-ish spread from µs to seconds, like real latencies
		v := time.Duration(rng.ExpFloat64() * float64(time.Millisecond))
		if rng.IntN(100) == 0 {
			v *= 500
		}
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		want := vals[int(float64(len(vals))*q+0.9999999)-1]
		got := h.Quantile(q)
		if got < want || float64(got-want) > float64(want)/subCount+1 {
			t.Errorf("q%.3f = %v, exact %v: outside [exact, exact·(1+1/%d)]", q, got, want, subCount)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] || h.Quantile(1) != h.Max() {
		t.Errorf("min/max %v/%v, want %v/%v", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("count %d", h.Count())
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram should report 0")
	}
	h.Record(-5)            // clamped to 0
	h.Record(2 * time.Hour) // beyond maxTrackable: last bucket, exact max
	if h.Min() != 0 || h.Max() != 2*time.Hour {
		t.Fatalf("min %v max %v", h.Min(), h.Max())
	}
	if got := h.Quantile(0.99); got != 2*time.Hour {
		t.Fatalf("p99 of {0, 2h} = %v", got)
	}
	var a, b Histogram
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(5 * time.Millisecond)
	a.Merge(&b)
	if a.Count() != 3 || a.Min() != time.Millisecond || a.Max() != 5*time.Millisecond || a.Mean() != 3*time.Millisecond {
		t.Fatalf("merge: n=%d min=%v max=%v mean=%v", a.Count(), a.Min(), a.Max(), a.Mean())
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(1234567) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}
