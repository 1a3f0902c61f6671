// Package cli implements Sluice's operator commands, `sluice queues` and
// `sluice dlq …`, as clients of the admin HTTP API (docs/admin-api.md),
// whose wire types they share with the broker through package
// github.com/sluicemq/sluice/api. Each subcommand lives in its own file;
// cmd/sluice only dispatches to Queues and DLQ.
//
// Every command prints a human-readable table by default and the API's JSON
// with --json, for scripts. Exit codes: 0 success, 1 the command failed
// (the API refused it, the broker is unreachable, or a waited-for redrive
// did not complete), 2 bad usage.
//
// The endpoint is --endpoint, else $SLUICE_ENDPOINT, else
// http://127.0.0.1:9324 (the default listener of `sluice server`).
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultEndpoint is the admin API of a broker started with defaults.
const DefaultEndpoint = "http://127.0.0.1:9324"

// EndpointEnv names the environment variable that overrides
// DefaultEndpoint (a --endpoint flag overrides both).
const EndpointEnv = "SLUICE_ENDPOINT"

// Exit codes.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// Env is everything a command touches outside itself, so that tests run
// commands in-process. Nil fields take the defaults noted.
type Env struct {
	Stdin  io.Reader // nil: empty
	Stdout io.Writer // nil: discard
	Stderr io.Writer // nil: discard
	// Getenv reads the environment (for SLUICE_ENDPOINT); nil: no
	// environment.
	Getenv func(string) string
	// HTTPClient talks to the admin API; nil: a client without an overall
	// timeout (exports and imports of large queues take a while).
	HTTPClient *http.Client
	// Now is the time for relative times such as --since 2h; nil: time.Now.
	Now func() time.Time
	// PollInterval is how often redrive --wait polls its task; 0: 500 ms.
	PollInterval time.Duration
	// Terminal says Stderr is a terminal: progress is drawn as a bar that
	// redraws itself. Otherwise (pipes, CI logs, tests) each change of
	// progress is one plain line.
	Terminal bool
}

func (e *Env) withDefaults() *Env {
	out := *e
	if out.Stdin == nil {
		out.Stdin = strings.NewReader("")
	}
	if out.Stdout == nil {
		out.Stdout = io.Discard
	}
	if out.Stderr == nil {
		out.Stderr = io.Discard
	}
	if out.Getenv == nil {
		out.Getenv = func(string) string { return "" }
	}
	if out.HTTPClient == nil {
		out.HTTPClient = &http.Client{}
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.PollInterval <= 0 {
		out.PollInterval = 500 * time.Millisecond
	}
	return &out
}

// command is one parsed invocation: the common flags plus the environment.
type command struct {
	env      *Env
	fs       *flag.FlagSet
	endpoint string
	json     bool
}

// newCommand makes the flag set of a subcommand with the common flags
// (--endpoint, --json). usage is the synopsis and description printed by
// -h and on a usage error, before the flag list.
func newCommand(env *Env, name, usage string) *command {
	c := &command{env: env.withDefaults(), fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(c.env.Stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(c.env.Stderr, "%s\nFlags:\n", strings.TrimSpace(usage))
		c.fs.PrintDefaults()
	}
	ep := c.env.Getenv(EndpointEnv)
	if ep == "" {
		ep = DefaultEndpoint
	}
	c.fs.StringVar(&c.endpoint, "endpoint", ep, "admin API of the broker (env "+EndpointEnv+")")
	c.fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	return c
}

// parse parses args, allowing flags before, between and after positional
// arguments (sluice dlq peek orders-dlq --limit 5). It checks that there
// are between min and max positional arguments and returns them. When the
// invocation is bad (or -h was asked for) it has printed what is needed and
// ok is false; code is then the exit code.
func (c *command) parse(args []string, min, max int) (pos []string, code int, ok bool) {
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, ExitOK, false
			}
			return nil, ExitUsage, false // the flag package printed the problem and the usage
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	switch {
	case len(pos) < min:
		return nil, c.usageError("missing argument"), false
	case len(pos) > max:
		return nil, c.usageError("unexpected argument %q", pos[max]), false
	}
	return pos, ExitOK, true
}

// run parses args and, when the invocation is valid, calls fn with the
// positional arguments.
func (c *command) run(args []string, min, max int, fn func(pos []string) int) int {
	pos, code, ok := c.parse(args, min, max)
	if !ok {
		return code
	}
	return fn(pos)
}

// usageError prints a problem with the invocation and the usage, and
// returns ExitUsage.
func (c *command) usageError(format string, args ...any) int {
	fmt.Fprintf(c.env.Stderr, "%s: %s\n", c.fs.Name(), fmt.Sprintf(format, args...))
	c.fs.Usage()
	return ExitUsage
}

// fail prints err and returns ExitFail.
func (c *command) fail(err error) int {
	fmt.Fprintf(c.env.Stderr, "%s: %v\n", c.fs.Name(), err)
	return ExitFail
}

func (c *command) client() *client {
	return &client{base: strings.TrimRight(c.endpoint, "/"), hc: c.env.HTTPClient}
}

// printJSON writes v as indented JSON to stdout.
func (c *command) printJSON(v any) int {
	enc := json.NewEncoder(c.env.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return ExitOK
}
