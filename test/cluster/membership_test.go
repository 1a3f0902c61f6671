package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cli"
	"github.com/sluicemq/sluice/internal/cluster"
	"github.com/sluicemq/sluice/test/crash"
)

// clusterCLI runs `sluice cluster args... --endpoint n` in-process.
func clusterCLI(ctx context.Context, n *node, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli.Cluster(ctx, append(args, "--endpoint", n.srv.URL()), &cli.Env{Stdout: &out, Stderr: &errOut})
	return code, out.String(), errOut.String()
}

// memberIDs are the ids n's /sluice/v1/cluster lists.
func memberIDs(ctx context.Context, n *node) ([]uint64, error) {
	rep, err := n.status(ctx)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, p := range rep.Peers {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// TestReplaceANode is the README's "replace a node" procedure on real
// processes: three nodes from the same peers, messages sent, a fourth
// started with --join and added with `sluice cluster add` through a
// follower. With the default replication factor of 3 it stays a learner
// (a standby copy). Then the leader (an original node) is killed with
// SIGKILL: after --replace-after (3 s here) the new leader promotes node 4
// and demotes the dead node, with no operator step; the operator then
// removes the dead node with `sluice cluster remove`. The cluster keeps
// serving through the new node, which has every message and the leader's
// applied index.
func TestReplaceANode(t *testing.T) { replaceANode(t) }

// TestReplaceANodeShards is TestReplaceANode with three shards: every
// membership change goes to every shard (its table, its learner, its
// replacement of the dead voter are shard 0's, which the test reads), and
// the queue lives on whichever shard its name hashes to.
func TestReplaceANodeShards(t *testing.T) { replaceANode(t, "--shards", "3") }

func replaceANode(t *testing.T, extra ...string) {
	if testing.Short() {
		t.Skip("starts four server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nodes := startClusterWith(t, ctx, 3, append([]string{"--replace-after", "3s"}, extra...)...)
	leader := awaitLeader(t, ctx, nodes, 0)

	const name = "replace-orders"
	if _, err := nodes[0].sqs().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	send := func(n *node, prefix string, count int) {
		t.Helper()
		url, err := n.sqs().GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		for k := range count {
			body := fmt.Sprintf("%s-%d-via-%d", prefix, k, n.id)
			if _, err := n.sqs().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String(body)}); err != nil {
				t.Fatalf("send %s: %v", body, err)
			}
			sent[body] = true
		}
	}
	send(nodes[0], "before", 40)

	// Node 4 starts in join mode: its peers are itself and the members.
	raft4 := brokertest.ReservePorts(t, 1)[0]
	var peers []string
	for _, n := range nodes {
		rep, err := n.status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Peers {
			if p.ID == n.id {
				peers = append(peers, fmt.Sprintf("%d=%s", p.ID, p.Raft))
			}
		}
	}
	peers = append(peers, "4="+raft4)
	n4 := &node{id: 4, dir: t.TempDir(), secret: nodes[0].secret}
	bin := crash.Binary(t)
	type startResult struct {
		srv *crash.Server
		err error
	}
	started := make(chan startResult, 1)
	received := false // started was read (by the test, or by the cleanup)
	go func() {
		// Start returns once /health answers, which needs the leader: only
		// after the add below.
		srv, err := crash.Start(ctx, bin, n4.dir, 60*time.Second, append([]string{
			"--join", "--node-id", "4", "--peers", strings.Join(peers, ","), "--cluster-secret-file", n4.secret, "--log-level", "debug", "--replace-after", "3s"}, extra...)...)
		started <- startResult{srv, err}
	}()
	t.Cleanup(func() {
		if !received {
			// The test failed before node 4 was up: wait for Start, which
			// kills the process itself when it gives up.
			n4.srv = (<-started).srv
		}
		if n4.srv != nil {
			_ = n4.srv.Kill() // the test is over
		}
		if t.Failed() {
			t.Logf("node 4 log:\n%s", crash.Tail(n4.dir))
		}
	})

	// Until it is added, node 4 answers for itself: joining, no members,
	// no leader.
	poll.CheckFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(n4.dir, "ready.json"))
		if err != nil {
			return err
		}
		var rf struct {
			SQS string `json:"sqs"`
		}
		if err := json.Unmarshal(b, &rf); err != nil {
			return err
		}
		var rep cluster.Report
		if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+rf.SQS+"/sluice/v1/cluster", &rep); err != nil {
			return err
		}
		if !rep.Node.Joining || rep.Node.Leader != 0 || len(rep.Peers) != 0 {
			t.Fatalf("node 4 before it is added: %+v", rep)
		}
		return nil
	})

	// Add it through a follower (forwarded to the leader).
	via := nodes[0]
	if via.id == leader {
		via = nodes[1]
	}
	if code, _, stderr := clusterCLI(ctx, via, "add", "2", "127.0.0.1:1"); code != cli.ExitFail || !strings.Contains(stderr, "MemberExists") {
		t.Fatalf("adding an existing id: exit %d, %s", code, stderr)
	}

	// A node that is added but never starts stays a learner: it does not
	// count in the quorum, `add --wait` gives up on it with a clear error,
	// and it can be removed again.
	raft5 := brokertest.ReservePorts(t, 1)[0]
	code, out, stderr := clusterCLI(ctx, via, "add", "5", raft5, "--wait", "--wait-timeout", "1s")
	if code != cli.ExitFail || !strings.Contains(stderr, "added node 5 (raft "+raft5+") as a learner") ||
		!strings.Contains(stderr, "node 5 is still a learner after waiting 1s") ||
		!strings.Contains(stderr, "node 5 has not reported to the leader yet") {
		t.Fatalf("sluice cluster add --wait of a node that never starts: exit %d\n%s%s", code, out, stderr)
	}
	for _, n := range nodes {
		poll.CheckFor(t, 20*time.Second, func() error {
			if code, out, stderr := clusterCLI(ctx, n, "status"); code != cli.ExitOK || !regexp.MustCompile(`(?m)^5 +`+regexp.QuoteMeta(raft5)+` +learner `).MatchString(out) {
				return fmt.Errorf("sluice cluster status on node %d with learner 5: exit %d\n%s%s", n.id, code, out, stderr)
			}
			return nil
		})
	}
	send(via, "with-learner", 5)
	if code, out, stderr := clusterCLI(ctx, via, "remove", "5"); code != cli.ExitOK || strings.Contains(out, raft5) {
		t.Fatalf("sluice cluster remove of a learner: exit %d\n%s%s", code, out, stderr)
	}

	// Node 4 is added as a learner and catches up; the cluster has its
	// three voters, so it stays a learner: --wait returns once it is in
	// sync.
	code, out, stderr = clusterCLI(ctx, via, "add", "4", raft4, "--wait")
	if code != cli.ExitOK || !strings.Contains(stderr, "added node 4 (raft "+raft4+") as a learner") ||
		!strings.Contains(out, "node 4 (raft "+raft4+") has caught up and stays a learner: the cluster already has its 3 voters") ||
		!regexp.MustCompile(`(?m)^4 +`+regexp.QuoteMeta(raft4)+` +learner`).MatchString(out) {
		t.Fatalf("sluice cluster add --wait: exit %d\n%s%s", code, out, stderr)
	}
	t.Logf("sluice cluster add --wait:\n%s%s", stderr, out)
	res := <-started
	received = true
	if res.err != nil {
		t.Fatalf("node 4: %v", res.err)
	}
	n4.srv = res.srv
	all := append(slices.Clone(nodes), n4)
	for _, n := range all {
		poll.CheckFor(t, 20*time.Second, func() error {
			rep, err := n.status(ctx)
			if err != nil {
				return err
			}
			var ids []uint64
			for _, p := range rep.Peers {
				ids = append(ids, p.ID)
				if want := map[bool]string{true: "learner", false: "voter"}[p.ID == 4]; p.Membership != want {
					return fmt.Errorf("node %d sees node %d as %q, want %q", n.id, p.ID, p.Membership, want)
				}
			}
			if !slices.Equal(ids, []uint64{1, 2, 3, 4}) {
				return fmt.Errorf("node %d members %v", n.id, ids)
			}
			return nil
		})
	}
	if code, out, stderr := clusterCLI(ctx, n4, "status"); code != cli.ExitOK || !strings.Contains(out, raft4) {
		t.Fatalf("sluice cluster status on node 4: exit %d\n%s%s", code, out, stderr)
	}
	send(n4, "via-new", 10)

	// Kill the leader (one of the original three). The two voters left
	// elect a leader, which replaces the silent voter with node 4 after
	// replace_after; then the operator removes the dead node.
	var victim *node
	var rest []*node
	for _, n := range all {
		if n.id == leader {
			victim = n
		} else {
			rest = append(rest, n)
		}
	}
	if err := victim.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	newLeader := awaitLeader(t, ctx, rest, leader)
	t.Logf("killed node %d; new leader: node %d", leader, newLeader)
	for _, n := range rest {
		poll.CheckFor(t, 30*time.Second, func() error {
			rep, err := n.status(ctx)
			if err != nil {
				return err
			}
			for _, p := range rep.Peers {
				want := "voter"
				if p.ID == leader {
					want = "learner"
				}
				if p.Membership != want {
					return fmt.Errorf("node %d sees node %d as %q, want %q (the dead voter replaced by node 4)", n.id, p.ID, p.Membership, want)
				}
			}
			return nil
		})
	}
	send(n4, "after-replacement", 10)
	poll.CheckFor(t, 20*time.Second, func() error {
		code, out, stderr := clusterCLI(ctx, n4, "remove", strconv.FormatUint(leader, 10), "--json")
		if code != cli.ExitOK {
			return fmt.Errorf("sluice cluster remove: exit %d %s%s", code, out, stderr)
		}
		var ans struct {
			Members []struct{ ID uint64 } `json:"members"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.Members) != 3 {
			t.Fatalf("sluice cluster remove --json printed %s (%v)", out, err)
		}
		return nil
	})
	for _, n := range rest {
		poll.CheckFor(t, 20*time.Second, func() error {
			ids, err := memberIDs(ctx, n)
			if err != nil || len(ids) != 3 || slices.Contains(ids, leader) {
				return fmt.Errorf("node %d members %v, %v", n.id, ids, err)
			}
			return nil
		})
	}
	send(n4, "after-kill", 10)
	if len(extra) > 0 {
		// Every shard, not only shard 0: node 4 is a voter in place of
		// the dead node, which is gone from every shard, on every node.
		for _, n := range rest {
			poll.CheckFor(t, 30*time.Second, func() error {
				rep, err := n.status(ctx)
				if err != nil {
					return err
				}
				if len(rep.Shards) != 3 {
					return fmt.Errorf("node %d lists %d shards", n.id, len(rep.Shards))
				}
				for _, sh := range rep.Shards {
					if !slices.Contains(sh.Voters, 4) || slices.Contains(sh.Voters, leader) || slices.Contains(sh.Learners, leader) || len(sh.Voters) != 3 || sh.Leader == 0 {
						return fmt.Errorf("node %d, shard %d: voters %v, learners %v, leader %d; want node 4 voting in place of node %d", n.id, sh.Shard, sh.Voters, sh.Learners, sh.Leader, leader)
					}
				}
				return nil
			})
		}
	}

	// The new node has the leader's applied index and every message.
	poll.CheckFor(t, 20*time.Second, func() error {
		var lead *node
		for _, n := range rest {
			if n.id == newLeader {
				lead = n
			}
		}
		lr, err := lead.status(ctx)
		if err != nil {
			return err
		}
		r4, err := n4.status(ctx)
		if err != nil {
			return err
		}
		if r4.Node.Applied < lr.Node.Applied {
			return fmt.Errorf("node 4 applied %d, leader %d", r4.Node.Applied, lr.Node.Applied)
		}
		return nil
	})
	url, err := n4.sqs().GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	poll.CheckFor(t, 40*time.Second, func() error {
		out, err := n4.sqs().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return err
		}
		for _, m := range out.Messages {
			if !sent[*m.Body] {
				return fmt.Errorf("received %q, never sent", *m.Body)
			}
			got[*m.Body] = true
			if _, err := n4.sqs().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
		if len(got) < len(sent) {
			return fmt.Errorf("%d of %d messages received", len(got), len(sent))
		}
		return nil
	})
}
