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
		{[]string{"server", "--node-id", "4", "--peers", "1=127.0.0.1:7101,2=127.0.0.1:7102"}, 2, "cluster.node_id: 4 is not among cluster.peers"},
		{[]string{"server", "--node-id", "1", "--peers", "1=127.0.0.1:7101,1=127.0.0.1:7102"}, 2, "id 1 is listed twice"},
		{[]string{"server", "--node-id", "1", "--peers", "one=127.0.0.1:7101"}, 2, "the id is not a number"},
		{[]string{"cluster"}, 2, "missing command"},
		{[]string{"cluster", "frobnicate"}, 2, "unknown command"},
		{[]string{"server", "--join", "--node-id", "4", "--peers", "4=127.0.0.1:7104"}, 2, "cluster.join: a joining node lists itself and at least one current member"},
		{[]string{"cluster", "add", "4"}, 2, "missing argument"},
		{[]string{"server", "--node-id", "1", "--peers", "1=127.0.0.1:7101", "--replication-factor", "12"}, 2, "cluster.replication_factor: 12 is not between 1 and 9"},
		{[]string{"server", "--node-id", "1", "--peers", "1=127.0.0.1:7101", "--shards", "65"}, 2, "cluster.shards: 65 is not between 1 and 64"},
		{[]string{"server", "--node-id", "1", "--peers", "1=127.0.0.1:7101", "--snapshot-rate", "1000"}, 2, "cluster.snapshot_rate: 1000 bytes a second is below 1048576"},
		{[]string{"server", "--node-id", "1", "--peers", "1=127.0.0.1:7101", "--placement", "some"}, 2, `cluster.placement: "some" is not "all" or "subset"`},
		{[]string{"server", "--node-id", "1", "--peers", "1=127.0.0.1:7101", "--placement", "subset"}, 2, `cluster.placement: "subset" needs cluster.shards above 1`},
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
