package faults

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkUnsettled: what one Checker.Unsettled costs at the end of a long
// cluster run (525,000 messages, each delivered and deleted once), which
// Workload.Drain paces itself by. 77 ms per call on the 2-core machine
// (2026-11-29).
func BenchmarkUnsettled(b *testing.B) {
	c := NewChecker(false, 3)
	now := time.Now()
	for i := range 525000 {
		id := fmt.Sprintf("m-%07d", i)
		c.Attempt(Send{ID: id, Body: id}, now)
		c.Acked(id, fmt.Sprint(i), now)
		c.Received(Receipt{ID: id, Body: id, MessageID: fmt.Sprint(i), Queue: "q", Begin: now, End: now, Count: 1, Visibility: time.Second, Epoch: 1})
		c.DeleteAttempted(id, Lease{Count: 1, Epoch: 1}, now)
		c.DeleteAcked(id, Lease{Count: 1, Epoch: 1}, 1, now)
	}
	b.ResetTimer()
	for b.Loop() {
		c.Unsettled()
	}
}
