package clusterfaults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/test/faults"
)

// Environment knobs. `make cluster-faults` sets the first two.
const (
	envDuration  = "SLUICE_CLUSTER_FAULTS_DURATION"  // time under load and faults (default 45s)
	envNodes     = "SLUICE_CLUSTER_FAULTS_NODES"     // cluster size (default 3)
	envSeed      = "SLUICE_FAULT_SEED"               // reproduce a run's random choices
	envFIFO      = "SLUICE_CLUSTER_FAULTS_FIFO"      // 1: FIFO queues (default standard)
	envDrain     = "SLUICE_CLUSTER_FAULTS_DRAIN"     // how long the drain may take (default 2m)
	envKinds     = "SLUICE_CLUSTER_FAULTS_KINDS"     // comma-separated kinds drawn after the first two faults (default all)
	envSkew      = "SLUICE_CLUSTER_FAULTS_SKEW"      // the last node's clock offset (default 20s; 0: none)
	envShards    = "SLUICE_CLUSTER_FAULTS_SHARDS"    // [cluster] shards (default 1)
	envPlacement = "SLUICE_CLUSTER_FAULTS_PLACEMENT" // [cluster] placement: "subset", or all (the default)
	envKeep      = "SLUICE_CLUSTER_FAULTS_KEEP"      // where a failed run keeps its nodes' logs (default the temp dir)
	envEncrypt   = "SLUICE_CLUSTER_FAULTS_ENCRYPT"   // 1 or 0: [cluster] encrypt on every node (default: drawn from the seed)
)

// defaultSkew is the last node's clock offset: far beyond the workload's
// 2 s leases and 1 s delays, so a failover that took the new leader's own
// clock instead of the cluster's would end leases and delays early, which
// the Checker reports.
const defaultSkew = 20 * time.Second

// skews reads envSkew: the clock offset of each node (the last one's
// only).
func skews(t testing.TB, size int) []time.Duration {
	t.Helper()
	d := defaultSkew
	if s := os.Getenv(envSkew); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: want a duration", envSkew, s)
		}
		d = v
	}
	t.Logf("%s=%v (node %d's clock)", envSkew, d, size)
	out := make([]time.Duration, size)
	out[size-1] = d
	return out
}

// faultKinds are the kinds nextFault draws from.
func faultKinds() []string {
	return []string{"partition", "one-way", "delay", "kill", "kill-leader", "kill-majority", "kill-all", "pause", "client-cut", "handover"}
}

// shardCount reads envShards (default 1).
func shardCount(t testing.TB) int {
	t.Helper()
	s := os.Getenv(envShards)
	if s == "" {
		return 1
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want 1 or more", envShards, s)
	}
	t.Logf("%s=%d", envShards, v)
	return v
}

// subsetPlacement reads envPlacement: whether the nodes run with
// [cluster] placement = "subset".
func subsetPlacement(t testing.TB) bool {
	t.Helper()
	switch p := os.Getenv(envPlacement); p {
	case "", "all":
		return false
	case "subset":
		t.Logf("%s=subset", envPlacement)
		return true
	default:
		t.Fatalf("%s=%q: want subset or all", envPlacement, p)
		return false
	}
}

// drawnKinds is envKinds as a list, every kind checked, or every kind.
func drawnKinds(t testing.TB) []string {
	t.Helper()
	s := os.Getenv(envKinds)
	if s == "" {
		return faultKinds()
	}
	var kinds []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); !slices.Contains(faultKinds(), k) {
			t.Fatalf("%s=%q: %q is not one of %v", envKinds, s, k, faultKinds())
		}
		kinds = append(kinds, strings.TrimSpace(k))
	}
	t.Logf("%s=%v", envKinds, kinds)
	return kinds
}

const defaultDuration = 45 * time.Second

// encryption reports whether the nodes encrypt their links
// (envEncrypt; without it, every other seed does, so the bounded runs of
// CI cover both), logged.
func encryption(t testing.TB, seed uint64) bool {
	t.Helper()
	on := seed%2 == 1
	switch s := os.Getenv(envEncrypt); s {
	case "":
	case "0", "1":
		on = s == "1"
	default:
		t.Fatalf("%s=%q: want 0 or 1", envEncrypt, s)
	}
	t.Logf("%s=%v", envEncrypt, on)
	return on
}

// settings reads the run's duration, size and seed (logged).
func settings(t testing.TB) (time.Duration, int, uint64) {
	t.Helper()
	d := defaultDuration
	if s := os.Getenv(envDuration); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envDuration, s)
		}
		d = v
	}
	n := 3
	if s := os.Getenv(envNodes); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 3 || v%2 == 0 {
			t.Fatalf("%s=%q: want an odd number, 3 or more", envNodes, s)
		}
		n = v
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		seed = v
	}
	t.Logf("%s=%d %s=%v %s=%d", envSeed, seed, envDuration, d, envNodes, n)
	return d, n, seed
}

// fault is one injected fault: apply starts it, heal ends it.
type fault struct {
	kind  string // partition, one-way, delay, kill, kill-leader, kill-majority, kill-all, pause, client-cut, handover or kill-long
	name  string
	apply func() error
	heal  func() error
}

// killLongHold is how long a kill-long fault keeps its node down: more
// than a placement controller round (10 s) past replace_after (2 s), so
// that the controller replaces it in its shards (ADR 0016).
const killLongHold = 14 * time.Second

// nextFault draws the k-th fault (from 0) for a cluster whose every node
// is up and whose leader is leader (index into c.nodes). The first two are
// always kill-leader and a partition of the leader, so that every run, even
// a short one, loses a leader both ways; with a subset placement the third
// is kill-long (a node down for killLongHold); the rest are drawn from the
// RNG, of kinds.
func (c *testCluster) nextFault(ctx context.Context, rng *rand.Rand, kinds []string, k, leader int) fault {
	n := len(c.nodes)
	i := rng.IntN(n)
	id := c.nodes[i].id
	mode := Blackhole
	if rng.IntN(2) == 0 {
		mode = Reset
	}
	healLinks := func() error { c.healLinks(); return nil }
	kind := kinds[rng.IntN(len(kinds))]
	switch {
	case k == 0:
		kind = "kill-leader"
	case k == 1:
		kind = "partition"
	case k == 2 && c.subset:
		// With a subset placement, one node down long enough for the
		// placement controller to move its shards (and back, to move
		// one off again), in every run, however short.
		kind = "kill-long"
	}
	switch kind {
	case "partition":
		// A minority (one node of three; one or two of five) cut off from
		// the rest, both ways; links inside each side stay up.
		group := rng.Perm(n)[:1+rng.IntN((n-1)/2)]
		if k == 1 {
			group = []int{leader}
		}
		var ids []string
		in := make([]bool, n)
		for _, g := range group {
			in[g] = true
			ids = append(ids, strconv.FormatUint(c.nodes[g].id, 10))
		}
		return fault{kind, fmt.Sprintf("partition nodes {%s} from the others (%v)", strings.Join(ids, ","), mode),
			func() error { c.split(in, mode); return nil }, healLinks}
	case "one-way":
		out := rng.IntN(2) == 0
		dir := "its messages to the others"
		if !out {
			dir = "the others' messages to it"
		}
		return fault{kind, fmt.Sprintf("one-way partition of node %d: drop %s (%v)", id, dir, mode),
			func() error { c.isolate(i, out, !out, mode, 0); return nil }, healLinks}
	case "delay":
		d := time.Duration(50+rng.IntN(400)) * time.Millisecond
		return fault{kind, fmt.Sprintf("delay node %d's links both ways by %v", id, d),
			func() error { c.isolate(i, true, true, Pass, d); return nil }, healLinks}
	case "client-cut":
		// The leader's Raft links stay up, so it keeps leading, but no
		// node reaches its internal listeners: every request and AMQP
		// connection forwarded to it fails, cut in flight (Reset) or
		// left hanging (Blackhole), whatever the leader did with it.
		i, id = leader, c.nodes[leader].id
		return fault{kind, fmt.Sprintf("cut the requests and connections forwarded to leader %d (%v)", id, mode),
			func() error {
				for _, l := range c.clientLinks(i) {
					l.Set(mode, 0)
				}
				return nil
			}, healLinks}
	case "kill", "kill-leader":
		if kind == "kill-leader" {
			i, id = leader, c.nodes[leader].id
		}
		return fault{kind, fmt.Sprintf("%s: SIGKILL node %d, restart it", kind, id),
			func() error { return c.kill(i) }, func() error { return c.start(ctx, i) }}
	case "kill-long":
		return fault{kind, fmt.Sprintf("kill-long: SIGKILL node %d, restart it", id),
			func() error { return c.kill(i) }, func() error { return c.start(ctx, i) }}
	case "kill-majority":
		// A majority of the nodes at once, the leader among them: with
		// three voters nothing commits until they are back, and every
		// write acknowledged before must come back from their disks (a
		// majority of the voters had it; any majority of the nodes
		// holds one of them unless standby learners make up the
		// difference). They restart together: one alone would wait for
		// a leader that needs the others.
		set := []int{leader}
		for _, j := range rng.Perm(n) {
			if len(set) < n/2+1 && j != leader {
				set = append(set, j)
			}
		}
		var ids []string
		for _, j := range set {
			ids = append(ids, strconv.FormatUint(c.nodes[j].id, 10))
		}
		return fault{kind, fmt.Sprintf("kill-majority: SIGKILL nodes {%s} together, restart them", strings.Join(ids, ",")),
			func() error { return c.killAll(set) }, func() error { return c.startAll(ctx, set) }}
	case "kill-all":
		// Every node at once, as a power cut of the whole cluster would
		// (a SIGKILL keeps the page cache: see the known gaps): every
		// acknowledged write comes back from the disks, and the first
		// leader after the restart has no measurement of the cluster's
		// clock, so it starts on the median of the voters' (with a
		// skewed node among them, not on that node's).
		set := make([]int, n)
		for j := range set {
			set[j] = j
		}
		return fault{kind, "kill-all: SIGKILL every node together, restart them",
			func() error { return c.killAll(set) }, func() error { return c.startAll(ctx, set) }}
	case "handover":
		// A graceful stop of the leader (SIGTERM): it hands its
		// leadership to a voter whose log is as long as any. The others'
		// inbound Raft links are cut first, so that they fall behind and
		// the handover goes to one chosen node: the one whose clock is
		// skewed (when another node leads), so that it takes over the
		// cluster's time from a leader with a true clock. With more than
		// three nodes, a kill-leader instead.
		to := c.skewed()
		if to < 0 || to == leader {
			to = (leader + 1 + rng.IntN(n-1)) % n
		}
		if n != 3 {
			i, id = leader, c.nodes[leader].id
			return fault{"kill-leader", fmt.Sprintf("kill-leader: SIGKILL node %d, restart it", id),
				func() error { return c.kill(i) }, func() error { return c.start(ctx, i) }}
		}
		behind := 3 - leader - to // the third node
		return fault{kind, fmt.Sprintf("handover: node %d's inbound Raft links cut, then SIGTERM leader %d (it hands over to node %d), restart it",
			c.nodes[behind].id, c.nodes[leader].id, c.nodes[to].id),
			func() error {
				c.isolate(behind, false, true, Blackhole, 0)
				faults.SleepCtx(ctx, 500*time.Millisecond) // the workload's writes leave it behind
				return c.stop(leader)
			}, func() error { c.healLinks(); return c.start(ctx, leader) }}
	default: // pause
		return fault{kind, fmt.Sprintf("SIGSTOP node %d, then SIGCONT", id),
			func() error { return c.signal(i, syscall.SIGSTOP) }, func() error { return c.signal(i, syscall.SIGCONT) }}
	}
}

// TestClusterFaults runs the workload through every node of a cluster
// (SQS producers and consumers on the source queue and its DLQ, and AMQP
// publishers with confirms and AMQP and SQS consumers on an AMQP queue:
// amqpLoad) while a seeded schedule injects one fault at a time (held
// 1–5 s, healed, then 1–2 s of calm once the cluster has a leader again),
// drains after healing everything, and fails on any violation either
// Checker finds, on a term with two leaders, and on a cluster that does
// not recover.
func TestClusterFaults(tt *testing.T) {
	if testing.Short() {
		tt.Skip("runs a cluster of server processes under faults for tens of seconds")
	}
	t := recordFailures(tt) // first: its summary prints after the node logs
	dur, size, seed := settings(t)
	shards := shardCount(t)
	drawn := drawnKinds(t)
	encrypt := encryption(t, seed)
	t.setRerun(fmt.Sprintf("%s=%d %s=%v %s=%d %s=%d %s=%q %s=%d %s=%q", envSeed, seed, envDuration, dur, envNodes, size, envShards, shards, envFIFO, os.Getenv(envFIFO), envEncrypt, map[bool]int{false: 0, true: 1}[encrypt], envPlacement, os.Getenv(envPlacement)))
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()

	c := startSkewedCluster(t, ctx, size, 8*time.Second, skews(t, size), shards, encrypt)
	leader, err := c.awaitStable(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mo := c.startMonitor(ctx)
	fifo := os.Getenv(envFIFO) == "1"
	t.Logf("%s=%v", envFIFO, fifo)
	w := newWorkload(c, strconv.FormatUint(seed%100000, 10), fifo)
	w.served = mo.served
	if err := w.createQueues(ctx); err != nil {
		t.Fatal(err)
	}
	extra := spreadWorkloads(c, w, shards) // with shards: a queue pair on each other shard
	for _, e := range extra {
		if err := e.createQueues(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a := newAMQPLoad(w)
	if err := a.declare(); err != nil {
		t.Fatal(err)
	}
	remote, err := remoteAMQPLoads(ctx, c, w, shards) // with shards: AMQP on an SQS queue of each other shard
	if err != nil {
		t.Fatal(err)
	}
	rd, err := newRedriveLoad(ctx, c, w.Run, shards) // with shards: every message dead-lettered and redriven across two
	if err != nil {
		t.Fatal(err)
	}
	dxs, err := newDLXLoads(c, w.Run) // with placement subset: AMQP dead letters routed by shard 0 (between two other shards, and from its own queue)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx, rng)
	a.Start(ctx, rng)
	if rd != nil {
		rd.Start(ctx, rng)
	}
	for _, dx := range dxs {
		dx.Start(ctx, rng)
	}
	for _, r := range remote {
		r.Start(ctx, rng)
	}
	startSpread(ctx, rng, w, extra)

	var injected []string
	kinds := map[string]int{}
	end := time.Now().Add(dur)
	faults.SleepCtx(ctx, time.Second) // load before the first fault
	for time.Now().Before(end) && ctx.Err() == nil {
		f := c.nextFault(ctx, rng, drawn, len(injected), int(leader-1))
		hold := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
		if f.kind == "kill-long" {
			hold = killLongHold
		}
		t.Logf("%s: %s for %v", time.Now().Format("15:04:05.000"), f.name, hold.Round(time.Millisecond))
		if err := f.apply(); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		w.Ck.Fault()
		a.Ck.Fault()
		for _, r := range remote {
			r.Ck.Fault()
		}
		for _, e := range extra {
			e.Ck.Fault()
		}
		injected = append(injected, f.name)
		kinds[f.kind]++
		faults.SleepCtx(ctx, hold)
		if err := f.heal(); err != nil {
			t.Fatalf("healing %s: %v", f.name, err)
		}
		if leader, err = c.awaitStable(ctx, 30*time.Second); err != nil {
			t.Errorf("after %s: %v", f.name, err)
			break
		}
		faults.SleepCtx(ctx, time.Duration(1000+rng.IntN(1000))*time.Millisecond)
	}

	// Heal everything (the loop already did; a failed recovery may not
	// have), then drain through any node.
	c.healLinks()
	for i, m := range c.nodes {
		m.mu.Lock()
		down, paused := m.srv == nil, m.paused
		m.mu.Unlock()
		if paused {
			_ = c.signal(i, syscall.SIGCONT) // best effort: awaitStable judges
		}
		if down {
			if err := c.start(ctx, i); err != nil {
				t.Errorf("restart node %d: %v", m.id, err)
			}
		}
	}
	if _, err := c.awaitStable(ctx, 60*time.Second); err != nil {
		t.Errorf("after healing: %v", err)
	}
	var settled error
	if c.subset {
		// The placement controller moves a shard off a node silent past
		// replace_after, and the node deletes its copy when it is back:
		// the shards come to rest on the factor's worth of nodes.
		settled = c.awaitSettled(ctx, 60*time.Second)
	}
	drainLimit := 2 * time.Minute
	if s := os.Getenv(envDrain); s != "" {
		// The mutation check shortens it: a broken broker never drains.
		if drainLimit, err = time.ParseDuration(s); err != nil || drainLimit <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envDrain, s)
		}
	}
	a.StopPublishers()
	for _, r := range remote {
		r.StopPublishers()
	}
	stopSpreadProducers(w, extra)
	if rd != nil {
		rd.StopProducers()
	}
	for _, dx := range dxs {
		dx.StopProducers()
	}
	var pairs []pairLoad // the loads that keep their own account
	if rd != nil {
		pairs = append(pairs, rd)
	}
	for _, dx := range dxs {
		pairs = append(pairs, dx)
	}
	held := w.drain(t, ctx, drainLimit, pairsDrained(pairs, spreadDrained(extra, amqpDrained(a, remote))),
		pairsHeld(pairs, spreadHeld(extra, amqpHeld(a, remote))))
	if held {
		a.Ck.DrainIncomplete() // the AMQP queues' part of the same drain
		for _, r := range remote {
			r.Ck.DrainIncomplete()
		}
	}
	a.StopConsumers()
	for _, r := range remote {
		r.StopConsumers()
	}
	if rd != nil {
		rd.StopConsumers()
		rd.finish(t, ctx, held)
	}
	for _, dx := range dxs {
		dx.StopConsumers()
		dx.finish(t, held)
	}
	finishSpread(t, ctx, extra)
	finishRemote(t, remote)
	mo.close()

	r := w.Ck.Report()
	viol, observations, terms := mo.leaderViolations()
	t.Logf("%d nodes, %v under faults, %d faults injected %v", size, dur, len(injected), kinds)
	t.Logf("%s; %s; requests %d (errors %d); acknowledged deletes %d, of which %d answered in their receive's term (checked for resurrection); %d deliveries without X-Sluice-Term",
		r, pubSummary(w), w.Ops.Load(), w.nerrs.Load(), w.deletes.Load(), w.sameTerm.Load(), w.noTerm.Load())
	t.Logf("leader per term: %d observations of /sluice/v1/cluster over %d terms (%d polls failed), %d violations",
		observations, terms, mo.errs, len(viol))
	if shards > 1 {
		served := mo.answeringShards()
		t.Logf("the SQS queues were served by the leaders of shard(s) %v of %d (AMQP: shard 0's, and through its router every shard's)", served, shards)
		if len(served) < shards {
			t.Errorf("the SQS workloads reached shard(s) %v of %d: a shard's leader served none of them under the faults", served, shards)
		}
	}
	if c.subset {
		off, judged := mo.leadersOffVoters()
		t.Logf("placement subset: %d leaders of shards above 0 named by their holders' statuses, %d of them not among the voters listed with them", judged, len(off))
		for _, o := range off[:min(len(off), 10)] {
			t.Errorf("%s", o)
		}
		if settled != nil {
			t.Errorf("placement subset: the shards' members did not come to rest within 60 s of healing: %v", settled)
		} else {
			t.Logf("placement subset: every shard above 0 on %d voters, held by exactly them, after healing; %s", placementFactor, placementSummary(c.logs()))
		}
	}
	ra := a.Ck.Report()
	t.Logf("%s", a.summary(ra))
	t.Logf("errors (expected under faults): %s", w.errorSummary())
	logs := c.logs()
	t.Logf("raft log: %s", raftSummary(logs))
	t.Logf("%s", settleSummary(logs))
	t.Logf("cluster clock: %s", clockSummary(logs))
	if r.Violations() > 0 {
		t.Errorf("the checker found violations:\n%s", r.Details(10))
	}
	if ra.Violations() > 0 {
		t.Errorf("the checker found violations on the AMQP queue:\n%s", ra.Details(10))
	}
	checkPub(t, w)
	if ra.Acked == 0 {
		t.Errorf("no AMQP publish was confirmed: the AMQP half of the run proves nothing")
	}
	if len(viol) > 0 {
		t.Errorf("more than one leader in a term:\n%s", strings.Join(viol, "\n"))
	}
	if p := c.panics(); len(p) > 0 {
		t.Errorf("the nodes' logs tell of %d panics (each a broker bug, whatever the faults):\n%s", len(p), strings.Join(p[:min(len(p), 10)], "\n"))
	}
	if r.Acked == 0 || len(injected) == 0 {
		t.Errorf("acknowledged %d sends under %d faults: the run proves nothing", r.Acked, len(injected))
	}
}
