// Package cluster runs `sluice server` as one member of a Raft group: any
// node serves any client, and the broker stays writable when a minority of
// nodes dies.
//
// The design is in docs/adr/0012-replicated-store.md. Raft replicates the
// store's write batches (internal/cluster/raftstore); only the leader runs
// an engine, a full in-process server.Server on the replicated store, with
// its own listeners (by default on port 0 of the host of this node's Raft
// address; [cluster] internal_http_listen and internal_amqp_listen fix
// them, and internal_*_advertise names the address the others dial). Every
// node owns the public listeners a client dials (sqs_listen, amqp_listen):
//
//   - HTTP: each request is forwarded, as it is (the client's Host header
//     kept, so SigV4 signatures and queue URLs still match), to the
//     leader's internal HTTP listener, except GET /sluice/v1/cluster, which
//     this node answers itself (its Raft status, the replicated membership
//     and the addresses the leader advertised), GET /health, GET /ready
//     and GET /metrics, which answer for this node (health.go,
//     metrics.go), and the membership changes (members.go), which the
//     leader runs on its Raft node and a follower forwards to the
//     leader's public listener.
//   - AMQP: on the leader, each connection is served by its own server
//     (no loopback hop); on a follower, it is relayed as raw TCP, both
//     ways, to the leader's internal AMQP listener, and closed when either
//     side closes or the leader changes.
//
// With [cluster] shards above 1 (ADR 0015 step 3, shards.go) the node is a
// member of that many groups, each with its own leader, server and
// advertisement; an HTTP request goes to the leader of the shard holding
// the queue it names (shard 0 when it names none), and AMQP to shard 0's.
//
// Every connection between nodes, the leader's internal HTTP and AMQP
// listeners included, opens with the node handshake over the cluster
// secret (package nodeauth): a client that reaches an internal listener
// directly is refused before any byte of its request is read.
//
// While there is no leader (an election), a request or connection waits up
// to Options.HoldTimeout (5 s) for one, then gets 503 (HTTP) or is closed (AMQP); SDKs and
// AMQP clients retry. When this node stops leading, its server is shut
// down: its connections drop, and clients reconnect to the new leader
// through any node.
//
// Goroutines: Run's role loop (reads raftstore's Changes), the public HTTP
// server, the AMQP accept loop and two copy goroutines per relayed
// connection, and while this node leads, one leader goroutine that starts,
// watches and stops the local server.
package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/auth/httpauth"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// DefaultHoldTimeout is how long a request or connection waits for a
// leader (or for the leader's advertised addresses) before it is refused.
const DefaultHoldTimeout = 5 * time.Second

// MaxRelayedAMQP caps the AMQP connections one node relays; one more is
// closed at accept.
const MaxRelayedAMQP = 4096

// Options configure a cluster node.
type Options struct {
	// Server is this node's configuration, [cluster] included: the public
	// listeners (sqs_listen, amqp_listen), data_dir (the Raft log and the
	// state store live under it) and everything the leader's server uses.
	Server server.Options
	// Logger; nil discards.
	Logger *slog.Logger
	// TickInterval is the Raft tick (0: raftstore's default, 100 ms).
	TickInterval time.Duration
	// HoldTimeout bounds how long a client waits for a leader (0:
	// DefaultHoldTimeout).
	HoldTimeout time.Duration
	// Clock is this node's wall clock (nil: the real one): its engine's
	// while it leads, and the one its clock measurements read (tests skew
	// it).
	Clock clock.Clock
	// BalanceInterval is how often shard 0's leader looks at where the
	// shards' leaders are, with [cluster] shards above 1 (0:
	// raftstore.DefaultBalanceInterval).
	BalanceInterval time.Duration
	// PlacementInterval is how often a shard's leader compares its
	// queues with their placements in shard 0, with [cluster] shards
	// above 1 (0: DefaultPlacementInterval; placements.go).
	PlacementInterval time.Duration
}

// Advertisement is what a leader replicates about itself (raftstore's
// Advertise): where its internal server listens, for the term it leads.
// Followers relay only to an advertisement of the current term, so an
// address left from an earlier term is never dialled.
type Advertisement struct {
	Term uint64 `json:"term"`
	SQS  string `json:"sqs"`
	AMQP string `json:"amqp,omitempty"`
	// Public is the leader's public HTTP listener, where followers of an
	// older build forward the membership admin requests (members.go).
	Public string `json:"public,omitempty"`
	// Members says that the leader's internal HTTP listener (SQS) takes
	// the membership changes a follower forwards (members.go); a leader
	// of a build before 2026-12-05 leaves it out, and followers then
	// forward them to Public.
	Members bool `json:"members,omitempty"`
	// EngineWire says that the leader's internal HTTP listener reads
	// engine calls (server.ShardEnginePath) in the binary wire of
	// 2026-12-05; to a leader of an older build, which leaves it out,
	// other nodes send them in gob (server.EngineCallAsGob).
	EngineWire bool `json:"engine_wire,omitempty"`
}

// Node is one running cluster member. New binds its listeners and opens
// its Raft node; Run serves until its context ends.
type Node struct {
	opts server.Options
	log  *slog.Logger
	raft *raftstore.Node // shard 0 of shards
	// shards are this node's Raft groups ([cluster] shards, ADR 0015):
	// shard 0 is the cluster's group of ADR 0012 (membership, clock,
	// health, AMQP), every shard holds SQS queues (shards.go). Close
	// closes them and the Raft listener.
	shards *raftstore.Shards
	hold   time.Duration
	// stuckStop, when set, replaces stuckStopAfter (tests).
	stuckStop time.Duration
	// placeEvery is Options.PlacementInterval (placements.go).
	placeEvery time.Duration
	// controlEvery is Options.BalanceInterval: the placement
	// controller's round (controller.go).
	controlEvery time.Duration
	// shardsCtx is the context Run follows the shards above 0 under, and
	// shardRuns the goroutine following each of those this node holds
	// (follow.go). Under mu.
	shardsCtx context.Context
	shardRuns map[int]*shardRun
	// shardMaps are shard leaders' listings of dead-letter queues as
	// they last answered them (shardMap): the dead-letter sources of
	// shards this node holds no copy of, shard 0's AMQP dead-letter
	// routes. Under mu.
	shardMaps map[shardMapKey]shardMapAnswer
	// bodies bounds the SQS request bodies buffered to find the shard of
	// their queue (shards.go; only with several shards).
	bodies *server.BodyBudget

	httpLn, amqpLn net.Listener
	// amqpsLn is the public AMQP-over-TLS listener (amqps_listen), nil
	// when off; amqpsAddr its bound address. cert is the public
	// listeners' certificate ([tls]), nil without.
	amqpsLn   net.Listener
	amqpsAddr string
	cert      *server.ServingCert
	httpSrv   *http.Server
	// raftAddr is the Raft listener's bound address.
	raftAddr string
	// transport carries requests to the leader's internal listener, each
	// connection opened with the node handshake (the membership requests
	// a follower forwards too); publicTransport carries those forwarded to
	// the public listener of a leader of an older build (members.go).
	transport, publicTransport *http.Transport
	metrics                    nodeMetrics
	// lowDisk holds, by member id, whether its latest report to this node
	// (as leader) said its disk is low (clusterview.go); read lock-free by
	// the Raft loop through promotable.
	lowDisk sync.Map
	// keys are the cluster secret (keys[0], nil: none; the handshake then
	// runs with an empty key) and, during a rotation, a second one the
	// internal listeners accept too; failLog limits the logging of
	// refusals.
	keys    nodeauth.Keys
	failLog nodeauth.FailureLog
	// enc carries every connection between nodes in TLS ([cluster]
	// encrypt; with encrypt_transition, its listeners also take plain
	// dialers); nil: plain TCP.
	enc *nodeauth.Encryption

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever routing may have changed
	// serving holds, by shard, this node's server and its advertisement
	// while it leads that shard and serves (nil otherwise).
	serving []*serving
	// ads are the last advertisement of each shard's leader decoded,
	// recs the last leader record of each shard not held (decodeAd).
	ads, recs []atomic.Pointer[decodedAd]
	relays    map[*relay]struct{}
	// forwards are the HTTP requests being forwarded to a leader's
	// internal listener (forward.go).
	forwards map[*forward]struct{}
	perIP    map[string]int // relayed AMQP connections per client IP
	relayed  int            // their sum
	done     bool           // Run has begun shutting down: no new relays

	// localMetrics gathers that server's metrics (GET /metrics).
	localMetrics prometheus.Gatherer
	// reports are the followers' latest statuses, while this node leads
	// (clusterview.go).
	reports map[uint64]reported
	// probed are, while this node leads, its last probes of members that
	// stopped reporting (silent.go).
	probed map[uint64]probedMember

	// Each node answers for itself (health.go): its disk watch, when it
	// last reached the leader, and while it leads shard 0, its server and
	// when that server started. freeBytes reads free space (tests replace it
	// before Run).
	disk        diskState
	contact     contact
	localServer *server.Server
	leadSince   time.Time
	freeBytes   func(dir string) (uint64, error)
	// clk is Options.Clock: the wall clock of this node's engine while it
	// leads and of its clock measurements; clock is the latest
	// measurement (clockskew.go).
	clk   clock.Clock
	clock clockOffset
	// found caches where queues were found, for routing (routecache.go).
	found routeCache
	// clockGood is the latest measurement certain enough to start a
	// leadership's clock on; timeline is that clock while this node
	// leads (timeline.go).
	clockGood clockOffset
	timeline  *timeline
	// shardClocks are, by shard above 0, the clocks of the shards this
	// node leads (nil where it does not), steered to the cluster's clock
	// (timeline.go).
	shardClocks []*timeline
	// clockWarned: the clock warning is standing (logged once per
	// episode, clockskew.go).
	clockWarned bool
}

// New validates opts, binds the Raft, public HTTP and public AMQP
// listeners, and opens the Raft node. On error everything opened is closed.
func New(opts Options) (_ *Node, err error) {
	o := opts.Server
	if !o.Cluster.Enabled() {
		return nil, errors.New("cluster: no [cluster] section")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{opts: o, log: log, hold: cmp.Or(opts.HoldTimeout, DefaultHoldTimeout), placeEvery: opts.PlacementInterval, controlEvery: opts.BalanceInterval, changed: make(chan struct{}), serving: make([]*serving, o.Cluster.ShardCount()), ads: make([]atomic.Pointer[decodedAd], o.Cluster.ShardCount()), recs: make([]atomic.Pointer[decodedAd], o.Cluster.ShardCount()), shardClocks: make([]*timeline, o.Cluster.ShardCount()), relays: map[*relay]struct{}{}, forwards: map[*forward]struct{}{}, perIP: map[string]int{}, reports: map[uint64]reported{}, probed: map[uint64]probedMember{}, freeBytes: server.FreeBytes, clk: opts.Clock}
	if n.clk == nil {
		n.clk = clock.Real{}
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	secret, warn, err := o.Cluster.LoadSecret()
	if err != nil {
		return nil, err
	}
	extra, extraWarn, err := o.Cluster.LoadExtraSecret()
	if err != nil {
		return nil, err
	}
	for _, w := range []string{warn, extraWarn, o.Cluster.FactorWarning()} {
		if w != "" {
			log.Warn(w)
		}
	}
	n.keys = nodeauth.With(secret, extra)
	if o.Cluster.Encrypt || o.Cluster.EncryptTransition {
		if n.enc, err = nodeauth.NewEncryption(); err != nil {
			return nil, err
		}
		if o.Cluster.EncryptTransition {
			n.enc = n.enc.Transition(o.Cluster.Encrypt)
		}
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	if err := checkPlacement(o.DataDir, o.Cluster.SubsetPlacement()); err != nil {
		return nil, err
	}
	if err := checkShardCount(o.DataDir, o.Cluster.ShardCount()); err != nil {
		return nil, err
	}
	raftListen := o.Cluster.RaftListen
	if raftListen == "" {
		raftListen = o.Cluster.Self().Raft
	}
	rln, err := net.Listen("tcp", raftListen)
	if err != nil {
		return nil, fmt.Errorf("cluster.raft_listen: %w", err)
	}
	closers = append(closers, func() { _ = rln.Close() })
	n.raftAddr = rln.Addr().String()
	n.httpLn, err = net.Listen("tcp", o.SQSListen)
	if err != nil {
		return nil, fmt.Errorf("sqs_listen: %w", err)
	}
	closers = append(closers, func() { _ = n.httpLn.Close() })
	if o.AMQPListen != "" {
		n.amqpLn, err = net.Listen("tcp", o.AMQPListen)
		if err != nil {
			return nil, fmt.Errorf("amqp_listen: %w", err)
		}
		closers = append(closers, func() { _ = n.amqpLn.Close() })
	}
	// [tls]: the public listeners speak TLS, and this node ends it; what
	// it forwards and relays to a leader's internal listeners stays on
	// the node handshake's connections (the leader's server runs without
	// [tls], internalOptions).
	n.cert, err = o.TLS.Open(log.With("component", "tls"))
	if err != nil {
		return nil, err
	}
	if o.AMQPSListen != "" { // Validate: only with [tls]
		ln, err := net.Listen("tcp", o.AMQPSListen)
		if err != nil {
			return nil, fmt.Errorf("amqps_listen: %w", err)
		}
		closers = append(closers, func() { _ = ln.Close() })
		n.amqpsAddr = ln.Addr().String()
		n.amqpsLn = tls.NewListener(ln, n.cert.Config())
	}
	peers := make([]raftstore.Peer, len(o.Cluster.Peers))
	for i, p := range o.Cluster.Peers {
		peers[i] = raftstore.Peer{ID: p.ID, RaftAddr: p.Raft}
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_build_info",
		Help:        "Always 1; the labels name the running build (version, commit, date, go_version).",
		ConstLabels: prometheus.Labels{"version": o.Build.Version, "commit": o.Build.Commit, "date": o.Build.Date, "go_version": o.Build.GoVersion}})
	build.Set(1)
	// The metrics read the shards' statuses once they are open.
	n.metrics = newNodeMetrics(func() []raftstore.Status {
		out := make([]raftstore.Status, n.shards.Len())
		for k := range out {
			if r := n.shards.Shard(k); r != nil { // a shard not held reports nothing (ADR 0016)
				out[k] = r.Status()
			}
		}
		return out
	}, o.Cluster.ShardCount() > 1, build)
	// Shard 0's group is the one Raft group of ADR 0012, in the data
	// directory as before; the others are in shard-<k>/ (ADR 0015). All
	// are on the listener's mux (raftstore/mux.go).
	var plan raftstore.ShardPlan
	if o.Cluster.SubsetPlacement() {
		var err error
		if plan, err = openPlan(o.DataDir, o.Cluster.NodeID, peers, o.Cluster.Factor(), o.Cluster.ShardCount(), o.Cluster.Join); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		plan.Leader = n.recordedLeader
	}
	shards, err := raftstore.OpenShardsPlan(raftstore.Config{ID: o.Cluster.NodeID, Peers: peers, Dir: o.DataDir, FS: o.StoreFS, Listener: rln, Join: o.Cluster.Join,
		CompactEntries: o.Cluster.LogCompactEntries, KeepEntries: o.Cluster.LogKeepEntries, PromoteLagEntries: o.Cluster.PromoteLagEntries,
		SnapshotStreams: o.Cluster.SnapshotStreams, SnapshotRate: o.Cluster.SnapshotRate,
		ReplicationFactor: o.Cluster.Factor(), ReplaceAfter: time.Duration(o.Cluster.ReplaceAfter), Promotable: n.promotable,
		TickInterval: opts.TickInterval, Logger: log.With("component", "raft"),
		Secret: secret, ExtraSecret: extra, Encryption: n.enc, ProbeAnswer: n.clockAnswer, Now: n.clk.Now, OnAuthFailure: n.metrics.authFailures.WithLabelValues(nodeauth.SurfaceRaft).Inc},
		o.Cluster.ShardCount(), opts.BalanceInterval, plan)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if o.Cluster.ShardCount() > 1 {
		n.bodies = server.NewBodyBudget(o.HTTPBodyBudget)
	}
	n.mu.Lock() // clockAnswer may read it already: a peer's probe
	n.shards, n.raft = shards, shards.Shard(0)
	n.mu.Unlock()
	factor := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_raft_replication_factor",
		Help: "Voters this node keeps while it leads ([cluster] replication_factor); sluice_raft_voters below it means no caught-up learner could replace a lost voter."})
	factor.Set(float64(o.Cluster.Factor()))
	n.metrics.raft.MustRegister(newDiskCollector(n), newClockCollector(n), factor)
	if n.cert != nil {
		n.metrics.raft.MustRegister(n.cert.Collector()) // the leader's server runs without [tls]
	}
	n.warnRestartReserve()
	n.checkDisk() // before anything is served: a node restarted at the watermark says so at once
	dialer := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	newTransport := func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
		return &http.Transport{
			DialContext:         dial,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			// Below the internal server's 120 s idle timeout, so the
			// transport drops a connection before the server does.
			IdleConnTimeout:    90 * time.Second,
			DisableCompression: true,
		}
	}
	n.transport = newTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := n.dialInternal(ctx, dialer, nodeauth.SurfaceHTTP, addr, n.advertiserOf(addr))
		if err != nil {
			// Nothing of the request was sent: an engine call may be
			// made again (server.ErrShardUnreachable).
			return nil, fmt.Errorf("%w (%w)", err, server.ErrShardUnreachable)
		}
		return c, nil
	})
	n.publicTransport = newTransport(dialer.DialContext)
	if n.cert != nil {
		// Membership changes go to the leader's public listener, now
		// TLS: its certificate must be one the system trusts or one of
		// those in this node's own certificate file as it is now (nodes
		// that share a certificate, or certificates from a private CA
		// whose chain the file carries), for the address the leader
		// advertised.
		n.publicTransport.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, &tls.Config{RootCAs: n.cert.Roots(), ServerName: host, MinVersion: tls.VersionTLS12})
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = c.Close() // the handshake's error says why
				return nil, err
			}
			return tc, nil
		}
	}
	// The connection caps apply here, where the clients' addresses are
	// known (the leader's internal listener sees only nodes).
	var connState func(net.Conn, http.ConnState)
	n.httpLn, connState = server.LimitHTTPConnections(n.httpLn, o.MaxHTTPConnections, o.MaxHTTPConnectionsPerIP)
	if n.cert != nil {
		n.httpLn = tls.NewListener(n.httpLn, n.cert.Config())
	}
	n.httpSrv = &http.Server{
		ConnState:         connState,
		Handler:           n.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return n, nil
}

// HTTPAddr is the public HTTP listener's address (SQS API and the rest,
// forwarded to the leader).
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// AMQPAddr is the public AMQP listener's address, "" when off.
func (n *Node) AMQPAddr() string {
	if n.amqpLn == nil {
		return ""
	}
	return n.amqpLn.Addr().String()
}

// AMQPSAddr is the public AMQP-over-TLS listener's address, "" when off.
func (n *Node) AMQPSAddr() string { return n.amqpsAddr }

// Run serves until ctx ends, then stops the public listeners, the relayed
// connections, the local server if this node leads, and the Raft node.
func (n *Node) Run(ctx context.Context) error {
	errc := make(chan error, 3)
	go func() { errc <- n.httpSrv.Serve(n.httpLn) }()
	if n.amqpLn != nil {
		go func() { errc <- n.serveAMQP(n.amqpLn) }()
	}
	if n.amqpsLn != nil {
		go func() { errc <- n.serveAMQP(n.amqpsLn) }()
	}
	started := []any{"node_id", n.opts.Cluster.NodeID, "http", n.HTTPAddr(), "amqp", n.AMQPAddr(),
		"raft", n.opts.Cluster.Self().Raft, "peers", len(n.opts.Cluster.Peers), "data_dir", n.opts.DataDir}
	if n.cert != nil {
		started = append(started, "tls", true)
	}
	if n.amqpsLn != nil {
		started = append(started, "amqps", n.AMQPSAddr())
	}
	n.log.Info("sluice cluster node started", started...)
	if n.opts.ReadyFile != "" {
		if err := server.WriteReadyFile(n.opts.ReadyFile, n.HTTPAddr(), n.AMQPAddr(), n.AMQPSAddr(), n.opts.DebugAddr); err != nil {
			n.log.Error("cannot write ready file", "err", err)
		}
	}

	var runErr error
	lead0 := &leadership{n: n, k: 0}
	lead0.onStatus(ctx, n.raft.Status())
	// The other shards' leaderships follow their own groups' changes,
	// those of the groups this node joins later too (follow.go).
	sctx, stopShards := context.WithCancel(ctx)
	n.startShards(sctx)
	if n.opts.Cluster.SubsetPlacement() && n.shards.Len() > 1 {
		go n.followPlacement(sctx)
	}
	rctx, stopReports := context.WithCancel(ctx)
	reportsDone := make(chan struct{})
	go func() { defer close(reportsDone); n.reportLoop(rctx) }()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case st := <-n.raft.Changes():
			lead0.onStatus(ctx, st)
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				runErr = err
			}
			break loop
		}
	}
	n.log.Info("sluice cluster node stopping")
	stopReports()
	<-reportsDone
	_ = n.httpLn.Close() // stop accepting; Shutdown below reports what matters
	for _, ln := range []net.Listener{n.amqpLn, n.amqpsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	n.mu.Lock()
	n.done = true
	n.mu.Unlock()
	n.closeRelays(reasonShutdown, func(uint64) bool { return true })
	stopShards()
	n.stopShards()
	lead0.end()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.httpSrv.Shutdown(sctx); err != nil {
		n.log.Warn("HTTP shutdown did not finish within 5 s", "err", err)
	}
	n.transport.CloseIdleConnections()
	n.publicTransport.CloseIdleConnections()
	// A graceful stop of a leader hands each leadership over, so the
	// cluster is writable again at once rather than after an election
	// timeout.
	tctx, tcancel := context.WithTimeout(context.Background(), 3*time.Second)
	var transfers sync.WaitGroup
	for k := range n.shards.Len() {
		r := n.shards.Shard(k)
		if r == nil {
			continue
		}
		transfers.Go(func() {
			if err := r.TransferLeadership(tctx); err != nil {
				n.log.Warn("leadership not handed over before stopping; the others will elect a leader", "shard", k, "err", err)
			}
		})
	}
	transfers.Wait()
	tcancel()
	if err := n.shards.Close(); err != nil {
		n.log.Error("closing the Raft node", "err", err)
		if runErr == nil {
			runErr = err
		}
	}
	return runErr
}

// shardLog is the node's logger, naming shard k when there are several.
func (n *Node) shardLog(k int) *slog.Logger {
	if n.shards.Len() > 1 {
		return n.log.With("shard", k)
	}
	return n.log
}

// rerouted records a leader change of shard k: requests waiting for a
// leader look again, requests forwarded to another node for that shard
// are cut, and pooled HTTP connections are dropped; for shard 0, AMQP
// relays to any other node are closed too (their clients reconnect to the
// new leader).
func (n *Node) rerouted(k int, leader uint64) {
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
	if k == 0 {
		n.closeRelays(reasonLeaderChanged, func(to uint64) bool { return to != leader })
	}
	if leader != 0 {
		// Not while no leader is known: the old one may still answer.
		n.cancelForwards(k, leader)
	}
	n.transport.CloseIdleConnections()
	if k == 0 {
		n.publicTransport.CloseIdleConnections()
	}
}

// dialInternal connects to a leader's internal listener (HTTP or AMQP,
// surface) at addr and runs the node handshake, expecting node leader (0:
// any node holding the secret). A listener that fails the handshake (one
// without the secret) is counted and logged.
func (n *Node) dialInternal(ctx context.Context, d *net.Dialer, surface, addr string, leader uint64) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	sc, _, err := n.enc.DialConn(c, n.keys[0], surface, n.opts.Cluster.NodeID, leader)
	if err != nil {
		_ = c.Close() // refused: nothing else was sent
		if errors.Is(err, nodeauth.ErrAuth) {
			n.authFailed(surface, c.RemoteAddr(), err)
		} else if n.failLog.Allow("dial " + surface + " " + addr) {
			n.log.Warn("the node handshake with the leader's internal listener failed", "surface", surface, "addr", addr, "err", err)
		}
		return nil, err
	}
	return sc, nil
}

// authFailed counts a connection refused by the node handshake on surface
// and logs it, at most once a minute per remote host.
func (n *Node) authFailed(surface string, remote net.Addr, err error) {
	n.metrics.authFailures.WithLabelValues(surface).Inc()
	if n.failLog.Allow(surface + " " + nodeauth.Host(remote)) {
		n.log.Warn("refused a connection that failed the node handshake (logged once a minute per address)", "surface", surface, "remote", remote.String(), "err", err)
	}
}

// Response headers of every HTTP response a leader's server writes: the
// Raft term of the leadership whose engine served it, and the leader's
// node id. A checker orders acknowledgements by them.
const (
	HeaderTerm = "X-Sluice-Term"
	HeaderNode = "X-Sluice-Node"
	// HeaderShard names the shard whose leader served the response (its
	// term is that shard's), with [cluster] shards above 1.
	HeaderShard = "X-Sluice-Shard"
	// HeaderEngine numbers the engine of the leadership that served the
	// response: 1 for the engine a term opens first, then 2, 3 … for each
	// fresh engine that replaces a failed one within the same term (lead).
	// A lease written without a sync (a receive's) that the failed engine
	// answered and Raft then dropped is unknown to the next one, so the
	// pair (term, engine), not the term alone, is an incarnation in which
	// no lease is forgotten.
	HeaderEngine = "X-Sluice-Engine"
)

// internalOptions are the leader's server settings for the leadership of
// shard k in term, for the engine-th engine it opens (HeaderEngine): this node's, with listeners on the configured internal
// addresses, by default port 0 of the Raft address's host (peers reach
// them there or at the advertised addresses, serveLocal). The caller sets
// InjectedStore to the replicated store bound to that leadership. With
// several shards, shard 0's server also lists the other shards' queues
// (ListQueues from this node's copies; the admin API's queue list and the
// dashboard's overview read from the other shards' leaders) and serves
// AMQP, reaching the other shards' SQS queues through their leaders
// (ShardCall, internal/server remote.go); the others serve no AMQP of
// their own.
func (n *Node) internalOptions(k int, term uint64, engine int) server.Options {
	o := n.opts
	if k == 0 {
		o.InternalHandler = n.internalHandler()
		if n.shards.Len() > 1 {
			o.OtherQueueNames = n.otherQueueNames
			o.OtherShards = func(ctx context.Context, path string) []server.ShardAnswer { return n.otherShards(ctx, 0, path) }
			o.DeclareElsewhere = func(ctx context.Context, qs []server.QueueDeclaration) ([]server.QueueDeclaration, error) {
				return n.declareElsewhere(ctx, 0, qs)
			}
			if n.opts.Cluster.SubsetPlacement() {
				// New AMQP queues are placed as SQS queues are, so that
				// their messages are not on every node (shard 0 is). Not
				// with every node in every shard: that spreads no copies,
				// and while AMQP enters through shard 0's leader, each
				// call to another shard's leader costs both ends more
				// than the local engine (docs/benchmarks.md, "AMQP queues
				// placed off shard 0": 0.6–0.7× the throughput).
				o.ShardCreate = func(ctx context.Context, name string, body []byte) error {
					return n.shardCreate(ctx, 0, name, body)
				}
			}
		}
	} else {
		mux := http.NewServeMux()
		n.memberInternalRoutes(mux, k)
		o.InternalHandler = mux
		// No AMQP, and the config's AMQP declarations are shard 0's
		// alone (each shard's server would otherwise make its own copy).
		o.AMQPListen = ""
		o.Cluster.InternalAMQPListen, o.Cluster.InternalAMQPAdvertise = "", "" // shard 0's
		o.Exchanges, o.AMQPQueues, o.Bindings = nil, nil, nil
	}
	if n.shards.Len() > 1 && len(o.Queues) > 0 {
		// The config's SQS queues: each shard's server declares those
		// placed on it.
		at := n.placeDeclared(o.Queues)
		var mine []server.QueueDeclaration
		for i, q := range o.Queues {
			if at[i] == k {
				mine = append(mine, q)
			}
		}
		o.Queues = mine
	}
	if n.shards.Len() > 1 {
		// Shard 0's leader reads this server's own listings (shardviews.go)
		// on its internal listener, which takes nodes alone; the
		// dashboard names each queue's shard and leader.
		o.ShardViews = true
		o.Placement = &server.Placement{Shard: k, Leader: o.Cluster.NodeID}
		// A name that lives on another shard is not created here too.
		o.NameTaken = func(name string) bool { return n.queueElsewhere(k, name) }
		// Shard 0's AMQP server uses the other shards' SQS queues; every
		// shard's mover carries dead letters to the shard of their
		// dead-letter queue (ADR 0015 step 5).
		o.ShardCall = func(ctx context.Context, name, path string, body []byte) ([]byte, error) {
			return n.shardCall(ctx, k, name, path, body)
		}
		o.QueueHeldElsewhere = func(name string) bool {
			if !server.ValidQueueName(name) {
				return false
			}
			at, ok := n.findQueue(name) // this node's copies: no catch-up, no network
			return ok && at != k
		}
		if k != 0 {
			// Dead letters of AMQP queues with a dead-letter exchange
			// placed here are routed by shard 0, whose AMQP topology
			// alone knows the exchange (ADR 0016 decision 6).
			o.RouteCall = func(ctx context.Context, body []byte) ([]byte, error) {
				return n.shardRequest(ctx, 0, http.MethodPost, server.ShardEnginePath, body, maxShardCallReply, 0)
			}
		} else {
			// Shard 0's own dead letters wait, as route transfers, while
			// its AMQP server restores the bindings to queues of other
			// shards after a start, rather than being routed through a
			// topology that lacks them (and dropped).
			o.RouteLater = true
		}
		// A deleted name is held on the shard it hashes to, whatever
		// front-end deletes it (SQS, the admin API, AMQP), before the
		// delete.
		o.HoldDeleted = func(name string) error { return n.holdDeleted(k, name) }
		if n.opts.Cluster.SubsetPlacement() {
			// Nodes without a copy of shard k list its queues from their
			// placements: a delete marks its queue's gone before it is
			// answered.
			o.Deleted = func(name string, at time.Time) { n.placeDeleted(k, name, at) }
		}
		o.SourcesElsewhere = func(fresh bool) (map[string][]string, error) {
			all := map[string][]string{}
			for j := range n.shards.Len() {
				if j == k {
					continue
				}
				var m map[string][]string
				var err error
				if r := n.shards.Shard(j); r != nil {
					m, err = server.StoredDeadLetterSources(r.Store())
				} else {
					m, err = n.shardMap(j, server.ShardDLSourcesPath, fresh) // a shard not held (ADR 0016): its leader's
				}
				if err != nil {
					return nil, fmt.Errorf("shard %d: %w", j, err)
				}
				for dlq, srcs := range m {
					all[dlq] = append(all[dlq], srcs...)
				}
			}
			if k != 0 {
				// Queues that AMQP dead-letter exchanges route to, with
				// their sources (shard 0's own routes them itself).
				for dlq, srcs := range n.amqpRoutes(fresh) {
					all[dlq] = append(all[dlq], srcs...)
				}
			}
			return all, nil
		}
		// One node may lead every shard at once (the others down): its
		// servers share its memory.
		o.NodeShare = n.shards.Len()
	}
	// Only nodes holding the cluster secret reach the internal listeners.
	o.WrapListener = func(kind string, ln net.Listener) net.Listener {
		return nodeauth.NewListener(ln, n.enc, n.keys, kind, o.Cluster.NodeID, func(remote net.Addr, err error) {
			n.authFailed(kind, remote, err)
		})
	}
	o.ResponseHeaders = http.Header{HeaderTerm: {strconv.FormatUint(term, 10)}, HeaderNode: {strconv.FormatUint(o.Cluster.NodeID, 10)},
		HeaderEngine: {strconv.Itoa(engine)}}
	if n.shards.Len() > 1 {
		o.ResponseHeaders.Set(HeaderShard, strconv.Itoa(k))
	}
	host, _, _ := net.SplitHostPort(o.Cluster.Self().Raft) // Validate checked it
	o.SQSListen = cmp.Or(server.ShardInternalAddr(o.Cluster.InternalHTTPListen, k), net.JoinHostPort(host, "0"))
	if o.AMQPListen != "" || (k == 0 && o.AMQPSListen != "") {
		// The public AMQP listeners' connections (plain or TLS) are
		// relayed here.
		o.AMQPListen = cmp.Or(o.Cluster.InternalAMQPListen, net.JoinHostPort(host, "0"))
	}
	o.ReadyFile = ""
	// This node's public listeners end TLS; the internal ones take nodes
	// alone, through the node handshake.
	o.TLS, o.AMQPSListen = server.TLSConfig{}, ""
	// The node watches its data directory and counts its followers'
	// disks (health.go), and sets the server's disk alarm itself.
	o.ExternalDiskWatch = true
	// Every forwarded request and relayed connection comes from a node's
	// address: per-IP caps there would cap the whole cluster. The public
	// listeners apply max_http_connections_per_ip and
	// amqp_max_connections_per_ip per client instead.
	o.MaxHTTPConnectionsPerIP = 0
	o.AMQPMaxConnectionsPerIP = -1
	// Clients address any node: its Host header must pass the leader's
	// allow-list (IP literals always do; names here).
	hosts := []string{}
	raftAddrs := []string{}
	for _, p := range o.Cluster.Peers {
		raftAddrs = append(raftAddrs, p.Raft)
	}
	for _, m := range n.shards.Shard(k).Members() { // members added at runtime too
		raftAddrs = append(raftAddrs, m.RaftAddr)
	}
	for _, a := range raftAddrs {
		if h, _, err := net.SplitHostPort(a); err == nil && net.ParseIP(h) == nil && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if h, _, err := net.SplitHostPort(n.opts.SQSListen); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h)
	}
	o.AllowedHosts = slices.Concat(o.AllowedHosts, hosts)
	return o
}

// routes is the public HTTP surface: GET /sluice/v1/cluster answered here,
// everything else forwarded to the leader.
func (n *Node) routes() http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			ad, _ := r.In.Context().Value(targetKey{}).(Advertisement)
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = ad.SQS
			// The client's Host: SigV4 signed it, queue URLs are built
			// from it, and the leader's allow-list checks it.
			r.Out.Host = r.In.Host
			// And how the client reached it, which the leader cannot
			// see (Rewrite drops the X-Forwarded headers): https when
			// this node ended TLS, else what a proxy in front said, as
			// the leader reads it when it serves the client itself.
			if r.In.TLS != nil {
				r.Out.Header.Set("X-Forwarded-Proto", "https")
			} else if p := r.In.Header.Values("X-Forwarded-Proto"); len(p) > 0 {
				r.Out.Header["X-Forwarded-Proto"] = p
			}
		},
		Transport: n.transport,
		ModifyResponse: func(resp *http.Response) error {
			_ = answeredForward(resp)
			n.awaitCreated(resp)
			return nil
		},
		// 0: event streams and answers of unknown length are flushed at
		// once by ReverseProxy itself; -1 also flushed every answer's
		// header in a write of its own, from a timer goroutine.
		FlushInterval: 0,
		ErrorLog:      slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			n.metrics.forwardErrors.Inc()
			n.log.Debug("forwarding to the leader failed", "err", err, "path", r.URL.Path, "cause", context.Cause(r.Context()))
			if errors.Is(context.Cause(r.Context()), errLeaderChanged) || n.deposed(r.Context()) {
				unavailable(w, r, "the leader changed while the request was forwarded; retry")
				return
			}
			unavailable(w, r, "the leader could not be reached; retry")
		},
	}
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, r, release, ok := n.shardOf(w, r)
		if !ok {
			return // answered
		}
		defer release()
		n.mu.Lock()
		changed := n.changed // for trackForward
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.Context(), n.hold)
		ad, leader, err := n.route(ctx, k)
		cancel()
		if err != nil {
			n.metrics.forwardErrors.Inc()
			unavailable(w, r, "no cluster leader is serving yet; retry")
			return
		}
		if srv := n.localServerFor(k, ad); srv != nil {
			if c, ok := r.Context().Value(createdKey{}).(created); ok && n.opts.Cluster.SubsetPlacement() {
				w = &placingWriter{ResponseWriter: w, n: n, ctx: r.Context(), c: c}
			}
			srv.Handler().ServeHTTP(w, r) // this node leads: no second HTTP hop
			return
		}
		fctx, done := n.trackForward(r.Context(), k, leader, changed)
		defer done()
		n.proxyFullDuplex(proxy, w, r.WithContext(context.WithValue(fctx, targetKey{}, ad)))
	})
	ha := n.opts.HTTPAuth.Options()
	ha.Logger = n.log.With("component", "httpauth")
	mux := http.NewServeMux()
	// The node's own status is an operator surface: behind [http_auth]
	// when configured, and the browser defences, like /metrics.
	mux.Handle("GET /sluice/v1/cluster", server.BrowserGuard(httpauth.Middleware(http.HandlerFunc(n.serveStatus), ha), n.opts.AllowedHosts))
	// One shard's leader, members and their lag (shardview.go), behind
	// the same guards.
	mux.Handle("GET /sluice/v1/cluster/shards/{shard}", server.BrowserGuard(httpauth.Middleware(http.HandlerFunc(n.serveShardView), ha), n.opts.AllowedHosts))
	// Each node's own Raft metrics, with the engine's on the leader
	// (metrics.go).
	mux.Handle("GET /metrics", server.BrowserGuard(httpauth.Middleware(http.HandlerFunc(n.serveMetrics), ha), n.opts.AllowedHosts))
	mux.Handle(internalPrefix, http.NotFoundHandler()) // the Raft network's only (clusterview.go)
	// This node's own health (health.go): open, like a single node's, for
	// load balancers and orchestrators, and never forwarded.
	mux.HandleFunc("GET /health", n.serveHealth)
	mux.Handle("GET /ready", server.BrowserGuard(http.HandlerFunc(n.serveReady), n.opts.AllowedHosts)) // a single node's /ready is behind the Host allow-list too
	n.memberRoutes(mux, ha)
	mux.Handle("/", forward)
	return mux
}

type targetKey struct{}

// unavailable answers 503 with Retry-After, which SDKs retry, in the shape
// the request's API uses (writeError), so that clients report
// ServiceUnavailable rather than an unknown error.
func unavailable(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("Retry-After", "1")
	writeError(w, r, http.StatusServiceUnavailable, "ServiceUnavailable", "Receiver", msg)
}

// writeError answers an error this node gives itself, in the shape the
// request's API uses: an SQS JSON error (x-amzn-query-error, __type) for
// the JSON protocol, an SQS Query ErrorResponse for form requests, and
// the admin API's error object for /sluice/ paths. fault is SQS's
// Sender or Receiver.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, fault, msg string) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/sluice/"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}}) // a client gone cannot be told
	case r.Header.Get("X-Amz-Target") != "" || strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json"):
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("x-amzn-query-error", code+";"+fault)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg}) // a client gone cannot be told
	default:
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		var b strings.Builder
		_ = xml.EscapeText(&b, []byte(msg))                                                                               // a strings.Builder does not fail
		_, _ = io.WriteString(w, "<ErrorResponse><Error><Type>"+fault+"</Type><Code>"+code+"</Code><Message>"+b.String()+ // a client gone cannot be told
			"</Message><Detail/></Error><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>")
	}
}
