package brokertest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// failLogLines is how many of a logger's last lines FailureLog keeps.
const failLogLines = 250

// FailureLog returns a logger that keeps the last lines a broker or node
// logs at Info and above, and prints them, under a heading that names it
// name, in t's output only if t failed. A broker's log is otherwise discarded in tests
// (it would bury the output of passing ones), and then a failure seen
// once — in CI, say — says what the client saw and nothing of why: a
// nack with no reason, a refused call. Register it before the broker
// starts, so that t's cleanup prints it after the broker stopped (cleanups
// run last-registered first) and the lines of its shutdown are in it.
func FailureLog(t testing.TB, name string) *slog.Logger {
	t.Helper()
	r := &lineRing{lines: make([]string, 0, failLogLines)}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lines, dropped := r.snapshot()
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("\n  ")
			b.WriteString(l)
		}
		t.Logf("the log of %s (its last %d lines, %d before them dropped):%s", name, len(lines), dropped, b.String())
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// lineRing is an io.Writer that keeps the last cap(lines) lines written
// to it; slog's handlers write one whole record per Write.
type lineRing struct {
	mu      sync.Mutex
	lines   []string
	next    int // where the next line goes once lines is full
	dropped int
}

func (r *lineRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(r.lines) < cap(r.lines) {
			r.lines = append(r.lines, string(l))
			continue
		}
		r.lines[r.next] = string(l)
		r.next = (r.next + 1) % len(r.lines)
		r.dropped++
	}
	return len(p), nil
}

// snapshot returns the lines kept, oldest first, and how many were
// dropped before them.
func (r *lineRing) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	out = append(out, r.lines[:r.next]...)
	return out, r.dropped
}
