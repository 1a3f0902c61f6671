package flowrule

import (
	"sync"
	"testing"
	"time"
)

func TestFromEmptyQueueIsTheDepthRule(t *testing.T) {
	var tr Trend
	now := time.Unix(1000, 0)
	const mark = 1000
	tr.Observe(0, true, now)
	for n := 0; n <= 3000; n += 100 {
		now = now.Add(time.Millisecond)
		f := tr.Observe(n, true, now)
		if f != 0 {
			t.Fatalf("floor %d after rising from 0", f)
		}
		if got, want := Over(n, f, mark), n > mark; got != want {
			t.Fatalf("Over(%d) = %v, want %v", n, got, want)
		}
		if got, want := Relieved(n, f, mark), n <= mark/2; got != want {
			t.Fatalf("Relieved(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestOldBacklogDrainedIsNeverOver(t *testing.T) {
	var tr Trend
	now := time.Unix(1000, 0)
	const mark = 2000
	// Built up with no consumers: the floor follows the backlog up.
	for n := 0; n <= 1_000_000; n += 50_000 {
		now = now.Add(10 * time.Millisecond)
		if f := tr.Observe(n, false, now); Over(n, f, mark) {
			t.Fatalf("over at %d without consumers", n)
		}
	}
	// Consumers back: the backlog shrinks with noise (sends between
	// receives), never over.
	n := 1_000_000
	for i := 0; n > 0; i++ {
		now = now.Add(time.Millisecond)
		n -= 40
		if i%3 == 0 {
			n += 70 // a burst of sends
		}
		n = max(n, 0)
		if f := tr.Observe(n, true, now); Over(n, f, mark) {
			t.Fatalf("over at %d (floor %d) while the backlog shrinks", n, f)
		}
	}
}

func TestGrowthAboveFloorIsOver(t *testing.T) {
	var tr Trend
	now := time.Unix(1000, 0)
	const mark = 2000
	tr.Observe(500_000, false, now)
	now = now.Add(time.Millisecond)
	f := tr.Observe(400_000, true, now) // consumers drained some
	if f != 400_000 {
		t.Fatalf("floor %d, want 400000", f)
	}
	if Over(400_000+mark/2, f, mark) || !Over(400_001+mark/2, f, mark) {
		t.Fatalf("over threshold is not floor + mark/2")
	}
	if !Relieved(400_000+mark/4, f, mark) || Relieved(400_001+mark/4, f, mark) {
		t.Fatalf("relief threshold is not floor + mark/4")
	}
	// Observing a higher backlog while draining keeps the floor.
	if f := tr.Observe(450_000, true, now.Add(time.Millisecond)); f != 400_000 {
		t.Fatalf("floor rose to %d while draining", f)
	}
}

func TestGapReanchors(t *testing.T) {
	var tr Trend
	now := time.Unix(1000, 0)
	tr.Observe(100, true, now)
	if f := tr.Observe(9000, true, now.Add(Gap/2)); f != 100 {
		t.Fatalf("floor %d within the gap, want 100", f)
	}
	if f := tr.Observe(9000, true, now.Add(Gap/2+Gap+time.Millisecond)); f != 9000 {
		t.Fatalf("floor %d after a gap, want re-anchored 9000", f)
	}
}

func TestLowerAnchorsAndOnlyLowers(t *testing.T) {
	var tr Trend
	now := time.Unix(1000, 0)
	if f := tr.Lower(700, now); f != 700 {
		t.Fatalf("Lower on no floor = %d", f)
	}
	if f, ok := floorOf(&tr); !ok || f != 700 {
		t.Fatalf("floor = %d, %v", f, ok)
	}
	if f := tr.Lower(900, now); f != 700 {
		t.Fatalf("Lower raised the floor to %d", f)
	}
	if f := tr.Lower(10, now); f != 10 {
		t.Fatalf("Lower did not lower: %d", f)
	}
	if Over(1<<30, 0, 0) {
		t.Fatal("mark 0 is over")
	}
}

func TestConcurrentLowerKeepsMinimum(t *testing.T) {
	var tr Trend
	now := time.Unix(1000, 0)
	tr.Observe(1_000_000, true, now)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				tr.Lower(1000+g*1000+i, now)
			}
		}(g)
	}
	wg.Wait()
	if f, _ := floorOf(&tr); f != 1000 {
		t.Fatalf("floor %d, want 1000", f)
	}
}

// floorOf returns tr's floor without observing, and false when there is
// none.
func floorOf(tr *Trend) (int, bool) {
	f := tr.floor.Load()
	return int(f - 1), f != 0
}
