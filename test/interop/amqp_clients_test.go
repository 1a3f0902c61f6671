package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/brokertest"
)

// The AMQP clients of other languages that the README promises work
// unchanged: pika (Python; Debian's python3-pika) and amqplib (Node; the
// version pinned in amqplib/package-lock.json, installed with `npm ci`
// into amqplib/node_modules by the test itself when npm is there). Each
// runs a script of what a RabbitMQ application does — confirmed publishes
// with properties, consumers with prefetch, nack and requeue,
// dead-lettering with x-death, exchanges, returns, RPC, queue arguments —
// against a real server, and must print "all checks passed".

// startAMQP starts a real broker for the test and returns its AMQP URL.
func startAMQP(t *testing.T) string {
	t.Helper()
	return brokertest.Start(t, brokertest.Options(t), nil).AMQPURL()
}

// runScript runs a client script and fails the test unless it passed.
func runScript(t *testing.T, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "all checks passed") {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
}

// pikaPythons returns the interpreters that can import pika.
func pikaPythons() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		real, _ := filepath.EvalSymlinks(path)
		if seen[real] || exec.Command(path, "-c", "import pika").Run() != nil {
			continue
		}
		seen[real] = true
		out = append(out, path)
	}
	return out
}

func TestPika(t *testing.T) {
	py := pikaPythons()
	need(t, "python3 with pika", len(py) > 0)
	url := startAMQP(t)
	for _, p := range py {
		t.Run(p, func(t *testing.T) { runScript(t, ".", p, "pika_check.py", url) })
	}
}

// amqplibReady installs amqplib (npm ci) unless it is there, and reports
// whether node can run the check.
func amqplibReady(t *testing.T) bool {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		return false
	}
	if _, err := os.Stat(filepath.Join("amqplib", "node_modules", "amqplib", "package.json")); err == nil {
		return true
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return false
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = "amqplib"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("npm ci: %v\n%s", err, out)
		return false
	}
	return true
}

func TestAmqplib(t *testing.T) {
	need(t, "node with amqplib (npm ci in test/interop/amqplib)", amqplibReady(t))
	runScript(t, "amqplib", "node", "check.js", startAMQP(t))
}
