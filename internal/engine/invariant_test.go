package engine

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The consistency check every fixture runs when its test ends (as bbolt
// checks its pages after each test): what the engine holds in memory must
// be exactly what a new engine rebuilds from the store. A state change that
// is visible to clients but was never written (or was written differently)
// fails here in whichever test made it, not only in the crash suites.
//
// The dump is taken through the engine's own read paths (GetQueue, Browse),
// at the same fake-clock instant before and after the reopen, so timers
// that are due are applied identically on both sides. What is deliberately
// not persisted is left out: activity counters (QueueInfo.Sent…), receipt
// handles (browsing leases nothing), the retry budget and FIFO receive
// attempt ids.

// engineDump is a canonical, comparable rendering of the engine's durable
// state.
type engineDump struct {
	Queues []queueDump
}

type queueDump struct {
	Name       string
	Config     QueueConfig
	Tags       map[string]string
	CreatedAt  time.Time
	ModifiedAt time.Time
	Visible    int
	InFlight   int
	Delayed    int
	Oldest     time.Time
	Messages   []View
}

// dumpEngine renders e's state. It fails the test when a read fails.
func dumpEngine(t *testing.T, e *Engine) engineDump {
	t.Helper()
	var d engineDump
	names := e.ListQueues("")
	slices.Sort(names)
	for _, name := range names {
		qi, err := e.GetQueue(name)
		if err != nil {
			t.Fatalf("consistency check: GetQueue(%s): %v", name, err)
		}
		qd := queueDump{
			Name: qi.Name, Config: qi.Config, Tags: qi.Tags,
			CreatedAt: qi.CreatedAt, ModifiedAt: qi.ModifiedAt,
			Visible: qi.Visible, InFlight: qi.InFlight, Delayed: qi.Delayed,
			Oldest: qi.OldestSentAt,
		}
		if len(qd.Tags) == 0 {
			qd.Tags = nil
		}
		var cursor uint64
		for {
			p, err := e.Browse(name, Filter{}, cursor, 1000)
			if err != nil {
				t.Fatalf("consistency check: Browse(%s): %v", name, err)
			}
			for _, v := range p.Messages {
				// Redelivered is derived at delivery time; a
				// restarted broker marks every message it may have
				// handed out before, which browsing does not ask.
				v.Redelivered = false
				qd.Messages = append(qd.Messages, v)
			}
			if p.Next == 0 {
				break
			}
			cursor = p.Next
		}
		d.Queues = append(d.Queues, qd)
	}
	return d
}

// checkReopen compares e's state with the state a new engine recovers from
// the same store, then closes the new engine. The caller's engine must be
// closed by then (checkReopen closes it).
func (f *fixture) checkReopen() {
	t := f.t
	t.Helper()
	if t.Failed() || f.e == nil || f.e.Failed() != nil {
		return
	}
	before := dumpEngine(t, f.e)
	f.e.Close()
	e, err := Open(Options{Store: f.st, Clock: f.clk})
	if err != nil {
		t.Fatalf("consistency check: reopen: %v", err)
	}
	defer e.Close()
	after := dumpEngine(t, e)
	if diff := dumpDiff(before, after); diff != "" {
		t.Errorf("consistency check: the state rebuilt from the store differs from the state in memory:\n%s", diff)
	}
}

// dumpDiff describes the first differences between two dumps ("" if
// equal).
func dumpDiff(a, b engineDump) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	var sb strings.Builder
	qa, qb := map[string]queueDump{}, map[string]queueDump{}
	for _, q := range a.Queues {
		qa[q.Name] = q
	}
	for _, q := range b.Queues {
		qb[q.Name] = q
	}
	for name, x := range qa {
		y, ok := qb[name]
		if !ok {
			fmt.Fprintf(&sb, "queue %s: in memory, not in the store\n", name)
			continue
		}
		if reflect.DeepEqual(x, y) {
			continue
		}
		mx, my := x.Messages, y.Messages
		x.Messages, y.Messages = nil, nil
		if !reflect.DeepEqual(x, y) {
			fmt.Fprintf(&sb, "queue %s:\n  memory: %+v\n  store:  %+v\n", name, x, y)
		}
		for i := 0; i < max(len(mx), len(my)); i++ {
			switch {
			case i >= len(mx):
				fmt.Fprintf(&sb, "queue %s: message %s only in the store: %+v\n", name, my[i].MessageID, my[i])
			case i >= len(my):
				fmt.Fprintf(&sb, "queue %s: message %s only in memory: %+v\n", name, mx[i].MessageID, mx[i])
			case !reflect.DeepEqual(mx[i], my[i]):
				fmt.Fprintf(&sb, "queue %s: message %d differs:\n  memory: %+v\n  store:  %+v\n", name, i, mx[i], my[i])
			}
		}
	}
	for name := range qb {
		if _, ok := qa[name]; !ok {
			fmt.Fprintf(&sb, "queue %s: in the store, not in memory\n", name)
		}
	}
	return sb.String()
}
