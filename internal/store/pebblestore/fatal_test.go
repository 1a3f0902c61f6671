package pebblestore

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestFatalErrorStopsTheProcess (issue #10, hole 7): when pebble reports an
// error it cannot survive (Logger.Fatalf: a commit pipeline it calls
// broken, a failed MANIFEST sync), the process stops with a clear log line
// and exit status 70. It used to panic, and a panic raised
// inside Write was recovered: the process went on serving on a pipeline
// pebble had given up on. The child calls the Logger pebble is given,
// exactly as pebble's commit path does.
func TestFatalErrorStopsTheProcess(t *testing.T) {
	if dir := os.Getenv("PEBBLESTORE_FATAL_CHILD"); dir != "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		s, err := Open(dir, Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		Options{}.pebbleOptions(log, nil).Logger.Fatalf("pebble: fatal commit error: %v", errors.New("injected"))
		os.Stderr.WriteString("still running after a fatal error\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFatalErrorStopsTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PEBBLESTORE_FATAL_CHILD="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != FatalExitCode {
		t.Fatalf("child: %v, want exit status %d\n%s", err, FatalExitCode, out)
	}
	for _, want := range []string{"pebble: fatal: pebble: fatal commit error: injected", "pebblestore: fatal error; stopping the process"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "still running") || strings.Contains(string(out), "goroutine ") {
		t.Errorf("not a clean fail-stop:\n%s", out)
	}
}

// TestFatalErrorHook: Options.OnFatal receives pebble's fatal error.
func TestFatalErrorHook(t *testing.T) {
	var got error
	lg := Options{OnFatal: func(err error) { got = err }}.pebbleOptions(slog.New(slog.DiscardHandler), nil).Logger
	func() {
		defer func() {
			if _, ok := recover().(fatalError); !ok {
				t.Error("Fatalf returned after a returning OnFatal; pebble expects it not to")
			}
		}()
		lg.Fatalf("MANIFEST sync failed: %s", "EIO")
	}()
	if got == nil || got.Error() != "MANIFEST sync failed: EIO" {
		t.Fatalf("OnFatal got %v", got)
	}
}
