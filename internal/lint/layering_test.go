// Package lint holds tests that enforce the architecture: they fail when an
// import breaks the layering described in docs/architecture.md.
package lint

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/sluicemq/sluice/"

// allowed is the layering as an allow-list: every package of the module
// (cmd/, internal/, test/), and of the api module that `go list` reaches
// through it, is listed with the Sluice packages its non-test files may
// import, relative to the module path. The standard library and
// third-party modules need no listing (but see banned). A package missing
// from this table fails TestLayering, so a new package states its place in
// the layering when it is added; an entry naming a package that no longer
// exists fails too.
//
// The direction is store ← engine ← front-ends and operator surfaces ←
// server ← cmd (docs/architecture.md): storage knows nothing of queues or
// protocols; the engine knows nothing of HTTP, AMQP or which store it runs
// on; front-ends and operator surfaces reach the engine, never storage.
var allowed = map[string][]string{
	// cmd reaches the broker only through server (and cluster); the other
	// imports are its client-side subcommands, and the clock a test
	// build's cluster node may run on (faultclock.go).
	"cmd/sluice": {"internal/auth/httpauth", "internal/auth/password", "internal/bench", "internal/buildinfo", "internal/cli", "internal/clock", "internal/cluster", "internal/server"},

	// Cluster mode: a Raft member that runs server on the replicated
	// store while it leads and forwards clients to the leader; above
	// server, below cmd.
	"internal/cluster": {"internal/amqp/wire", "internal/auth/httpauth", "internal/clock", "internal/cluster/nodeauth", "internal/cluster/raftstore", "internal/server"},
	// The node handshake (the cluster secret): the standard library only,
	// shared by the Raft transport and the cluster's internal listeners.
	"internal/cluster/nodeauth": {},

	// Wiring: the one package that knows every other.
	"internal/server": {
		"api", "internal/admin", "internal/advisor", "internal/alerts", "internal/amqp", "internal/auth/httpauth", "internal/auth/sigv4",
		"internal/buildinfo", "internal/clock", "internal/dashboard", "internal/engine", "internal/httpbody",
		"internal/metrics", "internal/sqs", "internal/store", "internal/store/memstore", "internal/store/pebblestore",
	},

	// Protocol front-ends: the engine and their own helpers, never storage,
	// server or each other.
	"internal/sqs":           {"internal/advisor", "internal/auth/sigv4", "internal/clock", "internal/engine", "internal/flowrule", "internal/httpbody"},
	"internal/amqp":          {"internal/advisor", "internal/amqp/wire", "internal/auth/password", "internal/clock", "internal/engine", "internal/flowrule"},
	"internal/amqp/wire":     {},
	"internal/amqp/wire/gen": {},
	"internal/auth/sigv4":    {"internal/clock", "internal/httpbody"},
	"internal/auth/httpauth": {},
	"internal/auth/password": {},
	"internal/httpbody":      {"internal/clock"},
	// The publisher back-pressure rule both front-ends share: the standard
	// library only.
	"internal/flowrule": {},

	// Operator surfaces read the engine; never storage, server or a
	// protocol front-end.
	"internal/admin":     {"api", "internal/advisor", "internal/auth/sigv4", "internal/clock", "internal/engine"},
	"internal/advisor":   {"internal/engine"},
	"internal/alerts":    {"internal/clock", "internal/engine"},
	"internal/dashboard": {"internal/advisor", "internal/alerts", "internal/clock", "internal/engine"},
	"internal/metrics":   {"internal/buildinfo", "internal/clock", "internal/engine"},

	// The JSON wire types of the HTTP API (/sluice/v1/), shared by the
	// broker (admin), the CLI and the worker SDK. Its own module with no
	// dependency, so it imports nothing of Sluice either
	// (docs/adr/0011-wire-types-module.md).
	"api": {},

	// Client side (the admin CLI): the wire types, never the server-side
	// admin package.
	"internal/cli":   {"api", "internal/advisor"},
	"internal/bench": {},
	// Test support: starts real brokers through server, as cmd does;
	// imported only by _test.go files.
	"internal/brokertest": {"internal/brokertest/crashfs", "internal/server"},
	// The one poll helper of every package's tests; it imports only the
	// clock so that internal tests of brokertest's imports can use it.
	"internal/brokertest/poll": {"internal/clock"},
	// A test's own TLS certificate; nothing of Sluice, for the same
	// reason.
	"internal/brokertest/selfsigned": {},
	// A recording TCP proxy for tests; nothing of Sluice either.
	"internal/brokertest/tap": {},
	// The power-cut filesystem of tests (pebble's crashable MemFS without
	// its ReuseForWrite deadlock); nothing of Sluice, for the same reason.
	"internal/brokertest/crashfs": {},
	// Prometheus's promtool run by the tests of the shipped alerting rules;
	// nothing of Sluice, so that the metrics package's own tests can use it.
	"internal/brokertest/promtool": {},

	// The engine and storage.
	"internal/engine":            {"internal/clock", "internal/store"},
	"internal/store":             {},
	"internal/store/memstore":    {"internal/store"},
	"internal/store/pebblestore": {"internal/store"},
	"internal/store/storetest":   {"internal/store"},
	// The replicated store (issue 14) is storage too: a store.Store over
	// Raft, on pebblestore state stores; it knows nothing of the engine.
	"internal/cluster/raftstore": {"internal/cluster/nodeauth", "internal/store", "internal/store/pebblestore"},
	"internal/clock":             {},
	"internal/buildinfo":         {},
	"internal/lint":              {},

	// Test support: a log sink safe for concurrent writes. No entry lists
	// it, so only _test.go files (which this table does not check) may
	// import it.
	"internal/testlog": {},

	// Test-only packages: their non-test files (test/crash's process
	// harness, test/interop's client helpers) import no Sluice package;
	// the rest of their code is in _test.go files.
	"test/browser":       {},
	"test/cluster":       {},
	"test/clusterfaults": {},
	"test/crash":         {},
	"test/faults":        {},
	"test/hostile":       {},
	"test/interop":       {},
	"test/perf":          {},
	"test/scenario":      {},
	"test/soak":          {},

	// Measurement programs: AMQP clients of a broker, no Sluice package.
	"scripts/reject-storm": {},
}

// banned maps a package prefix (relative to the module; it covers the
// package and its subpackages) to standard-library or third-party imports
// its non-test files must not have, whatever allowed says.
var banned = map[string][]string{
	"internal/engine": {"net", "net/http"},
	"internal/store":  {"net/http"},
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := parseList(string(out))
	if len(pkgs) < len(allowed)/2 {
		t.Fatalf("go list found only %d packages; did the module path change?\n%s", len(pkgs), out)
	}
	for _, e := range check(mod, pkgs, allowed, banned) {
		t.Error(e)
	}
}

// parseList parses `go list -f '{{.ImportPath}} {{join .Imports " "}}'`
// output into import path → imports.
func parseList(out string) map[string][]string {
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if fields := strings.Fields(line); len(fields) > 0 {
			pkgs[fields[0]] = fields[1:]
		}
	}
	return pkgs
}

// check returns one message per layering violation among pkgs (import
// path → imports): a package of module (a path prefix ending in "/") that
// allow does not list, an import of another package of module that its
// entry does not name, an import banned for it, an allow entry that names
// no package of pkgs, and an allowed import that allow does not list.
func check(module string, pkgs map[string][]string, allow, ban map[string][]string) []string {
	var errs []string
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue
		}
		may, listed := allow[rel]
		if !listed {
			errs = append(errs, pkg+": not in the layering table: add it to the layering table in internal/lint/layering_test.go with the Sluice packages it may import (see docs/architecture.md)")
			continue
		}
		for _, imp := range pkgs[pkg] {
			if irel, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(may, irel) {
				errs = append(errs, pkg+" imports "+imp+": not allowed by the layering table (see docs/architecture.md)")
			}
			for _, prefix := range slices.Sorted(maps.Keys(ban)) {
				if !matches(rel, prefix) {
					continue
				}
				for _, b := range ban[prefix] {
					if matches(imp, b) {
						errs = append(errs, pkg+" imports "+imp+": banned for "+prefix+" by the layering (see docs/architecture.md)")
					}
				}
			}
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(allow)) {
		if _, ok := pkgs[module+rel]; !ok {
			errs = append(errs, module+rel+": in the layering table but not a package of the module: remove it from the table")
		}
		for _, a := range allow[rel] {
			if _, ok := allow[a]; !ok {
				errs = append(errs, module+rel+": the layering table allows "+a+", which the table does not list")
			}
		}
	}
	return errs
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
		{"internal/store/memstore", "internal/store", true},
		{"internal/storex", "internal/store", false},
	} {
		if got := matches(c.imp, c.ban); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.imp, c.ban, got, c.want)
		}
	}
}

// TestCheck shows that check catches each kind of violation, so that
// TestLayering passing means something.
func TestCheck(t *testing.T) {
	const m = "example.com/m/"
	allow := map[string][]string{
		"engine":      {"store"},
		"store":       {},
		"store/mem":   {"store"},
		"front":       {"engine", "typo"},
		"gone/before": {},
	}
	ban := map[string][]string{"engine": {"net/http"}, "store": {"net/http"}}
	pkgs := map[string][]string{
		m + "engine":    {"fmt", m + "store", "net/http"},          // banned std import
		m + "store":     {"errors", "github.com/x/y"},              // fine: third party needs no listing
		m + "store/mem": {m + "store", "net/http/httptest"},        // banned by the prefix "store"
		m + "front":     {m + "engine", m + "store", m + "front2"}, // two imports not allowed
		m + "front2":    {},                                        // not in the table
		"other.org/p":   {m + "store"},                             // not of the module: ignored
	}
	want := []string{
		m + "engine imports net/http: banned for engine by the layering (see docs/architecture.md)",
		m + "front imports " + m + "store: not allowed by the layering table (see docs/architecture.md)",
		m + "front imports " + m + "front2: not allowed by the layering table (see docs/architecture.md)",
		m + "front2: not in the layering table: add it to the layering table in internal/lint/layering_test.go with the Sluice packages it may import (see docs/architecture.md)",
		m + "store/mem imports net/http/httptest: banned for store by the layering (see docs/architecture.md)",
		m + "front: the layering table allows typo, which the table does not list",
		m + "gone/before: in the layering table but not a package of the module: remove it from the table",
	}
	got := check(m, pkgs, allow, ban)
	if !slices.Equal(got, want) {
		t.Errorf("check found\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
