package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cli"
	"github.com/sluicemq/sluice/test/crash"
)

// TestSubsetAddANode is the README's "each shard on a subset of the
// nodes" with a node added, on real processes: three nodes started with
// --shards 3 --placement subset --replication-factor 2 (shard 1 on nodes
// 1 and 2, shard 2 on nodes 2 and 3), messages on a queue of each shard;
// a fourth node started with --join and added with `sluice cluster add`
// takes a shard from node 2, the busiest (the placement controller, one
// round of 10 s to add it, one to move node 2 out), holds its copy and
// serves every message through itself, and `sluice cluster status` on a
// node lists the shards it holds no copy of as not-held.
func TestSubsetAddANode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	// Every node, node 4 too, runs with the tightest snapshot budget
	// (one copy each way, 1 MiB/s), which the move must live with: a node
	// that joins a shard starts with an empty log, so its copy is a
	// snapshot.
	extra := []string{"--shards", "3", "--placement", "subset", "--replication-factor", "2",
		"--snapshot-streams", "1", "--snapshot-rate", "1048576"}
	nodes := startClusterWith(t, ctx, 3, extra...)
	awaitLeader(t, ctx, nodes, 0)

	// A queue with 20 messages on each of shards 1 and 2 (the shard of a
	// name: which node's status leads it does not matter here; every
	// message must come back through node 4).
	const perQueue = 20
	sent := map[string]bool{}
	var urls []string
	for i := range 6 {
		name := fmt.Sprintf("subset-orders-%d", i)
		out, err := nodes[i%3].sqs().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, aws.ToString(out.QueueUrl))
		for j := range perQueue {
			body := fmt.Sprintf("%s-%d", name, j)
			if _, err := nodes[0].sqs().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String(body)}); err != nil {
				t.Fatal(err)
			}
			sent[body] = true
		}
	}

	// Node 4 starts in join mode, then is added.
	raft4 := brokertest.ReservePorts(t, 1)[0]
	var peers []string
	rep, err := nodes[0].status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Peers {
		peers = append(peers, fmt.Sprintf("%d=%s", p.ID, p.Raft))
	}
	peers = append(peers, "4="+raft4)
	n4 := &node{id: 4, dir: t.TempDir(), secret: nodes[0].secret}
	started := make(chan *crash.Server, 1)
	go func() {
		srv, err := crash.Start(ctx, crash.Binary(t), n4.dir, 60*time.Second, append([]string{
			"--join", "--node-id", "4", "--peers", strings.Join(peers, ","), "--cluster-secret-file", n4.secret, "--log-level", "debug"}, extra...)...)
		if err != nil {
			t.Errorf("node 4: %v", err)
		}
		started <- srv
	}()
	t.Cleanup(func() {
		if srv := <-started; srv != nil {
			_ = srv.Kill() // the test is over
		}
		if t.Failed() {
			t.Logf("node 4 log:\n%s", crash.Tail(n4.dir))
		}
	})
	poll.CheckFor(t, 30*time.Second, func() error {
		code, out, stderr := clusterCLI(ctx, nodes[1], "add", "4", raft4)
		if code != cli.ExitOK {
			return fmt.Errorf("sluice cluster add: exit %d %s%s", code, out, stderr)
		}
		return nil
	})
	srv := <-started
	if srv == nil {
		t.FailNow()
	}
	n4.srv = srv
	started <- srv // for the cleanup

	// Shard 1 moves from node 2 to node 4: node 4 holds it, node 2 no
	// longer does (its copy deleted), and every node's status agrees.
	all := append(slices.Clone(nodes), n4)
	poll.CheckFor(t, 90*time.Second, func() error {
		for _, n := range all {
			rep, err := n.status(ctx)
			if err != nil {
				return err
			}
			for _, sh := range rep.Shards {
				if sh.Shard != 1 {
					continue
				}
				if !slices.Equal(sh.Voters, []uint64{1, 4}) || len(sh.Learners) > 0 {
					return fmt.Errorf("node %d sees shard 1 on voters %v, learners %v; want 1 and 4", n.id, sh.Voters, sh.Learners)
				}
				if held := !sh.NotHeld; held != (n.id == 1 || n.id == 4) {
					return fmt.Errorf("node %d holds shard 1: %v", n.id, held)
				}
			}
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(nodes[1].dir, "data", "shard-1")); err == nil {
		t.Fatal("node 2 was moved out of shard 1 but kept its copy")
	}
	// Node 4's copy of shard 1 came as a snapshot, under that budget (its
	// /metrics count the copies it installed, by shard).
	metrics, err := crash.GetText(ctx, http.DefaultClient, n4.srv.URL()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^sluice_raft_snapshots_total\{direction="installed",shard="1"\} ([0-9]+)$`).FindStringSubmatch(metrics); m == nil || m[1] == "0" {
		t.Fatalf("node 4 installed no snapshot of shard 1 (%v)", m)
	}
	code, out, stderr := clusterCLI(ctx, nodes[2], "status")
	if code != cli.ExitOK || !regexp.MustCompile(`(?m)^1 +[14] +\d+ +not-held +- +- +1,4 +-$`).MatchString(out) {
		t.Fatalf("sluice cluster status on node 3 (no copy of shard 1): exit %d\n%s%s", code, out, stderr)
	}
	// Shard 1's own members and their progress, from its leader, through
	// node 3, which holds no copy of it.
	poll.CheckFor(t, 10*time.Second, func() error {
		code, one, stderr := clusterCLI(ctx, nodes[2], "status", "--shard", "1")
		if code != cli.ExitOK || !regexp.MustCompile(`(?m)^shard 1: leader [14], `).MatchString(one) ||
			!regexp.MustCompile(`(?m)^1 +\S+ +voter +(yes|-) +\d+ +\d+ +yes$`).MatchString(one) ||
			!regexp.MustCompile(`(?m)^4 +`+regexp.QuoteMeta(raft4)+` +voter +(yes|-) +\d+ +\d+ +yes$`).MatchString(one) ||
			strings.Count(one, "voter") != 2 {
			return fmt.Errorf("sluice cluster status --shard 1 on node 3: exit %d\n%s%s", code, one, stderr)
		}
		return nil
	})

	// Every message, through node 4. A receive whose answer is lost (a
	// forward cut by a leadership the balancer moves meanwhile; the SDK
	// then retries) leaves its messages in flight until their visibility
	// timeout, as SQS does: they come back 5 s later, so the test receives
	// until it has seen every message, not until a first empty receive.
	got := map[string]bool{}
	poll.CheckFor(t, 60*time.Second, func() error {
		for _, url := range urls {
			for {
				out, err := n4.sqs().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 5, WaitTimeSeconds: 1})
				if err != nil {
					return fmt.Errorf("receive through node 4: %w", err)
				}
				if len(out.Messages) == 0 {
					break
				}
				for _, m := range out.Messages {
					if !sent[aws.ToString(m.Body)] {
						t.Fatalf("received %q, never sent", aws.ToString(m.Body))
					}
					got[aws.ToString(m.Body)] = true
				}
			}
		}
		if len(got) < len(sent) {
			return fmt.Errorf("%d of %d messages received through node 4", len(got), len(sent))
		}
		return nil
	})
	t.Logf("%d messages of %d queues received through node 4; status on node 3:\n%s", len(got), len(urls), out)
}
