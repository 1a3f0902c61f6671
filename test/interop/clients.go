package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// Amqplib prepares a directory of the test's own holding the amqplib
// check (check.js) with amqplib installed at the version the lock file
// pins (`npm ci`), and returns it; "" when node or npm is missing or the
// install fails (logged). A directory per test, so that packages testing
// at once never install into one another's node_modules.
func Amqplib(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		return ""
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return ""
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "check.js"} {
		b, err := os.ReadFile(filepath.Join(Dir(), "amqplib", f))
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
