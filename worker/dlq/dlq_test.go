package dlq

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/worker"
)

func TestContextRoundTrip(t *testing.T) {
	m := &worker.Message{ID: "m1", Attempt: 3, SentAt: time.Unix(100, 5).UTC()}
	f := worker.Failure{Terminal: true, ErrorClass: "E", ErrorMessage: "bad", Trace: strings.Repeat("x", 2000), ConsumerID: "c", ConsumerVersion: "v1"}
	now := time.Unix(200, 7).UTC()
	c := NewContext(m, f, ReasonTerminal, "orders/0/1", "orders", 2, now)
	fields := c.Fields(1000)
	if len(fields[FieldTrace]) != 1000 {
		t.Fatalf("trace not shortened: %d", len(fields[FieldTrace]))
	}
	got, ok := ParseContext(fields)
	c.Trace = c.Trace[:1000]
	if !ok || got != c {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if _, ok := ParseContext(map[string]string{"a": "b"}); ok {
		t.Fatal("a message without context parsed as a dead letter")
	}
	r := RedriveFields(map[string]string{"kind": "order", FieldErrorClass: "E"}, got)
	if r["kind"] != "order" || r[FieldErrorClass] != "" || r[FieldOriginID] != "m1" || r[FieldRedrives] != "3" || Redrives(r) != 3 {
		t.Fatalf("redrive fields %v", r)
	}
}

// FuzzParseContext: any field map decodes without panicking, and what
// Fields encodes decodes to the same context.
func FuzzParseContext(f *testing.F) {
	f.Add("orders/0/1", "E", "msg", "3", "2026-11-24T10:00:00Z", "1", "true")
	f.Add("", "", "", "x", "not a time", "-1", "")
	f.Add("s", "\x00", "\xff", "99999999999999999999", "2026-13-45T99:00:00Z", "1e9", "TRUE")
	f.Fuzz(func(t *testing.T, src, class, msg, attempts, at, redrives, terminal string) {
		fields := map[string]string{FieldSource: src, FieldErrorClass: class, FieldErrorMessage: msg,
			FieldAttempts: attempts, FieldFailedAt: at, FieldRedrives: redrives, FieldTerminal: terminal}
		c, ok := ParseContext(fields)
		if ok != (src != "") {
			t.Fatalf("ok=%v for src %q", ok, src)
		}
		if !ok {
			return
		}
		c2, ok := ParseContext(c.Fields(0))
		c.SentAt, c2.SentAt = time.Time{}, time.Time{}
		if !ok || !c2.FailedAt.Equal(c.FailedAt) {
			t.Fatalf("re-encode: %+v vs %+v", c, c2)
		}
		c2.FailedAt = c.FailedAt
		if c2 != c {
			t.Fatalf("re-encode:\n%+v\n%+v", c, c2)
		}
	})
}

// memStore is a dlq.Store in memory for the redrive loop's own tests;
// the transports' stores are tested against real servers.
type memStore struct {
	mu      sync.Mutex
	entries []Entry // in order; removed ones are dropped
	seq     int
	moved   []Entry
	onMove  func(Entry) // e.g. dead-letter it again
}

func (s *memStore) add(body string, c Context) {
	s.seq++
	c.Source = "src/" + body
	if c.OriginID == "" {
		c.OriginID = body
	}
	s.entries = append(s.entries, Entry{ID: strconv.Itoa(s.seq), Body: []byte(body), Context: c, Valid: true})
}

func (s *memStore) List(_ context.Context, cursor string, max int) ([]Entry, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	after, _ := strconv.Atoi(cursor)
	var out []Entry
	for _, e := range s.entries {
		if n, _ := strconv.Atoi(e.ID); n > after && len(out) < max {
			out = append(out, e)
			cursor = e.ID
		}
	}
	return out, cursor, nil
}

func (s *memStore) Redrive(_ context.Context, e Entry) error {
	s.mu.Lock()
	for i, x := range s.entries {
		if x.ID == e.ID {
			s.entries = append(s.entries[:i], s.entries[i+1:]...)
			break
		}
	}
	s.moved = append(s.moved, e)
	on := s.onMove
	s.mu.Unlock()
	if on != nil {
		on(e)
	}
	return nil
}

func TestRedriveFilterDryRunMax(t *testing.T) {
	s := &memStore{}
	for i, class := range []string{"A", "B", "A", "A"} {
		s.add("m"+strconv.Itoa(i), Context{ErrorClass: class})
	}
	onlyA := func(e Entry) bool { return e.Context.ErrorClass == "A" }
	rep, err := Redrive(context.Background(), s, Options{Filter: onlyA, DryRun: true, Rate: 1000})
	if err != nil || rep.Matched != 3 || rep.Redriven != 0 || len(s.moved) != 0 || len(rep.Sample) != 3 {
		t.Fatalf("dry run %+v %v", rep, err)
	}
	rep, err = Redrive(context.Background(), s, Options{Filter: onlyA, Max: 2, Rate: 1000, SafetyWindow: time.Millisecond})
	if err != nil || rep.Redriven != 2 || len(s.entries) != 2 || s.entries[0].Context.ErrorClass != "B" {
		t.Fatalf("redrive %+v %v, left %+v", rep, err, s.entries)
	}
	if _, err := Redrive(context.Background(), s, Options{Rate: -1}); err == nil {
		t.Fatal("negative rate accepted")
	}
}

func TestRedriveSafetyStop(t *testing.T) {
	s := &memStore{}
	for i := range 10 {
		s.add("m"+strconv.Itoa(i), Context{ErrorClass: "A"})
	}
	// Every redriven message fails again at once (the fix is not in).
	s.onMove = func(e Entry) {
		s.mu.Lock()
		defer s.mu.Unlock()
		c := e.Context
		c.Redrives++
		s.seq++
		s.entries = append(s.entries, Entry{ID: strconv.Itoa(s.seq), Body: e.Body, Context: c, Valid: true})
	}
	rep, err := Redrive(context.Background(), s, Options{Rate: 1000, SafetyThreshold: 2})
	if !errors.Is(err, ErrSafetyStop) || !rep.Stopped || rep.Redriven != 2 || rep.Refailed != 2 {
		t.Fatalf("%+v %v", rep, err)
	}
	if len(s.entries) != 10 {
		t.Fatalf("%d entries left, want all 10 (8 untouched + 2 back)", len(s.entries))
	}
}
