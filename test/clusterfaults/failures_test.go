package clusterfaults

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// failures is the testing.TB a fault run reports through: it keeps every
// error and fatal message besides reporting it, so that a failed run
// repeats them, with how to reproduce the run, as the very last lines of
// its output. A failed run prints every node's log and goroutines after
// its errors, and CI keeps only the tail of a failed run's output.
type failures struct {
	testing.TB
	mu    sync.Mutex
	msgs  []string
	rerun string // the environment that reproduces the run, once known
}

// recordFailures returns t wrapped. It registers its summary as a
// cleanup, so call it before anything that registers one: cleanups run
// last-registered first, and the summary must come after the node logs.
func recordFailures(t *testing.T) *failures {
	f := &failures{TB: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !t.Failed() {
			return
		}
		msgs := f.msgs
		if len(msgs) == 0 {
			msgs = []string{"(a failure reported outside this run's helpers; see above)"}
		}
		rerun := f.rerun
		if rerun == "" {
			rerun = "(failed before the run's settings were known)"
		}
		// Every line begins with "- " (a message's further lines with
		// "-   "): CI's failure digest picks such lines after this one.
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString("\n- " + strings.ReplaceAll(strings.TrimRight(m, "\n"), "\n", "\n-   "))
		}
		t.Logf("%s failed (repeated after the nodes' logs above); reproduce with %s:%s", t.Name(), rerun, b.String())
	})
	return f
}

// keep records one failure message.
func (f *failures) keep(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
}

// setRerun records the environment that reproduces the run.
func (f *failures) setRerun(env string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rerun = env
}

func (f *failures) Error(args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprint(args...))
	f.TB.Error(args...)
}

func (f *failures) Errorf(format string, args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.TB.Errorf(format, args...)
}

func (f *failures) Fatal(args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprint(args...))
	f.TB.Fatal(args...)
}

func (f *failures) Fatalf(format string, args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.TB.Fatalf(format, args...)
}
