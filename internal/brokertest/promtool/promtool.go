// Package promtool runs Prometheus's promtool in tests: the real checker
// and evaluator of the alerting rules Sluice ships
// (docs/prometheus/sluice-alerts.yml).
//
// .ci/run installs promtool from Debian's prometheus package (the binary
// alone: extracted from the .deb, so no Prometheus service is set up).
// Without it a test that needs it is skipped, or fails when
// SLUICE_REQUIRE_INTEROP=1, as in CI.
package promtool

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// Path returns promtool's path, or ends t: skipped without promtool, or
// failed when SLUICE_REQUIRE_INTEROP=1.
func Path(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_INTEROP") == "1" {
			t.Fatal("promtool is not installed (.ci/run extracts it from Debian's prometheus package)")
		}
		t.Skip("promtool is not installed")
	}
	return bin
}

// Run runs promtool with args in dir and returns its combined output and
// whether it exited 0. A promtool that cannot be started ends t.
func Run(t testing.TB, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(Path(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("promtool %v: %v", args, err)
	}
	return out.String(), err == nil
}
