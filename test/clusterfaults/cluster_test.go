package clusterfaults

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/cluster"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/test/crash"
	"github.com/sluicemq/sluice/test/faults"
)

// TestMain builds the server once unless -short or SLUICE_BIN is set,
// with the faultclock tag: a node's clock can then be offset
// (SLUICE_FAULT_CLOCK_OFFSET, cmd/sluice/faultclock.go).
func TestMain(m *testing.M) {
	os.Exit(crash.Main(m, "sluice-clusterfaults-bin-", "faultclock"))
}

// member is one node of the cluster: its process (replaced at each
// restart) and the SQS client bound to its public listener.
type member struct {
	id   uint64
	dir  string
	raft string // its real Raft listener; peers reach it only through Links

	mu     sync.Mutex
	srv    *crash.Server     // nil while killed
	client *sqs.Client       // bound to srv's public listener
	amqp   string            // amqp:// URL of srv's public AMQP listener
	urls   map[string]string // queue name → URL, asked through this node
	paused bool              // SIGSTOPped
}

// current returns the node's process and client (nil while killed).
func (m *member) current() (*crash.Server, *sqs.Client) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv, m.client
}

// queueURL returns the URL of queue as this node names it, asking the
// node once per process.
func (m *member) queueURL(ctx context.Context, queue string) (string, error) {
	m.mu.Lock()
	srv, client, u := m.srv, m.client, m.urls[queue]
	m.mu.Unlock()
	if u != "" {
		return u, nil
	}
	if srv == nil {
		return "", fmt.Errorf("node %d is down", m.id)
	}
	out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	if m.srv == srv {
		m.urls[queue] = aws.ToString(out.QueueUrl)
	}
	m.mu.Unlock()
	return aws.ToString(out.QueueUrl), nil
}

// testCluster is n sluice processes whose Raft links all pass through
// Links: links[i][j] carries node i's messages to node j. The requests and
// AMQP connections the other nodes forward to node j while it leads pass
// through inHTTP[j] and inAMQP[j] (its internal listeners are on fixed
// ports, and it advertises these Links instead): one Link per node and
// protocol, shared by every node that forwards to it. With shards, the
// requests to shard k > 0's server on node j pass through
// inShard[j][k-1] (shard k listens and advertises on the configured
// ports plus k).
type testCluster struct {
	t              testing.TB
	bin            string
	nodes          []*member
	links          [][]*Link
	inHTTP, inAMQP []*Link
	inShard        [][]*Link
	timeout        time.Duration // SQS client request timeout
	// skew is each node's clock offset (nil: none); a node with one runs
	// with SLUICE_FAULT_CLOCK_OFFSET, which a binary built with the
	// faultclock tag honours (start checks that it did).
	skew []time.Duration
	// shards is the nodes' [cluster] shards.
	shards int
	// subset: the nodes run with [cluster] placement = "subset"
	// (envPlacement): each shard above 0 on three of them, no SQS queue
	// on shard 0, and a node's status lists only its own shards.
	subset bool
}

// clientLinks are node i's inbound client Links.
func (c *testCluster) clientLinks(i int) []*Link {
	return append([]*Link{c.inHTTP[i], c.inAMQP[i]}, c.inShard[i]...)
}

// allLinks are every Link, by rows.
func (c *testCluster) allLinks() [][]*Link {
	rows := append([][]*Link{c.inHTTP, c.inAMQP}, c.links...)
	return append(rows, c.inShard...)
}

// logs reads every node's log, for the end-of-run reports (a node whose
// log cannot be read is left out of them).
func (c *testCluster) logs() [][]byte {
	var out [][]byte
	for _, m := range c.nodes {
		if b, err := os.ReadFile(filepath.Join(m.dir, "server.log")); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// raftSummary counts, from the nodes' logs, the snapshots they sent
// and installed (the low truncation thresholds of clusterTOML are meant to
// make the faults exercise them), and the voter changes leaders proposed
// (with 5 nodes, replication_factor and replace_after make the faults
// exercise them).
func raftSummary(logs [][]byte) string {
	var sent, installed, replaced, promoted, demoted int
	for _, b := range logs {
		sent += bytes.Count(b, []byte("raftstore: sending a snapshot"))
		installed += bytes.Count(b, []byte("raftstore: installed a snapshot"))
		replaced += bytes.Count(b, []byte("raftstore: replacing a silent voter"))
		promoted += bytes.Count(b, []byte("raftstore: promoting a caught-up learner"))
		demoted += bytes.Count(b, []byte("raftstore: demoting a voter"))
	}
	return fmt.Sprintf("snapshots sent %d, installed %d; voter changes proposed: silent voters replaced %d, other promotions %d, demotions %d",
		sent, installed, replaced, promoted, demoted)
}

// settleSummary counts, from the nodes' logs, the AMQP connections a
// server closed because applying a consumer's basic.ack, basic.reject or
// basic.nack failed (541, as when a leader loses its term with the write
// in flight): the path where a basic.qos reply once proved acks never
// applied (docs/reliability.md), so that a run shows whether it took it.
func settleSummary(logs [][]byte) string {
	names := map[string]string{"80": "basic.ack", "90": "basic.reject", "120": "basic.nack"}
	counts := map[string]int{}
	for _, b := range logs {
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, `msg="amqp: closing connection"`) || !strings.Contains(line, " code=541 ") || !strings.Contains(line, " class=60 ") {
				continue
			}
			if _, m, ok := strings.Cut(line, " method="); ok {
				counts[names[strings.TrimSpace(m)]]++
			}
		}
	}
	return fmt.Sprintf("AMQP connections closed because a settlement failed: basic.ack %d, basic.reject %d, basic.nack %d",
		counts["basic.ack"], counts["basic.reject"], counts["basic.nack"])
}

// clockSummary counts, from the nodes' logs, the leaderships that started
// on a clock far (over 0.5 s) from the leading node's own, by where that
// clock came from (the node's own measurement of the previous leader's,
// the voters' answers to its clock probe), and those that started on the
// node's own clock for want of either (internal/cluster/timeline.go): with
// a skewed node, the first kind are its leaderships done right, the last
// a risk of early redeliveries.
func clockSummary(logs [][]byte) string {
	var measured, estimates, median, own int
	for _, b := range logs {
		for _, line := range bytes.Split(b, []byte("\n")) {
			switch {
			case bytes.Contains(line, []byte("leading on this node's own clock")):
				own++
			case !bytes.Contains(line, []byte("leading on a clock far from this node's")):
			case bytes.Contains(line, []byte("as this node measured it")):
				measured++
			case bytes.Contains(line, []byte("as the voters measured it")):
				estimates++
			case bytes.Contains(line, []byte("the median of the voters' clocks\"")):
				median++
			}
		}
	}
	return fmt.Sprintf("leaderships on a clock far from the node's own: %d from its measurement, %d from the voters' estimates, %d from the median of their clocks; on its own clock, unmeasured: %d",
		measured, estimates, median, own)
}

// panics returns the lines of the nodes' logs that tell of a panic: one
// net/http recovered in a handler ("http: panic serving", which costs the
// client its connection), or one that crashed the process (the runtime's
// "panic: " or "fatal error: " at the start of a line, on stderr, which
// the log file takes too). Each is a broker bug whatever the faults: a
// SIGKILL leaves no such line.
func (c *testCluster) panics() []string {
	var out []string
	for _, m := range c.nodes {
		b, err := os.ReadFile(filepath.Join(m.dir, "server.log"))
		if err != nil {
			continue // a node that never started has no log; its start failed the run already
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "http: panic serving") || strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
				out = append(out, fmt.Sprintf("node %d: %s", m.id, line[:min(len(line), 400)])) // the message, not the whole stack
			}
		}
	}
	return out
}

// clusterTOML is every node's config file; the flags supply the rest.
// With 5 nodes the replication factor of 3 leaves two learners, and a
// voter held down or cut off for more than replace_after (the faults hold
// 1-5 s) is replaced by one of them: the faults then also run against
// promotions and demotions.
const clusterTOML = `[cluster]
log_compact_entries = 1000
log_keep_entries = 100
replication_factor = 3
replace_after = "2s"
`

// startCluster starts size nodes with their Links and waits until every
// node answers /health (through a leader).
func startCluster(t testing.TB, ctx context.Context, size int, timeout time.Duration) *testCluster {
	t.Helper()
	return startSkewedCluster(t, ctx, size, timeout, nil, 1, false)
}

// startSkewedCluster is startCluster with node i's clock offset by skew[i]
// (skew nil or shorter: none) and [cluster] shards. With several shards
// each node's internal HTTP listeners are on a block of consecutive
// ports (shard k on the base plus k), advertised as another block, of
// Links, in front of them: the requests forwarded between nodes for every
// shard pass through Links that the faults cut. encrypt sets [cluster]
// encrypt on every node.
func startSkewedCluster(t testing.TB, ctx context.Context, size int, timeout time.Duration, skew []time.Duration, shards int, encrypt bool) *testCluster {
	t.Helper()
	bin := crash.Binary(t)
	c := &testCluster{t: t, bin: bin, timeout: timeout, skew: skew, shards: shards, subset: subsetPlacement(t) && shards > 1}
	// A node's real Raft address must be known before the Links and the
	// peers' flags are made.
	ports := brokertest.NewPorts(t) // one set: no port reserved twice below
	raft := ports.Reserve(size)
	// Each node's internal listeners (HTTP, AMQP) on fixed ports, so that
	// a Link can stand in front of each. With shards, blocks of
	// consecutive ports: each node's HTTP listeners, and the Links that
	// it advertises for them (the AMQP listener is shard 0's alone).
	internal := ports.Reserve(2 * size)
	var blocks []string
	if shards > 1 {
		blocks = ports.Blocks(2*size, shards)
		for i := range size {
			internal[2*i] = blocks[i] // shard 0's port, the block's first
		}
	}
	// Every node holds the same cluster secret, so the faults run with
	// the node handshake on every Raft connection and internal listener.
	secret := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("fault-harness-secret-", 3)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := clusterTOML + fmt.Sprintf("secret_file = %q\nshards = %d\nencrypt = %v\n", secret, shards, encrypt)
	if c.subset {
		config += "placement = \"subset\"\n"
	}
	for i := range size {
		m := &member{id: uint64(i + 1), dir: t.TempDir(), raft: raft[i]}
		var h *Link
		var err error
		if shards > 1 {
			h, err = ListenOn(blocks[size+i], internal[2*i])
		} else {
			h, err = Listen(internal[2*i])
		}
		if err != nil {
			t.Fatal(err)
		}
		var more []*Link // shards 1 … shards-1
		for k := 1; k < shards; k++ {
			l, err := ListenOn(server.ShardInternalAddr(blocks[size+i], k), server.ShardInternalAddr(internal[2*i], k))
			if err != nil {
				t.Fatal(err)
			}
			more = append(more, l)
		}
		c.inShard = append(c.inShard, more)
		a, err := Listen(internal[2*i+1])
		if err != nil {
			t.Fatal(err)
		}
		c.inHTTP, c.inAMQP = append(c.inHTTP, h), append(c.inAMQP, a)
		// Raft log truncation far below its defaults (10,000 / 5,000
		// entries), so that the run compacts every few seconds and a node
		// that was down or cut off catches up by a snapshot, not only from
		// the log: the faults then exercise snapshot streaming and install.
		node := config + fmt.Sprintf("internal_http_listen = %q\ninternal_http_advertise = %q\ninternal_amqp_listen = %q\ninternal_amqp_advertise = %q\n",
			internal[2*i], h.Addr(), internal[2*i+1], a.Addr())
		if err := os.WriteFile(filepath.Join(m.dir, "cluster.toml"), []byte(node), 0o644); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, m)
	}
	c.links = make([][]*Link, size)
	for i := range size {
		c.links[i] = make([]*Link, size)
		for j := range size {
			if i == j {
				continue
			}
			l, err := Listen(c.nodes[j].raft)
			if err != nil {
				t.Fatal(err)
			}
			c.links[i][j] = l
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpStuck(t)
		}
		for _, m := range c.nodes {
			m.mu.Lock()
			if m.paused && m.srv != nil {
				_ = syscall.Kill(m.srv.PID, syscall.SIGCONT) // so that SIGKILL ends it
			}
			if m.srv != nil {
				_ = m.srv.Kill() // the test is over; its outcome is decided
			}
			m.mu.Unlock()
		}
		for _, row := range c.allLinks() {
			for _, l := range row {
				if l != nil {
					_ = l.Close() // as above
				}
			}
		}
		if t.Failed() {
			for _, m := range c.nodes {
				t.Logf("node %d log:\n%s", m.id, crash.Tail(m.dir))
				t.Logf("node %d leadership events (to set a violation's deliveries against):\n%s", m.id, leadershipEvents(m.dir, 200))
			}
		}
	})
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(ctx, i) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	return c
}

// peers is node i's --peers: itself at its real address, every other node
// at the Link from i to it.
func (c *testCluster) peers(i int) string {
	var out []string
	for j, m := range c.nodes {
		addr := m.raft
		if j != i {
			addr = c.links[i][j].Addr()
		}
		out = append(out, fmt.Sprintf("%d=%s", m.id, addr))
	}
	return strings.Join(out, ",")
}

// start (re)starts node i on its data directory and waits for /health.
func (c *testCluster) start(ctx context.Context, i int) error {
	m := c.nodes[i]
	var env []string
	if i < len(c.skew) && c.skew[i] != 0 {
		env = []string{"SLUICE_FAULT_CLOCK_OFFSET=" + c.skew[i].String()}
	}
	srv, err := crash.StartEnv(ctx, c.bin, m.dir, 60*time.Second, env,
		"--config", filepath.Join(m.dir, "cluster.toml"),
		"--node-id", strconv.FormatUint(m.id, 10), "--raft-listen", m.raft, "--peers", c.peers(i))
	if err != nil {
		return err
	}
	if env != nil {
		if b, err := os.ReadFile(filepath.Join(m.dir, "server.log")); err != nil || !bytes.Contains(b, []byte("this node's clock is offset")) {
			_ = srv.Kill() // the run cannot test what it claims
			return fmt.Errorf("node %d ignored %s: was %s built without -tags faultclock?", m.id, env[0], c.bin)
		}
	}
	m.mu.Lock()
	m.srv, m.client, m.amqp, m.urls, m.paused = srv, newClient(srv.URL(), c.timeout), srv.AMQPURL(), map[string]string{}, false
	m.mu.Unlock()
	return nil
}

// startAll starts the nodes of set at once (each start waits for its node
// to be healthy, which needs a leader, which may need the others) and
// returns the first error.
func (c *testCluster) startAll(ctx context.Context, set []int) error {
	errs := make(chan error, len(set))
	for _, i := range set {
		go func() { errs <- c.start(ctx, i) }()
	}
	var first error
	for range set {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// down marks node i down and returns its process, resumed if it was
// paused (nil when it was already down), for the caller to end.
func (c *testCluster) down(i int) *crash.Server {
	m := c.nodes[i]
	m.mu.Lock()
	srv, paused := m.srv, m.paused
	m.srv, m.client, m.amqp, m.urls, m.paused = nil, nil, "", nil, false
	m.mu.Unlock()
	if srv != nil && paused {
		// A stopped process cannot handle SIGTERM (SIGKILL works on it
		// anyway).
		_ = syscall.Kill(srv.PID, syscall.SIGCONT)
	}
	return srv
}

// kill SIGKILLs node i and marks it down.
func (c *testCluster) kill(i int) error {
	if srv := c.down(i); srv != nil {
		return srv.Kill()
	}
	return nil
}

// killAll SIGKILLs the nodes of set, one after the other (each is gone
// in a few milliseconds), and returns the first error.
func (c *testCluster) killAll(set []int) error {
	for _, j := range set {
		if err := c.kill(j); err != nil {
			return err
		}
	}
	return nil
}

// stop stops node i gracefully (SIGTERM; a leader hands its leadership
// over first) and marks it down; a node that does not exit within 15 s is
// killed and the error returned.
func (c *testCluster) stop(i int) error {
	if srv := c.down(i); srv != nil {
		return srv.Stop(15 * time.Second)
	}
	return nil
}

// skewed is the index of the node whose clock is offset, or -1.
func (c *testCluster) skewed() int {
	for i, d := range c.skew {
		if d != 0 {
			return i
		}
	}
	return -1
}

// signal sends SIGSTOP or SIGCONT to node i.
func (c *testCluster) signal(i int, sig syscall.Signal) error {
	m := c.nodes[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil {
		return fmt.Errorf("node %d is down", m.id)
	}
	m.paused = sig == syscall.SIGSTOP
	return syscall.Kill(m.srv.PID, sig)
}

// isolate sets every link from (out) and to (in) node i; in includes the
// requests and connections forwarded to node i.
func (c *testCluster) isolate(i int, out, in bool, mode Mode, delay time.Duration) {
	for j := range c.nodes {
		if j == i {
			continue
		}
		if out {
			c.links[i][j].Set(mode, delay)
		}
		if in {
			c.links[j][i].Set(mode, delay)
		}
	}
	if in {
		for _, l := range c.clientLinks(i) {
			l.Set(mode, delay)
		}
	}
}

// split sets mode on every link between a node with in[i] and one
// without, both ways, and on the inbound client Links of the nodes with
// in[i] (the minority: a leader cut off with it is unreachable for the
// majority's forwards too; the Links are shared, so the minority's own
// forwards to it are cut as well).
func (c *testCluster) split(in []bool, mode Mode) {
	for i := range c.nodes {
		for j := range c.nodes {
			if i != j && in[i] != in[j] {
				c.links[i][j].Set(mode, 0)
			}
		}
		if in[i] {
			for _, l := range c.clientLinks(i) {
				l.Set(mode, 0)
			}
		}
	}
}

// healLinks returns every Link to Pass without delay.
func (c *testCluster) healLinks() {
	for _, row := range c.allLinks() {
		for _, l := range row {
			if l != nil {
				l.Heal()
			}
		}
	}
}

// status reads node m's own GET /sluice/v1/cluster.
func status(ctx context.Context, hc *http.Client, url string) (cluster.Report, error) {
	var rep cluster.Report
	err := crash.GetJSON(ctx, hc, url+"/sluice/v1/cluster", &rep)
	return rep, err
}

// stable reports whether every node is up and names the same leader in
// the same term, and that leader has advertised for it.
func (c *testCluster) stable(ctx context.Context) (uint64, error) {
	hc := &http.Client{Timeout: time.Second}
	var leader, term uint64
	shardLeaders := map[int][2]uint64{} // with several shards: shard → (shard, term) every node agrees on
	for _, m := range c.nodes {
		srv, _ := m.current()
		if srv == nil {
			return 0, fmt.Errorf("node %d is down", m.id)
		}
		rep, err := status(ctx, hc, srv.URL())
		if err != nil {
			return 0, fmt.Errorf("node %d: %v", m.id, err)
		}
		l := rep.Node.Leader
		switch {
		case l == 0:
			return 0, fmt.Errorf("node %d knows no leader", m.id)
		case leader != 0 && (l != leader || rep.Node.Term != term):
			return 0, fmt.Errorf("node %d: leader %d term %d, others say %d term %d", m.id, l, rep.Node.Term, leader, term)
		}
		leader, term = l, rep.Node.Term
		for _, p := range rep.Peers {
			if p.ID == l && (p.Advertised == nil || p.Advertised.Term != term) {
				return 0, fmt.Errorf("node %d: leader %d has not advertised for term %d", m.id, l, term)
			}
		}
		if c.shards > 1 {
			if len(rep.Shards) != c.shards && !c.subset { // with a subset placement a node lists its own
				return 0, fmt.Errorf("node %d lists %d shards, not %d", m.id, len(rep.Shards), c.shards)
			}
			for _, sh := range rep.Shards {
				if sh.NotHeld {
					continue // as its leader recorded it, maybe a term behind
				}
				if sh.Leader == 0 {
					return 0, fmt.Errorf("node %d knows no leader of shard %d", m.id, sh.Shard)
				}
				k := [2]uint64{uint64(sh.Shard), sh.Term}
				if was, ok := shardLeaders[sh.Shard]; ok && was != k {
					return 0, fmt.Errorf("node %d: shard %d led in term %d, others say term %d", m.id, sh.Shard, sh.Term, was[1])
				}
				shardLeaders[sh.Shard] = k
			}
		}
	}
	if c.shards > 1 && len(shardLeaders) != c.shards {
		return 0, fmt.Errorf("the nodes list a leader for %d shards of %d", len(shardLeaders), c.shards)
	}
	return leader, nil
}

// awaitStable polls stable for up to d.
func (c *testCluster) awaitStable(ctx context.Context, d time.Duration) (uint64, error) {
	deadline := time.Now().Add(d)
	for {
		leader, err := c.stable(ctx)
		if err == nil {
			return leader, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("no stable leader after %v: %v", d, err)
		}
		faults.SleepCtx(ctx, 50*time.Millisecond) // polling interval
	}
}

// observation is one answer of a node's /sluice/v1/cluster: the poll
// began at start and was answered at end.
type observation struct {
	start, end time.Time
	shard      uint64 // the group the term is of (0 with one shard)
	term       uint64
	role       string
	leader     uint64
	voters     []uint64 // the shard's voters as the node saw them (a status's, shards above 0)
}

// monitor polls every node's /sluice/v1/cluster and keeps every answer
// (with several shards, each shard's status in it), and also the (shard,
// term, node) of every SQS answer the workload saw (the X-Sluice-Shard,
// X-Sluice-Term and X-Sluice-Node headers, see served). From them it
// checks that no term of any shard had two leaders.
type monitor struct {
	c       *testCluster
	mu      sync.Mutex
	obs     [][]observation // per node, in poll order (so by start and end)
	headers []observation   // the leaders SQS answers named, one per (shard, term, node)
	seen    map[[3]uint64]bool
	errs    int
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

// served records that the leader node of shard served an answer in term.
func (mo *monitor) served(shard, term, node uint64) {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	k := [3]uint64{shard, term, node}
	if mo.seen[k] {
		return
	}
	if mo.seen == nil {
		mo.seen = map[[3]uint64]bool{}
	}
	mo.seen[k] = true
	mo.headers = append(mo.headers, observation{shard: shard, term: term, leader: node})
}

const pollInterval = 50 * time.Millisecond

func (c *testCluster) startMonitor(ctx context.Context) *monitor {
	ctx, stop := context.WithCancel(ctx)
	mo := &monitor{c: c, obs: make([][]observation, len(c.nodes)), stop: stop}
	for i, m := range c.nodes {
		mo.wg.Add(1)
		go func() {
			defer mo.wg.Done()
			hc := &http.Client{Timeout: 500 * time.Millisecond}
			for ctx.Err() == nil {
				if srv, _ := m.current(); srv != nil {
					start := time.Now()
					rep, err := status(ctx, hc, srv.URL())
					end := time.Now()
					mo.mu.Lock()
					if err != nil {
						mo.errs++
					} else {
						mo.obs[i] = append(mo.obs[i], observation{start: start, end: end, term: rep.Node.Term, role: rep.Node.Role, leader: rep.Node.Leader})
						for _, sh := range rep.Shards[min(1, len(rep.Shards)):] { // shard 0 is rep.Node
							if sh.NotHeld {
								continue // a copy of shard 0's record, judged through its holders
							}
							mo.obs[i] = append(mo.obs[i], observation{start: start, end: end, shard: uint64(sh.Shard), term: sh.Term, role: sh.Role, leader: sh.Leader, voters: sh.Voters})
						}
					}
					mo.mu.Unlock()
				}
				faults.SleepCtx(ctx, pollInterval)
			}
		}()
	}
	return mo
}

// answeringShards lists the shards whose leaders answered the workload's
// SQS requests (0 alone with one shard).
func (mo *monitor) answeringShards() []uint64 {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	var out []uint64
	for _, o := range mo.headers {
		if !slices.Contains(out, o.shard) {
			out = append(out, o.shard)
		}
	}
	slices.Sort(out)
	return out
}

// leadersOffVoters lists every leader of a shard above 0 that a node
// holding the shard named while not listing it among the shard's voters
// (with a subset placement the shards' members move, ADR 0016: a leader
// must still be one of them), and returns how many it judged.
func (mo *monitor) leadersOffVoters() (off []string, judged int) {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	for i, obs := range mo.obs {
		for _, o := range obs {
			if o.shard == 0 || o.leader == 0 || len(o.voters) == 0 {
				continue // a member still joining knows its leader before its membership
			}
			judged++
			if !slices.Contains(o.voters, o.leader) {
				off = append(off, fmt.Sprintf("node %d: shard %d led by node %d in term %d, not one of its voters %v", i+1, o.shard, o.leader, o.term, o.voters))
			}
		}
	}
	return off, judged
}

// placementFactor is clusterTOML's replication_factor.
const placementFactor = 3

// awaitSettled polls placementSettled until it holds or limit passes, and
// returns its last error.
func (c *testCluster) awaitSettled(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := c.placementSettled(ctx, placementFactor)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		faults.SleepCtx(ctx, 200*time.Millisecond)
	}
}

// placementSummary counts, from the nodes' logs, the placement
// controller's moves (ADR 0016): learners it added, members its marks
// removed, and the groups nodes joined and left.
func placementSummary(logs [][]byte) string {
	var added, removed, joined, left int
	for _, b := range logs {
		added += bytes.Count(b, []byte("placement: a node added to a shard as a learner"))
		removed += bytes.Count(b, []byte("raftstore: removing a learner the placement moves out"))
		joined += bytes.Count(b, []byte("joined the shard: its leader added this node"))
		left += bytes.Count(b, []byte("left the shard: its leader moved this node out"))
	}
	return fmt.Sprintf("placement moves: learners added %d, members moved out %d; groups joined %d, left %d", added, removed, joined, left)
}

// placementSettled is, with a subset placement, whether every shard
// above 0 has come to rest after the faults: factor voters (every node
// when there are no more) and no learner, as every node's status says,
// and held by exactly those nodes; it describes what is not so.
func (c *testCluster) placementSettled(ctx context.Context, factor int) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	holders := map[int][]uint64{}
	members := map[int]string{}
	for _, m := range c.nodes {
		srv, _ := m.current()
		if srv == nil {
			return fmt.Errorf("node %d is down", m.id)
		}
		rep, err := status(ctx, hc, srv.URL())
		if err != nil {
			return fmt.Errorf("node %d: %w", m.id, err)
		}
		for _, sh := range rep.Shards {
			if sh.Shard == 0 {
				continue
			}
			if len(sh.Learners) > 0 || len(sh.Voters) != min(factor, len(c.nodes)) {
				return fmt.Errorf("node %d sees shard %d on voters %v, learners %v", m.id, sh.Shard, sh.Voters, sh.Learners)
			}
			v := fmt.Sprint(sh.Voters)
			if was, ok := members[sh.Shard]; ok && was != v {
				return fmt.Errorf("shard %d on %s as one node sees it, %s as node %d does", sh.Shard, was, v, m.id)
			}
			members[sh.Shard] = v
			if !sh.NotHeld {
				holders[sh.Shard] = append(holders[sh.Shard], m.id)
			}
		}
	}
	for k, v := range members {
		if fmt.Sprint(holders[k]) != v {
			return fmt.Errorf("shard %d on %s, held by %v", k, v, holders[k])
		}
	}
	return nil
}

// close stops the pollers.
func (mo *monitor) close() {
	mo.stop()
	mo.wg.Wait()
}

// leaderViolations lists every term for which two nodes said they led, or
// nodes named two different leaders; and returns how many observations and
// terms it judged.
func (mo *monitor) leaderViolations() (viol []string, observations int, terms int) {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	obs := append(append([][]observation(nil), mo.obs...), mo.headers)
	return leaderViolations(obs)
}

// leaderViolations judges per-node observations (see monitor; the last
// slice may hold the answers' headers, which name a leader and say no
// role): the leaders of a term of a shard are the nodes that said they
// led it and the leaders any node or answer named for it; there must be
// at most one.
func leaderViolations(obs [][]observation) (viol []string, observations int, terms int) {
	leaders := map[[2]uint64]map[uint64]bool{} // (shard, term) → leaders
	for i, seen := range obs {
		for _, o := range seen {
			observations++
			k := [2]uint64{o.shard, o.term}
			if leaders[k] == nil {
				leaders[k] = map[uint64]bool{}
			}
			if o.role == "leader" {
				leaders[k][uint64(i+1)] = true
			}
			if o.leader != 0 {
				leaders[k][o.leader] = true
			}
		}
	}
	for k, set := range leaders {
		if len(set) > 1 {
			var ids []uint64
			for id := range set {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
			if k[0] == 0 {
				viol = append(viol, fmt.Sprintf("term %d: leaders %v", k[1], ids))
			} else {
				viol = append(viol, fmt.Sprintf("shard %d term %d: leaders %v", k[0], k[1], ids))
			}
		}
	}
	sort.Strings(viol)
	return viol, observations, len(leaders)
}

// leadershipEvents returns up to n lines of the node's log at dir that
// carry a leadership mark, the last n if there are more.
func leadershipEvents(dir string, n int) string {
	b, err := os.ReadFile(filepath.Join(dir, "server.log"))
	if err != nil {
		return err.Error()
	}
	// The messages that date a node's leaderships and the ends of its
	// servers and engines.
	marks := []string{
		"msg=leading", "no longer leading", "serving as leader", "raftstore: lost leadership",
		"raftstore: became leader", "raftstore: leader ready", "leadership lost: refusing further changes",
		"storage failed", "engine failed", "server stopped with an error", "sluice cluster node",
		"leading on a clock", "leading on this node's own clock",
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, mark := range marks {
			if strings.Contains(line, mark) {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

// dumpStuck, for a failed run, has every running node print its
// goroutines (SIGQUIT: the Go runtime writes them to the node's log and
// exits) and logs those blocked for a minute or more, and those ending or
// starting a leadership: a run that fails because a node never became
// ready (a leadership whose server would not shut down) shows where it
// hung.
func (c *testCluster) dumpStuck(t testing.TB) {
	for _, m := range c.nodes {
		m.mu.Lock()
		srv, paused := m.srv, m.paused
		m.mu.Unlock()
		if srv == nil {
			continue
		}
		if paused {
			_ = syscall.Kill(srv.PID, syscall.SIGCONT) // a stopped process cannot dump
		}
		if syscall.Kill(srv.PID, syscall.SIGQUIT) != nil {
			continue
		}
		select {
		case <-srv.Exited():
		case <-time.After(10 * time.Second):
			t.Logf("node %d did not exit on SIGQUIT within 10 s", m.id)
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.dir, "server.log"))
		if err != nil {
			continue
		}
		if stuck := stuckGoroutines(string(b), 150); stuck != "" {
			t.Logf("node %d goroutines blocked a minute or more, or in a leadership's start or end (SIGQUIT):\n%s", m.id, stuck)
		}
		keepLog(t, m.id, b)
	}
}

// keepLog saves a failed run's node log, its whole goroutine dump
// included, where the test's temporary directories do not remove it
// (those goroutines that a hang waits on may have been blocked for less
// than the minute stuckGoroutines picks: a loop that retries).
func keepLog(t testing.TB, id uint64, b []byte) {
	dir := os.Getenv(envKeep)
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("node %d: cannot keep its log: %v", id, err)
		return
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("sluice-cluster-faults-node%d-*.log", id))
	if err != nil {
		t.Logf("node %d: cannot keep its log: %v", id, err)
		return
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Logf("node %d: cannot keep its log: %v", id, err)
		return
	}
	t.Logf("node %d: whole log with its goroutine dump kept in %s", id, f.Name())
}

// stuckGoroutines returns, from a log ending in a Go runtime goroutine
// dump, at most max goroutines blocked for a minute or more (the runtime
// notes ", N minutes" from one minute on) or inside a leadership's start
// or end — and, when the AMQP server's Close is waiting, every goroutine
// of the AMQP server (the connections and channels it waits for may each
// have been blocked for less than a minute).
func stuckGoroutines(log string, max int) string {
	i := strings.LastIndex(log, "SIGQUIT: quit")
	if i < 0 {
		return ""
	}
	amqpClosing := strings.Contains(log[i:], "amqp.(*Server).Close(")
	var out []string
	for _, g := range strings.Split(log[i:], "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if !strings.HasPrefix(head, "goroutine ") {
			continue
		}
		if strings.Contains(head, " minutes]") || strings.Contains(g, "cluster.(*leadership).end") || strings.Contains(g, "server.(*Server).shutdown") ||
			amqpClosing && strings.Contains(g, "sluice/internal/amqp.") {
			out = append(out, g)
			if len(out) == max {
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}
