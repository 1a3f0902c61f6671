package browser

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/chromedp/chromedp"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/cli"
	"github.com/sluicemq/sluice/internal/cluster"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
	"github.com/sluicemq/sluice/test/crash"
)

// startCluster runs three cluster nodes in this process (cluster.New, as
// `sluice server` with a [cluster] section does) and returns them once
// every node routes to a serving leader.
func startCluster(t *testing.T, edits ...func(*server.Options)) []*cluster.Node {
	t.Helper()
	raft := brokertest.ReservePorts(t, 3)
	peers := []server.ClusterPeer{{ID: 1, Raft: raft[0]}, {ID: 2, Raft: raft[1]}, {ID: 3, Raft: raft[2]}}
	nodes := make([]*cluster.Node, 3)
	for i := range nodes {
		o := server.DefaultOptions()
		o.DataDir = t.TempDir()
		o.SQSListen = "127.0.0.1:0"
		o.AMQPListen = ""
		o.Cluster = server.ClusterConfig{NodeID: uint64(i + 1), Peers: peers}
		for _, e := range edits {
			e(&o)
		}
		n, err := cluster.New(cluster.Options{Server: o, TickInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node %d: %v", i+1, err)
			}
		})
		nodes[i] = n
	}
	poll.CheckFor(t, 30*time.Second, poll.True("every node sees a leader", func() bool {
		for _, n := range nodes {
			if st := n.Status(); st.Node.Leader == 0 {
				return false
			}
		}
		return true
	}))
	return nodes
}

// TestClusterPage opens the dashboard through a follower of a real
// three-node cluster: the Cluster page (in the nav only in cluster mode)
// lists the three members (voters) with the leader marked, the term, each member's
// commit and applied index and its lag behind the leader's log, and keeps
// them current; a queue's page shows its leader, voters and lag. A single
// node's dashboard has no Cluster link.
func TestClusterPage(t *testing.T) {
	ctx, cons := newBrowser(t)
	nodes := startCluster(t)
	var follower *cluster.Node
	var leader uint64
	for _, n := range nodes {
		if st := n.Status(); st.Node.Leader != st.Node.ID {
			follower = n
			leader = st.Node.Leader
		}
	}
	do(t, ctx, "open the cluster page through a follower", chromedp.Navigate("http://"+follower.HTTPAddr()+"/ui/#/cluster"))
	waitJS(t, ctx, "three members, each reported", `document.querySelectorAll('#cluster-members tr[data-member]').length === 3 &&
		[...document.querySelectorAll('#cluster-members .m-reported')].every((c) => c.innerText !== 'never')`, 20*time.Second)
	waitJS(t, ctx, "the Cluster link in the nav", `!document.getElementById('nav-cluster').hidden &&
		document.querySelector('[data-nav="cluster"]').getAttribute('aria-current') === 'page'`, 10*time.Second)

	check := func(what, expr string) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil || !ok {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
			t.Errorf("%s: %v (%s)\npage text:\n%s", what, err, expr, text)
		}
	}
	st := follower.Status().Node
	check("the leader tile", `document.getElementById('cluster-leader').innerText === '`+itoa(leader)+`'`)
	check("this node's tile", `document.getElementById('cluster-self').innerText === '`+itoa(st.ID)+` (follower)'`)
	check("the term tile", `document.getElementById('cluster-term').innerText === '`+itoa(st.Term)+`'`)
	check("the leader's row says leader, the others follower", `[...document.querySelectorAll('#cluster-members tr[data-member]')].every((r) =>
		r.querySelector('.m-role').innerText.toLowerCase() === (r.dataset.member === '`+itoa(leader)+`' ? 'leader' : 'follower'))`)
	check("every member is a voter (boot members)", `[...document.querySelectorAll('#cluster-members tr[data-member]')].every((r) =>
		r.querySelector('.m-membership').innerText.toLowerCase() === 'voter')`)
	check("the replication factor tile", `document.getElementById('cluster-rf').innerText === '3 voters'`)
	waitJS(t, ctx, "every member in sync", `[...document.querySelectorAll('#cluster-members tr[data-member]')].every((r) =>
		r.querySelector('.m-insync').innerText.toLowerCase() === 'yes')`, 20*time.Second)
	// Once every voter is in sync (right after an election the leader has
	// not heard from them all yet, and warns that one more loss would stop
	// the writes).
	check("no warning: every node has the same replication factor and is in sync", `document.querySelector('main .status-slot .notice') === null`)
	waitJS(t, ctx, "every member's clock offset from the leader, small on one machine", `[...document.querySelectorAll('#cluster-members tr[data-member]')].every((r) =>
		/^\+?-?[0-9]+\.[0-9] ms$/.test(r.querySelector('.m-clock').innerText) && Math.abs(parseFloat(r.querySelector('.m-clock').innerText)) < 500)`, 20*time.Second)
	check("no shards table without [cluster] shards", `document.getElementById('cluster-shards').closest('.table-wrap').hidden`)
	check("this node's row is marked", `document.querySelector('#cluster-members tr.self').dataset.member === '`+itoa(st.ID)+`'`)
	check("every member has a term, a commit and an applied index, a match and a lag",
		`[...document.querySelectorAll('#cluster-members tr[data-member]')].every((r) => ['.m-term', '.m-commit', '.m-applied', '.m-match', '.m-lag']
			.every((c) => /^[0-9,]+$/.test(r.querySelector(c).innerText)) && +r.querySelector('.m-commit').innerText.replace(/,/g, '') > 0)`)

	// Writes move the indexes; the page follows without a reload.
	before := text(t, ctx, `#cluster-members tr[data-member="`+itoa(leader)+`"] .m-commit`)
	b := startClusterClient(t, follower)
	for i := range 3 {
		b.createQueue(t, "q"+itoa(uint64(i)), nil, nil)
	}
	waitJS(t, ctx, "the leader's commit index moves", `document.querySelector('#cluster-members tr[data-member="`+itoa(leader)+`"] .m-commit').innerText !== '`+before+`'`, 20*time.Second)
	screenshot(t, ctx, shotDir(t), "cluster.png")

	// A queue's page says where it is replicated: the leader, the voters
	// with the replication factor, the standby learners (none of three
	// boot members) and each follower's lag.
	do(t, ctx, "open a queue's page", chromedp.Navigate("http://"+follower.HTTPAddr()+"/ui/#/queue/q0"))
	waitJS(t, ctx, "the queue's replication", `(() => { const r = document.getElementById('queue-replication');
		return r && !r.hidden && r.querySelector('.repl-leader') !== null; })()`, 20*time.Second)
	check("the queue's leader", `document.querySelector('#queue-replication .repl-leader').innerText === 'node `+itoa(leader)+`'`)
	check("the queue's voters", `document.querySelector('#queue-replication .repl-voters').innerText === '1, 2, 3 (replication factor 3)'`)
	check("no standby learners", `document.querySelector('#queue-replication .repl-standby').innerText === '—'`)
	check("each follower's lag", `(document.querySelector('#queue-replication .repl-lag').innerText.match(/node \d+: [0-9,]+/g) || []).length === 2`)
	screenshot(t, ctx, shotDir(t), "cluster-queue.png")
	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}

	// A single node: no Cluster link.
	single := startBroker(t, false)
	do(t, ctx, "open a single node's dashboard", chromedp.Navigate(single.url+"/ui/#/"))
	waitJS(t, ctx, "the overview", `document.getElementById('overview-summary') !== null`, 10*time.Second)
	waitJS(t, ctx, "the cluster-mode probe", `document.getElementById('nav-cluster').dataset.probed === '1'`, 10*time.Second)
	check("no Cluster link on a single node", `document.getElementById('nav-cluster').hidden`)

	// Nor a Replication section on its queue pages, and no request for
	// the cluster view (it answers 404 there: a console error). (This
	// broker runs without alerts, so its /sluice/v1/alerts 404 is expected.)
	single.createQueue(t, "solo", nil, nil)
	do(t, ctx, "open a single node's queue page", chromedp.Navigate(single.url+"/ui/#/queue/solo"))
	waitJS(t, ctx, "the queue page", `document.querySelector('main .tile') !== null && document.getElementById('nav-cluster').dataset.probed === '1'`, 10*time.Second)
	check("no Replication section on a single node", `document.getElementById('queue-replication').hidden`)
	for _, e := range cons.errors(false) {
		if strings.Contains(e, "/sluice/v1/cluster") {
			t.Fatalf("a single node's queue page asked for the cluster view: %s", e)
		}
	}
}

// TestClusterFactorMismatchWarned: a node configured with another
// replication_factor than the leader's is named in a warning on the
// Cluster page and in `sluice cluster status`, whichever node leads.
func TestClusterFactorMismatchWarned(t *testing.T) {
	ctx, cons := newBrowser(t)
	nodes := startCluster(t, func(o *server.Options) {
		if o.Cluster.NodeID == 3 {
			o.Cluster.ReplicationFactor = 5
		}
	})
	do(t, ctx, "open the cluster page", chromedp.Navigate("http://"+nodes[0].HTTPAddr()+"/ui/#/cluster"))
	waitJS(t, ctx, "a warning naming the node configured otherwise than the leader", `(() => {
		const n = document.querySelector('main .status-slot .notice-warn');
		return n !== null && (n.innerText.includes('Node 3 is configured with replication_factor 5, the leader with 3:') ||
			n.innerText.includes('Node 1 is configured with replication_factor 3, the leader with 5:') && n.innerText.includes('Node 2 is configured with replication_factor 3, the leader with 5:'));
	})()`, 20*time.Second)
	var out, errOut bytes.Buffer
	poll.CheckFor(t, 20*time.Second, func() error {
		out.Reset()
		errOut.Reset()
		if code := cli.Cluster(context.Background(), []string{"status", "--endpoint", "http://" + nodes[0].HTTPAddr()}, &cli.Env{Stdout: &out, Stderr: &errOut}); code != cli.ExitOK {
			return fmt.Errorf("sluice cluster status: exit %d: %s", code, errOut.String())
		}
		if !strings.Contains(out.String(), "warning: node 3 is configured with replication_factor 5, the leader with 3:") &&
			!strings.Contains(out.String(), "warning: node 1 is configured with replication_factor 3, the leader with 5:") {
			return fmt.Errorf("sluice cluster status printed no warning for the replication factors:\n%s", out.String())
		}
		return nil
	})
	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestClusterTwoVotersWarned: a cluster whose group has two voters
// (replication_factor 2 on three nodes: the third is a learner) is
// warned of on the Cluster page and by `sluice cluster status`: either
// voter down stops its writes.
func TestClusterTwoVotersWarned(t *testing.T) {
	ctx, cons := newBrowser(t)
	nodes := startCluster(t, func(o *server.Options) { o.Cluster.ReplicationFactor = 2 })
	do(t, ctx, "open the cluster page", chromedp.Navigate("http://"+nodes[1].HTTPAddr()+"/ui/#/cluster"))
	waitJS(t, ctx, "a warning that the cluster has two voters", `(() => {
		const n = document.querySelector('main .status-slot .notice-warn');
		return n !== null && /The cluster has 2 voters: a majority of 2 is 2, so either node down stops every write/.test(n.innerText);
	})()`, 20*time.Second)
	var out, errOut bytes.Buffer
	poll.CheckFor(t, 20*time.Second, func() error {
		out.Reset()
		errOut.Reset()
		if code := cli.Cluster(context.Background(), []string{"status", "--endpoint", "http://" + nodes[2].HTTPAddr()}, &cli.Env{Stdout: &out, Stderr: &errOut}); code != cli.ExitOK {
			return fmt.Errorf("sluice cluster status: exit %d: %s", code, errOut.String())
		}
		if !strings.Contains(out.String(), "warning: the cluster has 2 voters: a majority of 2 is 2") {
			return fmt.Errorf("sluice cluster status printed no warning for two voters:\n%s", out.String())
		}
		return nil
	})
	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestClusterPageShards: with [cluster] shards = 3 the Cluster page also
// lists every shard with its leader (a node; the leaders spread), the
// term, this node's role in it, and its voters; a cluster without shards
// has no such table (TestClusterPage's page shows none).
func TestClusterPageShards(t *testing.T) {
	ctx, cons := newBrowser(t)
	nodes := startCluster(t, func(o *server.Options) { o.Cluster.Shards = 3 })
	poll.CheckFor(t, 30*time.Second, poll.True("every shard has a leader", func() bool {
		for _, sh := range nodes[0].Status().Shards {
			if sh.Leader == 0 {
				return false
			}
		}
		return len(nodes[0].Status().Shards) == 3
	}))
	do(t, ctx, "open the cluster page", chromedp.Navigate("http://"+nodes[1].HTTPAddr()+"/ui/#/cluster"))
	waitJS(t, ctx, "three shards, each led, each with the three voters", `(() => {
		const rows = [...document.querySelectorAll('#cluster-shards tr[data-shard]')];
		return rows.length === 3 && !document.getElementById('cluster-shards').closest('.table-wrap').hidden &&
			rows.every((r) => /^[123]$/.test(r.querySelector('.s-leader').innerText) && r.querySelector('.s-voters').innerText === '1, 2, 3');
	})()`, 20*time.Second)
	waitJS(t, ctx, "this node's role in each shard, and leader where it leads", `[...document.querySelectorAll('#cluster-shards tr[data-shard]')].every((r) =>
		['leader', 'follower', 'candidate'].includes(r.querySelector('.s-role').innerText.toLowerCase()) &&
		(r.querySelector('.s-role').innerText.toLowerCase() === 'leader') === (r.querySelector('.s-leader').innerText === '2'))`, 20*time.Second)
	screenshot(t, ctx, shotDir(t), "cluster-shards.png")

	// The overview names each queue's shard and the node leading it,
	// whichever node serves the page: queues created through node 2,
	// the page served by node 3, the truth from the X-Sluice-Shard of
	// each queue's own answer and node 1's status.
	b := startClusterClient(t, nodes[1])
	shardOf := map[string]int{}
	for _, name := range []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot"} {
		b.createQueue(t, name, nil, nil)
		k, _, err := crash.ShardOf(context.Background(), "http://"+nodes[1].HTTPAddr(), b.urls[name])
		if err != nil {
			t.Fatal(err)
		}
		shardOf[name] = k
	}
	if used := distinct(shardOf); used < 2 {
		t.Fatalf("six queues placed on %d shard(s): the check below would not tell shards apart", used)
	}
	do(t, ctx, "open the overview", chromedp.Navigate("http://"+nodes[2].HTTPAddr()+"/ui/#/"))
	poll.CheckFor(t, 30*time.Second, func() error {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll('#queues-table tr[data-queue]')].map((r) =>
			[r.dataset.queue, ([...r.querySelectorAll('.tags .badge')].map((b) => b.textContent).find((s) => s.startsWith('shard')) || '')]))`))
		if err != nil {
			return err
		}
		shards := nodes[0].Status().Shards
		for name, k := range shardOf {
			if want := fmt.Sprintf("shard %d · node %d", k, shards[min(k, len(shards)-1)].Leader); got[name] != want {
				return fmt.Errorf("queue %s's row says %q, not %q (every row: %v)", name, got[name], want, got)
			}
		}
		return nil
	})

	// A queue's page shows its own shard's replication: that shard's
	// leader, not shard 0's (the cluster view's), with the shard's voters
	// and their lag. A queue of a shard led by another node than shard
	// 0's tells them apart.
	// The balancer spreads the leaders one per 10 s round; the queues are
	// on two shards or more, so one of them comes to be led by another
	// node than shard 0.
	var name string
	poll.CheckFor(t, 60*time.Second, func() error {
		shards := nodes[0].Status().Shards
		for n, k := range shardOf {
			if shards[k].Leader != 0 && shards[0].Leader != 0 && shards[k].Leader != shards[0].Leader {
				name = n
				return nil
			}
		}
		return fmt.Errorf("no queue on a shard led by another node than shard 0's yet: %+v", shards)
	})
	k := shardOf[name]
	do(t, ctx, "open the queue page of "+name, chromedp.Navigate("http://"+nodes[2].HTTPAddr()+"/ui/#/queue/"+name))
	poll.CheckFor(t, 30*time.Second, func() error {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => { const r = document.getElementById('queue-replication');
			if (!r || r.hidden || !r.querySelector('.repl-leader')) return [];
			return ['.repl-shard', '.repl-leader', '.repl-voters', '.repl-lag'].map((c) => (r.querySelector(c) || {}).innerText || ''); })()`))
		if err != nil {
			return err
		}
		leader := nodes[0].Status().Shards[k].Leader
		want := []string{fmt.Sprintf("shard %d", k), "node " + itoa(leader), "1, 2, 3 (replication factor 3)"}
		if len(got) != 4 || !slices.Equal(got[:3], want) || len(regexp.MustCompile(`node \d+: [0-9,]+`).FindAllString(got[3], -1)) != 2 {
			return fmt.Errorf("%s (shard %d) replication section %q, want %q and two followers' lag", name, k, got, want)
		}
		return nil
	})
	screenshot(t, ctx, shotDir(t), "queue-shard-replication.png")
	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// distinct counts the different values of m.
func distinct(m map[string]int) int {
	seen := map[int]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// startClusterClient is a broker handle for SQS calls through node n.
func startClusterClient(t *testing.T, n *cluster.Node) *broker {
	t.Helper()
	url := "http://" + n.HTTPAddr()
	return &broker{url: url, urls: map[string]string{}, sqs: sqs.New(sqs.Options{BaseEndpoint: aws.String(url), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})}
}

// TestClusterPageShowsAStoppedMember: a member whose Raft log write found
// the disk full stops (it takes no part in the cluster, knows no leader
// and so sends no reports); the leader learns it from a probe, and the
// Cluster page marks that member stopped and names it in a warning, as
// `sluice cluster status` does, and warns that with it out of sync one
// more voter lost stops every write. Once space is back the member restarts in
// place (cluster.Supervise, as `sluice server` runs it) and the page
// shows it as a follower again.
func TestClusterPageShowsAStoppedMember(t *testing.T) {
	ctx, cons := newBrowser(t)
	raft := brokertest.ReservePorts(t, 3)
	peers := []server.ClusterPeer{{ID: 1, Raft: raft[0]}, {ID: 2, Raft: raft[1]}, {ID: 3, Raft: raft[2]}}
	var cur [3]atomic.Pointer[cluster.Node]
	fss := make([]*pebblestore.FaultFS, 3)
	for i := range 3 {
		fss[i] = pebblestore.NewFaultFS(vfs.Default)
		fss[i].OnlyWAL(true) // a MANIFEST fault would make pebble stop the test process
		o := server.DefaultOptions()
		o.DataDir, o.StoreFS = t.TempDir(), fss[i]
		o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
		o.Cluster = server.ClusterConfig{NodeID: uint64(i + 1), Peers: peers}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- cluster.Supervise(runCtx, cluster.Options{Server: o, TickInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
				func(n *cluster.Node) { cur[i].Store(n) })
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node %d: %v", i+1, err)
			}
		})
	}
	var leader *cluster.Node
	victim := -1
	poll.CheckFor(t, 30*time.Second, poll.True("a leader and two followers that know it", func() bool {
		leader, victim = nil, -1
		for i := range cur {
			n := cur[i].Load()
			if n == nil {
				return false
			}
			switch st := n.Status().Node; {
			case st.Leader == 0:
				return false
			case st.Leader == st.ID:
				leader = n
			default:
				victim = i
			}
		}
		return leader != nil && victim >= 0
	}))
	vid := uint64(victim + 1)
	stoppedNode := cur[victim].Load()
	fss[victim].FailWrites(syscall.ENOSPC)
	b := startClusterClient(t, leader)
	poll.CheckFor(t, 20*time.Second, poll.True("the member's Raft node stopped", func() bool {
		b.createQueue(t, "q"+strconv.FormatInt(time.Now().UnixNano(), 10), nil, nil)
		return stoppedNode.Status().Node.Stopped
	}))

	role := `document.querySelector('#cluster-members tr[data-member="` + itoa(vid) + `"] .m-role')`
	do(t, ctx, "open the cluster page", chromedp.Navigate("http://"+leader.HTTPAddr()+"/ui/#/cluster"))
	waitJS(t, ctx, "the member marked stopped", `(() => { const r = `+role+`;
		return r !== null && r.innerText.toLowerCase() === 'stopped'; })()`, 20*time.Second)
	waitJS(t, ctx, "a warning naming it", `(() => {
		const n = document.querySelector('main .status-slot .notice-warn');
		return n !== null && n.innerText.includes('Node `+itoa(vid)+` is stopped: a write of its Raft log or state store failed');
	})()`, 10*time.Second)
	// The leader no longer has it in sync: two of three voters, one more
	// loss stops the writes.
	waitJS(t, ctx, "a warning that one more voter lost stops the writes", `(() => {
		const n = document.querySelector('main .status-slot .notice-warn');
		return n !== null && n.innerText.includes("2 of the cluster's 3 voters are in sync with the leader (not node `+itoa(vid)+`): one more voter lost stops every write");
	})()`, 10*time.Second)
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('#cluster-members tr[data-member]')].filter((r) =>
		r.querySelector('.m-role').innerText.toLowerCase() === 'stopped').length === 1`))
	if err != nil || !ok {
		t.Errorf("more than the faulted member marked stopped (%v)", err)
	}
	screenshot(t, ctx, shotDir(t), "cluster-stopped.png")
	var out, errOut bytes.Buffer
	if code := cli.Cluster(context.Background(), []string{"status", "--endpoint", "http://" + leader.HTTPAddr()}, &cli.Env{Stdout: &out, Stderr: &errOut}); code != cli.ExitOK {
		t.Fatalf("sluice cluster status: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"warning: node " + itoa(vid) + " is stopped:",
		"warning: 2 of the cluster's 3 voters are in sync with the leader (not node " + itoa(vid) + "): one more voter lost stops every write"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sluice cluster status printed no %q:\n%s", want, out.String())
		}
	}

	// Space back: the member restarts in place and reports again.
	fss[victim].Heal()
	waitJS(t, ctx, "the member a follower again", `(() => { const r = `+role+`;
		return r !== null && r.innerText.toLowerCase() === 'follower'; })()`, 30*time.Second)
	check := `document.querySelector('main .status-slot .notice-warn')`
	waitJS(t, ctx, "no warning left", `(() => { const n = `+check+`; return n === null || !n.innerText.includes('stopped') && !n.innerText.includes('voters are in sync'); })()`, 20*time.Second)
	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
