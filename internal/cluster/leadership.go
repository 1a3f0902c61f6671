package cluster

// A node's leaderships: for each shard this node leads, the server it
// runs on that shard's replicated store, from the moment Raft makes it
// leader until it no longer is.

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// leadership follows one shard's leader changes on this node: it runs
// lead while this node leads the shard, and stops it when it no longer
// does. Its methods run on one goroutine at a time (Run's loop for shard
// 0, a goroutine of Run's per other shard).
type leadership struct {
	n    *Node
	k    int
	stop context.CancelFunc // nil while this node does not lead shard k
	done chan struct{}
	term uint64
}

// onStatus applies a status of shard k's Raft node.
func (l *leadership) onStatus(ctx context.Context, st raftstore.Status) {
	n := l.n
	n.rerouted(l.k, st.Leader)
	log := n.shardLog(l.k)
	if st.Role == "leader" && st.Leader == st.ID {
		if l.stop != nil && l.term == st.Term {
			return
		}
		l.end()
		log.Info("leading", "term", st.Term)
		lctx, cancel := context.WithCancel(ctx)
		l.stop, l.done, l.term = cancel, make(chan struct{}), st.Term
		done := l.done
		go func() { defer close(done); n.lead(lctx, l.k, st.Term) }()
		return
	}
	if l.stop != nil {
		log.Info("no longer leading; closing the local server", "term", st.Term, "leader", st.Leader)
	}
	l.end()
}

// stuckStopAfter is how long a leadership's end waits for its server to
// stop before it logs every goroutine's stack (Node.stuckStop shortens it
// in tests). A server stops within seconds (its AMQP connections get
// closeTimeout, its calls elsewhere remoteGrace, its HTTP shutdown 5 s);
// one that has not after a minute is held by something that may never
// end, and while it waits nothing else of this shard — for shard 0,
// nothing of this node's Run loop, /health included — goes on. The dump
// is what tells where (a fault run of 2026-12-01 wedged a node there,
// in the AMQP server's Close, and its cause is still unknown).
const stuckStopAfter = time.Minute

// end stops the leadership's server, if any, and waits for it; a wait
// past stuckStopAfter is logged once with every goroutine's stack.
func (l *leadership) end() {
	if l.stop == nil {
		return
	}
	l.stop()
	after := cmp.Or(l.n.stuckStop, stuckStopAfter)
	t := time.NewTimer(after)
	select {
	case <-l.done:
	case <-t.C:
		l.n.log.Error("the server of a leadership that ended has not stopped; this shard's leadership changes (for shard 0, the node's status and health) wait for it",
			"shard", l.k, "term", l.term, "waited", after, "goroutines", allStacks())
		<-l.done
		l.n.log.Info("the server of a leadership that ended has stopped at last", "shard", l.k, "term", l.term)
	}
	t.Stop()
	l.stop = nil
}

// allStacks returns every goroutine's stack (at most 16 MiB of it).
func allStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 16<<20 {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// lead runs this node's server while it leads shard k in term: once the
// shard's Raft node has applied everything committed before the term
// (WaitLeaderReady), it opens the engine on the replicated store (exactly
// crash recovery), serves on internal listeners and advertises them. A
// server whose engine failed (a write the Raft node could not commit) is
// replaced by a fresh one while the term lasts. It returns when ctx ends,
// with the server shut down.
func (n *Node) lead(ctx context.Context, k int, term uint64) {
	r := n.shards.Shard(k)
	log := n.shardLog(k).With("term", term)
	retry := time.NewTimer(0)
	defer retry.Stop()
	failures := 0 // server starts failed in a row
	engines := 0  // engines opened in this term (HeaderEngine)
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
		if ctx.Err() != nil {
			return // both were ready: stopping wins
		}
		retry.Reset(time.Second)
		if err := r.WaitLeaderReady(ctx); err != nil {
			if ctx.Err() == nil {
				log.Warn("not ready to lead", "err", err)
			}
			continue
		}
		// The view is bound to the leadership this node holds now: the
		// term its engine writes in, stamped on every response.
		st := r.Store()
		viewTerm := raftstore.LeaderTerm(st)
		if viewTerm == 0 {
			_ = st.Close() // a follower's view, never used
			continue
		}
		engines++
		o := n.internalOptions(k, viewTerm, engines)
		o.InjectedStore = st
		tl := n.leadershipClock(ctx, k)
		srv, err := server.New(o, log.With("component", "server"), tl)
		if err != nil {
			log.Error("cannot start the leader's server", "err", err)
			if failures++; failures >= handOverAfter {
				// Something of this node's own (its internal port taken,
				// no file descriptors left) keeps it from serving: a
				// leader that cannot serve would hold the cluster's
				// writes for as long as Raft keeps it leading.
				failures = 0
				n.handOver(ctx, r, log)
			}
			continue
		}
		failures = 0
		if k == 0 {
			n.mu.Lock()
			// For the disk verdict, before any client reaches srv; the
			// followers' reports can arrive only once it serves, so
			// their grace starts now (health.go).
			n.localServer, n.leadSince, n.timeline = srv, time.Now(), tl
			n.mu.Unlock()
			n.applyDiskVerdict()
		} else {
			n.mu.Lock()
			n.shardClocks[k] = tl
			n.mu.Unlock()
			n.applyShardDiskAlarm(srv)
		}
		n.serveLocal(ctx, k, srv, tl, viewTerm, log)
	}
}

// handOverAfter is how many server starts in a row (one a second) may
// fail before a leader hands its leadership to another voter.
const handOverAfter = 3

// handOver hands this node's leadership of r's shard to another voter
// whose log is as long as any (a random one of them, so that leadership
// does not bounce between two nodes that cannot serve while a third
// could), waiting at most 5 s. With no other voter it does nothing.
func (n *Node) handOver(ctx context.Context, r *raftstore.Node, log *slog.Logger) {
	candidates := r.TransferCandidates()
	if len(candidates) == 0 {
		log.Warn("this node cannot serve as leader and has no other voter to hand over to")
		return
	}
	to := candidates[rand.IntN(len(candidates))]
	log.Warn("this node cannot serve as leader; handing leadership over", "to", to)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.TransferLeadershipTo(tctx, to); err != nil && ctx.Err() == nil {
		log.Warn("leadership not handed over", "to", to, "err", err)
	}
}

// serving is this node's server for one shard it leads, and the addresses
// it advertised for it.
type serving struct {
	ad  Advertisement
	srv *server.Server
}

// serveLocal runs srv, shard k's on clock tl, until ctx ends or its
// engine fails, advertising its addresses meanwhile, and shuts it down.
// The first advertisement, stamped with tl's reading, is applied before
// srv serves (beacon.go).
func (n *Node) serveLocal(ctx context.Context, k int, srv *server.Server, tl *timeline, term uint64, log *slog.Logger) {
	sctx, stop := context.WithCancel(ctx)
	ad := Advertisement{Term: term, SQS: srv.SQSAddr(), AMQP: srv.AMQPAddr(), Public: n.publicForPeers(), Members: true, EngineWire: true}
	// Where the others dial, when that is not where the listeners bound
	// (a port mapping or a proxy in between).
	ad.SQS = cmp.Or(server.ShardInternalAddr(n.opts.Cluster.InternalHTTPAdvertise, k), ad.SQS)
	if ad.AMQP != "" {
		ad.AMQP = cmp.Or(n.opts.Cluster.InternalAMQPAdvertise, ad.AMQP)
	}
	// Advertise waits for its entry to commit, and takes no context: it
	// returns when the entry commits, leadership ends or the Raft node
	// closes, so a stop waits for a quorum at most until leadership ends.
	if !n.stampFirst(sctx, k, ad, tl, log) {
		stop()
		srv.Close() // never served
		n.endServing(k)
		return
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	n.mu.Lock()
	n.serving[k] = &serving{ad: ad, srv: srv}
	if k == 0 {
		n.localMetrics = srv.MetricsGatherer()
	}
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
	log.Info("serving as leader", "internal_http", ad.SQS, "internal_amqp", ad.AMQP)
	go n.stampEvery(sctx, k, ad, tl, log)
	if n.shards.Len() > 1 {
		go n.keepPlacements(sctx, k, srv, log)
		go n.keepSourcesAdopted(sctx, k, srv, log)
		go n.recordLeadership(sctx, k, term, ad, log)
		if k == 0 && n.opts.Cluster.SubsetPlacement() {
			go n.controlPlacement(sctx, log.With("component", "placement"))
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case err := <-done:
			if ctx.Err() == nil {
				log.Error("the leader's server stopped on its own", "err", err)
			}
			done <- err
			running = false
		case <-tick.C:
			if err := srv.Engine().Failed(); err != nil {
				log.Warn("the leader's engine failed; starting a fresh one", "err", err)
				running = false
			}
			if k > 0 {
				n.applyShardDiskAlarm(srv)
			}
		}
	}
	n.endServing(k)
	stop()
	if err := <-done; err != nil {
		log.Warn("the leader's server stopped with an error", "err", err)
	}
}

// endServing forgets this node's server and clock for shard k.
func (n *Node) endServing(k int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.serving[k] = nil
	n.shardClocks[k] = nil
	if k == 0 {
		n.localMetrics = nil
		n.localServer = nil
		n.timeline = nil
	}
}
