package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cli"
)

// TestCheckStopOnARealCluster: `sluice cluster check-stop` against three
// real nodes with three shards (shard 0 judged from the cluster view, the
// others from each shard's view read through the node asked): any node
// may be stopped while all three are in sync; once node 3 is down,
// stopping node 1 would leave every shard one voter in sync (exit 1,
// each shard named), while stopping node 3 again changes nothing (exit 0).
func TestCheckStopOnARealCluster(t *testing.T) {
	nodes, stop := shardedNodes(t)
	checkStop := func(via *Node, id int) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Cluster(context.Background(), []string{"check-stop", "--endpoint", "http://" + via.HTTPAddr(), fmt.Sprint(id)},
			&cli.Env{Stdout: &out, Stderr: &errOut})
		return code, out.String() + errOut.String()
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		for id := 1; id <= 3; id++ {
			if code, out := checkStop(nodes[1], id); code != cli.ExitOK || !strings.Contains(out, fmt.Sprintf("safe to stop node %d", id)) {
				return fmt.Errorf("check-stop %d with every node up: exit %d:\n%s", id, code, out)
			}
		}
		return nil
	})
	if err := stop(2); err != nil {
		t.Fatalf("stopping node 3: %v", err)
	}
	poll.CheckFor(t, 20*time.Second, func() error {
		code, out := checkStop(nodes[0], 1)
		if code != cli.ExitFail {
			return fmt.Errorf("check-stop 1 with node 3 down: exit %d:\n%s", code, out)
		}
		for k := range 3 {
			if want := fmt.Sprintf("shard %d: 1 of its 3 voters would be left in sync, below the majority of 2", k); !strings.Contains(out, want) {
				return fmt.Errorf("check-stop 1 with node 3 down: no %q in:\n%s", want, out)
			}
		}
		return nil
	})
	if code, out := checkStop(nodes[1], 3); code != cli.ExitOK {
		t.Errorf("check-stop 3 with node 3 already down: exit %d:\n%s", code, out)
	}
}
