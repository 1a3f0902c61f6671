package engine

import (
	"strings"
	"testing"
)

// TestValidQueueName: the SQS queue-name rule that the SQS front-end and
// the admin API share.
func TestValidQueueName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"orders-1_x", true}, {"q.fifo", true}, {strings.Repeat("a", 80), true},
		{strings.Repeat("a", 75) + ".fifo", true}, {strings.Repeat("a", 76) + ".fifo", false},
		{strings.Repeat("a", 81), false}, {"", false}, {".fifo", false}, {"a.b", false},
		{"a b", false}, {"a/b", false}, {"é", false}, {"a.fifo.fifo", false}, {"a\x00", false},
	} {
		if got := ValidQueueName(tc.name); got != tc.ok {
			t.Errorf("ValidQueueName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
