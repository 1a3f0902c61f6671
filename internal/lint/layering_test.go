// Package lint holds tests that enforce the architecture: they fail when an
// import breaks the layering described in docs/architecture.md.
package lint

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/sluicemq/sluice/"

// forbidden maps a package prefix to imports its non-test files must not
// have. Storage knows nothing of queues or protocols; the engine knows
// nothing of HTTP or AMQP or which store it runs on; front-ends talk to the
// engine only, never to storage.
var forbidden = map[string][]string{
	mod + "internal/clock":  {mod + "internal"},
	mod + "internal/store":  {mod + "internal/engine", mod + "internal/sqs", mod + "internal/amqp", mod + "internal/server", mod + "internal/admin", "net/http"},
	mod + "internal/engine": {"net/http", "net", mod + "internal/sqs", mod + "internal/amqp", mod + "internal/server", mod + "internal/admin", mod + "internal/store/"},
	mod + "internal/sqs":    {mod + "internal/store", mod + "internal/server", mod + "internal/amqp"},
	mod + "internal/amqp":   {mod + "internal/store", mod + "internal/server", mod + "internal/sqs"},
	mod + "internal/admin":  {mod + "internal/store", mod + "internal/server"},
	// Observability reads the engine; it never reaches into storage or a
	// protocol front-end.
	mod + "internal/metrics": {mod + "internal/store", mod + "internal/server", mod + "internal/sqs", mod + "internal/amqp", mod + "internal/admin"},
	mod + "internal/alerts":  {mod + "internal/store", mod + "internal/server", mod + "internal/sqs", mod + "internal/amqp", mod + "internal/admin"},
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		for prefix, bans := range forbidden {
			if pkg != prefix && !strings.HasPrefix(pkg, prefix+"/") {
				continue
			}
			checked++
			for _, imp := range imports {
				for _, ban := range bans {
					if matches(imp, ban) {
						t.Errorf("%s imports %s: forbidden by the layering (see docs/architecture.md)", pkg, imp)
					}
				}
			}
		}
	}
	if checked < 4 {
		t.Fatalf("layering test checked only %d packages; did the module path change?", checked)
	}
}

// matches reports whether import path imp is covered by ban: a ban ending in
// "/" covers only subpackages; otherwise the package and its subpackages.
func matches(imp, ban string) bool {
	if strings.HasSuffix(ban, "/") {
		return strings.HasPrefix(imp, ban)
	}
	return imp == ban || strings.HasPrefix(imp, ban+"/")
}

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		imp, ban string
		want     bool
	}{
		{mod + "internal/store", mod + "internal/store/", false},
		{mod + "internal/store/pebblestore", mod + "internal/store/", true},
		{"net/http", "net/http", true},
		{"net/http/httptest", "net/http", true},
		{"net/netip", "net", true},
		{"netx", "net", false},
		{mod + "internal/sqsx", mod + "internal/sqs", false},
	} {
		if got := matches(c.imp, c.ban); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.imp, c.ban, got, c.want)
		}
	}
}
