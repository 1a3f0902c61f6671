package amqp

import "testing"

// Buffers come back from the pool at least as large as asked, empty, and
// only pooled capacities are kept.
func TestFrameBufs(t *testing.T) {
	var p frameBufs
	for _, n := range []int{1, 511, 512, 513, 1200, 65536} {
		b, ok := p.get(n)
		if !ok || len(*b) != 0 || cap(*b) < n || cap(*b) > 2*max(n, 512) {
			t.Fatalf("get(%d): len %d cap %d pooled %v", n, len(*b), cap(*b), ok)
		}
		*b = append(*b, "dirty"...)
		p.put(b)
		again, _ := p.get(n)
		if len(*again) != 0 || cap(*again) < n {
			t.Fatalf("get(%d) after put: len %d cap %d", n, len(*again), cap(*again))
		}
	}
	if b, ok := p.get(65537); ok || cap(*b) < 65537 {
		t.Fatalf("get(65537): pooled %v cap %d", ok, cap(*b))
	}
	if b, ok := p.get(0); ok || b == nil {
		t.Fatalf("get(0): pooled %v", ok)
	}
	odd := make([]byte, 0, 1000)
	p.put(&odd) // not a pooled capacity: dropped
	for range 100 {
		if b, _ := p.get(1000); cap(*b) == 1000 {
			t.Fatal("a buffer of a capacity the pool does not make came back")
		}
	}
}
