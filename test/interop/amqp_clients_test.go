package interop

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/brokertest"
)

// The AMQP clients of other languages that the README promises work
// unchanged: pika (Python; Debian's python3-pika) and amqplib (Node; the
// version pinned in amqplib/package-lock.json, installed with `npm ci`
// into a directory of the test's own when node and npm are there). Each
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

func TestPika(t *testing.T) {
	py := Pythons("pika")
	need(t, "python3 with pika", len(py) > 0)
	url := startAMQP(t)
	for _, p := range py {
		t.Run(p, func(t *testing.T) { runScript(t, ".", p, "pika_check.py", url) })
	}
}

func TestAmqplib(t *testing.T) {
	dir := Amqplib(t)
	need(t, "node and npm with amqplib (npm ci)", dir != "")
	runScript(t, dir, "node", "check.js", startAMQP(t))
}
