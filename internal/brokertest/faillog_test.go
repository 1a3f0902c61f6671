package brokertest

import (
	"fmt"
	"slices"
	"testing"
)

// TestLineRingKeepsTheLastLines: past its capacity the ring keeps the
// newest lines, oldest first, and counts the ones it dropped.
func TestLineRingKeepsTheLastLines(t *testing.T) {
	r := &lineRing{lines: make([]string, 0, 3)}
	for i := range 5 {
		fmt.Fprintf(r, "line %d\n", i)
	}
	lines, dropped := r.snapshot()
	if want := []string{"line 2", "line 3", "line 4"}; !slices.Equal(lines, want) || dropped != 2 {
		t.Fatalf("kept %q, dropped %d; want %q, 2", lines, dropped, want)
	}
	r = &lineRing{lines: make([]string, 0, 3)}
	fmt.Fprintf(r, "a\nb\n")
	if lines, dropped := r.snapshot(); !slices.Equal(lines, []string{"a", "b"}) || dropped != 0 {
		t.Fatalf("kept %q, dropped %d", lines, dropped)
	}
}
