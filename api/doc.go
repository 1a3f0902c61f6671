// Package api is the JSON wire format of Sluice's own HTTP API, mounted at
// Prefix (/sluice/v1/): the admin API that the sluice CLI and the dashboard
// use, and the failure-report extension (POST /sluice/v1/failures) that the
// worker SDK calls. The broker encodes and decodes these types; the CLI and
// the worker SDK decode and encode exactly the same ones, so a field cannot
// be renamed on one side only. docs/admin-api.md describes the format for
// humans.
//
// The package is its own Go module (github.com/sluicemq/sluice/api) with no
// dependency outside the standard library, so that both the broker module
// and the worker SDK module can require it without either inheriting the
// other's dependencies (docs/adr/0011-wire-types-module.md).
//
// # Compatibility
//
// The JSON these types produce is a contract with deployed clients: a
// field's name, its omitempty and its type do not change within /sluice/v1/.
// wire_test.go pins the bytes of every type. Times are RFC 3339 with
// nanoseconds, in UTC; a time that is not known is omitted rather than sent
// as the zero time. Durations are seconds.
package api
