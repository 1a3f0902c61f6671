package wire

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates the spec code into a temporary
// directory and fails if it differs from the committed files, so an edit
// to gen/ or the XML cannot land without `go generate`.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./gen", "-out", filepath.Join(dir, "spec_gen.go"), "-test", filepath.Join(dir, "spec_gen_test.go"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./gen: %v\n%s", err, out)
	}
	generated, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(generated) < 3 {
		t.Fatalf("generator wrote %v, %v", generated, err)
	}
	committed, _ := filepath.Glob("spec_*gen*.go")
	if len(committed) != len(generated) {
		t.Errorf("generator writes %d files, %d committed", len(generated), len(committed))
	}
	for _, g := range generated {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Base(g))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./internal/amqp/wire", filepath.Base(g))
		}
	}
}
