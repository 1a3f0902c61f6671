package sqs

import (
	"fmt"
	"testing"
)

// The send back-pressure's per-queue trends do not outlive their queues:
// a queue deleted behind the SQS front-end's back (over AMQP or the admin
// API) loses its trend at the next sweep, a live queue keeps its own, and
// the map never holds more than the live queues plus one sweep's worth.
func TestSendFlowTrendsSweptWithTheirQueues(t *testing.T) {
	live := map[string]bool{"kept": true}
	exists := func(name string) bool { return live[name] }
	var f sendFlow
	kept := f.trend("kept", exists)

	for i := range 10 * sendFlowSweepEvery {
		name := fmt.Sprint("q", i)
		live[name] = true
		f.trend(name, exists)
		delete(live, name) // deleted elsewhere: its trend must go
		if n := count(&f); n > sendFlowSweepEvery+1 {
			t.Fatalf("after %d queues made and deleted: %d trends held, want at most %d", i+1, n, sendFlowSweepEvery+1)
		}
	}
	if f.trend("kept", exists) != kept {
		t.Fatal("a live queue's trend was swept")
	}
}

func count(f *sendFlow) int {
	n := 0
	f.trends.Range(func(any, any) bool { n++; return true })
	return n
}
