package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBadInvocationsExitWithMessages(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"server", "--no-such-flag"}, 2, "no-such-flag"},
		{[]string{"server", "--log-level", "loud"}, 2, "log_level"},
		{[]string{"server", "--config", "/nonexistent/sluice.toml"}, 2, "config"},
		{[]string{"server", "extra"}, 2, "unexpected argument"},
		{[]string{"bench"}, 2, "usage"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("run(%q) = %d, output %q; want %d containing %q", c.args, code, out.String()+errb.String(), c.code, c.want)
		}
	}
	var out bytes.Buffer
	if run([]string{"version"}, &out, &out) != 0 || !strings.HasPrefix(out.String(), "sluice ") || !strings.Contains(out.String(), "(commit ") {
		t.Errorf("version: %q", out.String())
	}
	out.Reset()
	if run([]string{"version", "--json"}, &out, &out) != 0 || !strings.Contains(out.String(), `"commit":`) {
		t.Errorf("version --json: %q", out.String())
	}
}
