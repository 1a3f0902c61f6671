// Package lint holds tests that enforce the worker module's layering: the
// transports build on the worker core and the shared dlq package, never on
// each other, and nothing imports the broker's module (the worker SDK is a
// client; it talks to Sluice over the wire only). The wire types themselves
// are shared: github.com/sluicemq/sluice/api is a module of its own with no
// dependency (docs/adr/0011-wire-types-module.md).
package lint

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/sluicemq/sluice/worker"

// allowed lists every package of the worker module ("." is the module's
// root package) with the worker packages its non-test files may import.
// The standard library and third-party modules need no listing; the
// broker's own module (github.com/sluicemq/sluice/...) is never allowed (the
// wire-types module apiModule is not the broker's: see apiUsers). A
// package missing from the table fails TestLayering.
var allowed = map[string][]string{
	".":           {},
	"dlq":         {"."},
	"dedup":       {"."},
	"gcppubsub":   {".", "dlq"},
	"kafka":       {".", "dlq"},
	"natsjs":      {".", "dlq"},
	"redisstream": {".", "dlq"},
	"workertest":  {".", "dlq"},
	// The DLQ console links every transport; nothing imports it.
	"cmd/sluice-dlq": {"dlq", "gcppubsub", "kafka", "natsjs", "redisstream"},
	"internal/lint":  {},
}

// apiModule is the wire-types module, the one Sluice import the worker may
// have; apiUsers lists the worker packages that may import it.
const apiModule = "github.com/sluicemq/sluice/api"

var apiUsers = []string{"."}

// rel returns path relative to the worker module ("." for its root) and
// whether it is in the module at all.
func rel(path string) (string, bool) {
	if path == mod {
		return ".", true
	}
	if r, ok := strings.CutPrefix(path, mod+"/"); ok {
		return r, true
	}
	return "", false
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		r, ok := rel(pkg)
		if !ok {
			continue
		}
		seen[r] = true
		may, listed := allowed[r]
		if !listed {
			t.Errorf("%s: not in the layering table: add it to the layering table in worker/internal/lint/layering_test.go with the worker packages it may import", pkg)
			continue
		}
		for _, imp := range imports {
			if ir, ok := rel(imp); ok {
				if !slices.Contains(may, ir) {
					t.Errorf("%s imports %s: not allowed by the layering table", pkg, imp)
				}
			} else if imp == apiModule {
				if !slices.Contains(apiUsers, r) {
					t.Errorf("%s imports %s: only %q may use the wire types (apiUsers)", pkg, imp, apiUsers)
				}
			} else if strings.HasPrefix(imp, "github.com/sluicemq/sluice/") || imp == "github.com/sluicemq/sluice" {
				t.Errorf("%s imports %s: the worker SDK must not depend on the broker's module", pkg, imp)
			}
		}
	}
	if len(seen) < 3 {
		t.Fatalf("go list found only %d worker packages; did the module path change?\n%s", len(seen), out)
	}
	for _, r := range slices.Sorted(maps.Keys(allowed)) {
		if !seen[r] {
			t.Errorf("%s: in the layering table but not a package of the worker module: remove it from the table", r)
		}
	}
}

func TestRel(t *testing.T) {
	for _, c := range []struct {
		path, want string
		ok         bool
	}{
		{mod, ".", true},
		{mod + "/dlq", "dlq", true},
		{mod + "x", "", false},
		{"github.com/sluicemq/sluice/internal/engine", "", false},
	} {
		if got, ok := rel(c.path); got != c.want || ok != c.ok {
			t.Errorf("rel(%q) = %q, %v; want %q, %v", c.path, got, ok, c.want, c.ok)
		}
	}
}
