package interop

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Dir is this package's source directory, where the client scripts live
// (pika_check.py, boto3_check.py, amqplib/).
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Pythons returns the interpreters that can import module: Debian's
// (/usr/bin/python3) and the one on PATH, if they differ.
func Pythons(module string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		real, _ := filepath.EvalSymlinks(path)
		if seen[real] || exec.Command(path, "-c", "import "+module).Run() != nil {
			continue
		}
		seen[real] = true
		out = append(out, path)
	}
	return out
}

// Amqplib prepares the amqplib check (amqplib/check.js): see Node.
func Amqplib(t testing.TB) string { t.Helper(); return Node(t, "amqplib") }

// Node prepares a directory of the test's own holding the Node client
// check in sub (check.js) with the packages its lock file pins installed
// (`npm ci`), and returns it; "" when node or npm is missing, node is
// older than its package.json's engines (major version, from the
// "engines" node field's ">=N"), or the install fails (each logged). A
// directory per test, so that packages testing at once never install
// into one another's node_modules.
func Node(t testing.TB, sub string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		return ""
	}
	if need := NodeNeeds(t, sub); NodeMajor(node) < need {
		t.Logf("%s needs node >= %d; this machine's is %d", sub, need, NodeMajor(node))
		return ""
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return ""
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "check.js"} {
		b, err := os.ReadFile(filepath.Join(Dir(), sub, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("npm ci: %v\n%s", err, out)
		return ""
	}
	return dir
}

// NodeNeeds is the least major version of node the client in sub runs on
// (its package.json's engines field, ">=N"; 0 when it names none).
func NodeNeeds(t testing.TB, sub string) int {
	t.Helper()
	var pkg struct {
		Engines struct{ Node string }
	}
	b, err := os.ReadFile(filepath.Join(Dir(), sub, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil {
		t.Fatalf("%s/package.json: %v", sub, err)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(pkg.Engines.Node, ">="))
	return n
}

// NodeMajor is the major version of the node at path (0 if it cannot
// tell).
func NodeMajor(path string) int {
	out, err := exec.Command(path, "-p", "process.versions.node.split('.')[0]").Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}
