package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/test/interop"
)

// TestBoto3ThroughFollowers runs the boto3 checks of test/interop
// (boto3_check.py: queues, attributes and their MD5s, receive counts,
// dead-lettering, batches, visibility) against a follower of a three-node
// cluster, then kills the leader with SIGKILL and runs them again through
// a survivor: boto3 needs only the endpoint, whichever node leads. Each
// interpreter that can import boto3 runs them (Debian's speaks Query, a
// newer botocore JSON 1.0). Without boto3 the test skips, unless
// SLUICE_REQUIRE_INTEROP=1 (as .ci/run sets).
func TestBoto3ThroughFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	pythons := interop.Pythons("boto3")
	if len(pythons) == 0 {
		if os.Getenv("SLUICE_REQUIRE_INTEROP") == "1" {
			t.Fatal("python3 with boto3 is not installed but SLUICE_REQUIRE_INTEROP=1")
		}
		t.Skip("python3 with boto3 is not installed")
	}
	script := filepath.Join(interop.Dir(), "boto3_check.py")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := startCluster(t, ctx, 3)
	leader := awaitLeader(t, ctx, nodes, 0)
	run := func(n *node) {
		t.Helper()
		for _, py := range pythons {
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			out, err := exec.CommandContext(cctx, py, script, n.srv.URL()).CombinedOutput()
			ccancel()
			if err != nil || !strings.Contains(string(out), "all checks passed") {
				t.Fatalf("%s through node %d (leader %d): %v\n%s", py, n.id, leader, err, out)
			}
			t.Logf("%s through node %d: %s", py, n.id, strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	victim, followers := splitLeader(nodes, leader)
	run(followers[0])
	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	leader = awaitLeader(t, ctx, followers, victim.id)
	for _, n := range followers {
		if n.id != leader { // the survivor that follows the new leader
			run(n)
		}
	}
}
