package kafka

import "testing"

// FuzzCursor: any cursor string parses or is refused without panicking,
// and a parsed cursor survives formatting.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{"", "0:5", "0:5,1:0,2:17", "x", "1:", ":1", "0:5,0:6", "-1:-1", "99999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseCursor(s)
		if err != nil {
			return
		}
		c2, err := parseCursor(formatCursor(c))
		if err != nil || len(c2) != len(c) {
			t.Fatalf("%q: %v %v %v", s, c, c2, err)
		}
		for p, o := range c {
			if c2[p] != o {
				t.Fatalf("%q: %v vs %v", s, c, c2)
			}
		}
	})
}
