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

// TestAMQPClientsThroughFollowers runs test/interop's pika and amqplib
// checks (confirms, prefetch consumers, requeue, dead-lettering with
// x-death, TTL, limits, exchanges, returns, channel errors, RPC and direct
// reply-to) through a follower of a three-node cluster, whose AMQP
// listener relays every connection to the leader (of shard 0, with three
// shards); then kills that leader with SIGKILL and runs them again
// through the survivor that follows the new one. The clients need only the URL, whichever node leads. A client
// that is missing skips its part, unless SLUICE_REQUIRE_INTEROP=1 (as
// .ci/run sets).
func TestAMQPClientsThroughFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	var clients []amqpClient
	for _, py := range interop.Pythons("pika") {
		clients = append(clients, amqpClient{"pika (" + py + ")", interop.Dir(), []string{py, filepath.Join(interop.Dir(), "pika_check.py")}})
	}
	if dir := interop.Amqplib(t); dir != "" {
		clients = append(clients, amqpClient{"amqplib", dir, []string{"node", "check.js"}})
	}
	if len(clients) < 2 {
		if os.Getenv("SLUICE_REQUIRE_INTEROP") == "1" {
			t.Fatalf("pika or amqplib is missing (found %d clients) but SLUICE_REQUIRE_INTEROP=1", len(clients))
		}
		if len(clients) == 0 {
			t.Skip("neither pika nor node with amqplib is installed")
		}
	}
	t.Run("one shard", func(t *testing.T) { amqpClientsThroughFollowers(t, clients) })
	t.Run("three shards", func(t *testing.T) { amqpClientsThroughFollowers(t, clients, "--shards", "3") })
}

// amqpClient is a client script: argv (the AMQP URL is appended) run in
// dir.
type amqpClient struct {
	name string
	dir  string
	argv []string
}

func amqpClientsThroughFollowers(t *testing.T, clients []amqpClient, extra ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := startClusterWith(t, ctx, 3, extra...)
	leader := awaitLeader(t, ctx, nodes, 0)
	run := func(n *node) {
		t.Helper()
		for _, c := range clients {
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			cmd := exec.CommandContext(cctx, c.argv[0], append(c.argv[1:], "amqp://guest:guest@"+n.amqp+"/")...)
			cmd.Dir = c.dir
			out, err := cmd.CombinedOutput()
			ccancel()
			if err != nil || !strings.Contains(string(out), "all checks passed") {
				t.Fatalf("%s through node %d (leader %d): %v\n%s", c.name, n.id, leader, err, out)
			}
			t.Logf("%s through node %d (leader %d): %d checks passed", c.name, n.id, leader, strings.Count(string(out), "\nok: ")+1)
		}
	}
	victim, followers := splitLeader(nodes, leader)
	run(followers[0])
	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	leader = awaitLeader(t, ctx, followers, victim.id)
	for _, n := range followers {
		if n.id != leader {
			run(n)
		}
	}
}
