package main

import (
	"bytes"
	"strings"
	"testing"
)

// The admin CLI commands are dispatched to internal/cli (tested there
// against a live admin API); here only the wiring is checked.
func TestAdminCommandsAreDispatched(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq"}, 2, "Usage: sluice dlq"},
		{[]string{"dlq", "help"}, 0, "redrive QUEUE"},
		{[]string{"dlq", "frobnicate"}, 2, "unknown command"},
		{[]string{"dlq", "peek"}, 2, "missing argument"},
		{[]string{"queues", "extra"}, 2, "unexpected argument"},
		{[]string{"queues", "--endpoint", "http://127.0.0.1:1"}, 1, "cannot reach Sluice"},
		{[]string{"help"}, 0, "sluice dlq <command>"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("run(%q) = %d, output %q; want %d containing %q", c.args, code, out.String()+errb.String(), c.code, c.want)
		}
	}
}
