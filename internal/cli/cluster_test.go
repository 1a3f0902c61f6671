package cli

import "testing"

// The membership commands refuse bad invocations before calling anything,
// and report the broker's refusal (a single node has no membership
// endpoints) with a failure exit.
func TestClusterMembershipArgumentErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{nil, "missing command (status, add or remove)"},
		{[]string{"grow"}, `unknown command "grow"`},
		{[]string{"add"}, "missing argument"},
		{[]string{"add", "4"}, "missing argument"},
		{[]string{"add", "4", "127.0.0.1:7104", "extra"}, `unexpected argument "extra"`},
		{[]string{"add", "four", "127.0.0.1:7104"}, `node id "four" is not a number of 1 or more`},
		{[]string{"add", "0", "127.0.0.1:7104"}, `node id "0" is not a number of 1 or more`},
		{[]string{"add", "4", "127.0.0.1:7104", "--wait", "--wait-timeout", "0s"}, "--wait-timeout must be positive"},
		{[]string{"add", "4", "127.0.0.1:7104", "--wait-timeout", "soon"}, `invalid value "soon"`},
		{[]string{"remove"}, "missing argument"},
		{[]string{"remove", "-1"}, "flag provided but not defined"},
		{[]string{"remove", "x"}, `node id "x" is not a number of 1 or more`},
		{[]string{"remove", "2", "3"}, `unexpected argument "3"`},
		{[]string{"status", "extra"}, `unexpected argument "extra"`},
	} {
		wantExit(t, f.run(Cluster, "", tc.args...), ExitUsage, tc.stderr)
	}
	r := f.run(Cluster, "", "remove", "2")
	if r.code != ExitFail || r.stderr == "" {
		t.Fatalf("remove on a single node: exit %d, stderr %q", r.code, r.stderr)
	}
}
