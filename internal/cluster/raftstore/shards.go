package raftstore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/cluster/nodeauth"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Shards is a node's share of a sharded cluster (ADR 0015): one Raft
// group per shard, every group with the same members, all served on one
// listener (mux.go). Every group elects on its own, so their leaders can
// sit on different nodes; the leader of shard 0 runs a balancer that
// keeps them spread (balance). A one-shard Shards is a Node as Open makes
// it, on the same directory and wire format.
//
// Shards hosts the groups only: which shard holds which queue, and
// calls between nodes for a queue led elsewhere, are the layers above
// (ADR 0015 steps 3 to 5).
type Shards struct {
	cfg   Config // the node's, for the groups opened later (Join)
	count int
	// leaderOf is ShardPlan.Leader: set, each shard's leader spreads the
	// leaderships (balanceOwn).
	leaderOf func(k int) uint64
	// joinMu serializes Join, Leave and Close.
	joinMu sync.Mutex
	// nodes holds this node's member of each shard's group; nil for a
	// shard whose group this node does not hold (ADR 0016: a shard on a
	// subset of the nodes). Read without a lock: Shard is on every
	// request's path.
	nodes []atomic.Pointer[Node]
	// logs is the node's shared Raft log store, with several shards
	// (sharedlog.go; nil with one): closed after every group.
	logs     *pebblestore.Store
	mux      *mux
	log      *slog.Logger
	interval time.Duration // between two balancer rounds
	election time.Duration // the groups' election timeout

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	hold atomic.Bool // tests: the balancer skips its rounds
}

// DefaultBalanceInterval is how often shard 0's leader looks at where the
// shards' leaders are (ADR 0015: every 10 s).
const DefaultBalanceInterval = 10 * time.Second

// ShardDir is the directory of shard k's group under a node's data
// directory: shard 0's is the directory itself (a one-group node's
// layout, unchanged), shard k's the subdirectory "shard-<k>".
func ShardDir(dir string, k int) string {
	if k == 0 {
		return dir
	}
	return filepath.Join(dir, fmt.Sprintf("shard-%d", k))
}

// OpenShards opens count groups as this node (count ≥ 1): shard k's with
// cfg, its directory ShardDir(cfg.Dir, k) and its Shard k, all on
// cfg.Listener, which OpenShards takes (Close closes it, and so does a
// failed OpenShards). balance is the balancer's interval (0:
// DefaultBalanceInterval). Every member of the cluster must open the same
// count: a shard a peer does not serve refuses this node's handshake.
func OpenShards(cfg Config, count int, balance time.Duration) (s *Shards, err error) {
	return OpenShardsPlan(cfg, count, balance, ShardPlan{})
}

// ShardPlan says which groups OpenShardsPlan opens, and with which
// members (ADR 0016); its zero value opens every shard with the members
// Config.Peers lists.
type ShardPlan struct {
	// Held reports whether this node opens shard k's group (shard 0's
	// always); nil: every shard's.
	Held func(k int) bool
	// Peers, when set, lists the members of shard k's group when the
	// cluster is bootstrapped (its Config.Peers), given all, the node's
	// Config.Peers; nil: all.
	Peers func(k int, all []Peer) []Peer
	// Leader, when set, is the leader of shard k, a shard this node does
	// not hold, as the layer above knows it (0: unknown). With it the
	// leaderships are spread by each shard's own leader (balanceOwn)
	// rather than by shard 0's, which knows the voters of the shards it
	// holds only.
	Leader func(k int) uint64
	// Joined, when set, reports that this node holds shard k's group as a
	// member added at runtime (Join) rather than one of its boot
	// members: it is opened as Join opens it (Config.Join), so a group
	// whose snapshot never arrived waits for one instead of bootstrapping
	// with Peers.
	Joined func(k int) bool
}

// OpenShardsPlan is OpenShards with plan: a shard it does not hold has
// no group on this node (Shard answers nil; its connections are closed
// after their handshake) until Join opens one. A group Leave left and a
// crash cut short is removed here.
func OpenShardsPlan(cfg Config, count int, balance time.Duration, plan ShardPlan) (s *Shards, err error) {
	if cfg.Listener == nil {
		return nil, errors.New("raftstore: no listener")
	}
	if count < 1 {
		_ = cfg.Listener.Close()
		return nil, fmt.Errorf("raftstore: %d shards: want 1 or more", count)
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	tick := cmp.Or(cfg.TickInterval, DefaultTickInterval)
	if cfg.snapLimits == nil {
		// One snapshot budget for all the groups (snaplimit.go); Open
		// validates the settings it is made from.
		cfg.snapLimits = newSnapLimits(&cfg)
	}
	s = &Shards{
		cfg: cfg, count: count, nodes: make([]atomic.Pointer[Node], count), leaderOf: plan.Leader,
		log: log, interval: cmp.Or(balance, DefaultBalanceInterval),
		election: electionTicks * tick, stop: make(chan struct{}),
	}
	if count > 1 && !cfg.ownLogs {
		if s.logs, err = openSharedLog(ShardDir(cfg.Dir, 0), cfg.FS, log); err != nil {
			_ = cfg.Listener.Close()
			return nil, err
		}
	}
	s.mux = newMux(cfg.Listener, cfg.ID, count, nodeauth.With(cfg.Secret, cfg.ExtraSecret), cfg.Encryption, cfg.OnAuthFailure, log.With("node", cfg.ID))
	for k := range count {
		if k > 0 && s.logs != nil {
			if err := s.finishLeave(k); err != nil {
				_ = s.closeNodes()
				s.mux.close()
				return nil, fmt.Errorf("raftstore: shard %d: removing the group this node left: %w", k, err)
			}
		}
		if k > 0 && plan.Held != nil && !plan.Held(k) {
			continue
		}
		c := s.groupConfig(k)
		if plan.Peers != nil {
			c.Peers = plan.Peers(k, c.Peers)
		}
		if k > 0 && plan.Joined != nil && plan.Joined(k) {
			c.Join = true
		}
		n, err := Open(c)
		if err != nil {
			_ = s.closeNodes() // the open error is the one to report
			s.mux.close()
			return nil, fmt.Errorf("raftstore: shard %d: %w", k, err)
		}
		s.nodes[k].Store(n)
	}
	if count > 1 {
		s.wg.Add(1)
		go s.balance()
	}
	return s, nil
}

// groupConfig is the Config of shard k's group on this node.
func (s *Shards) groupConfig(k int) Config {
	c := s.cfg
	c.Shard, c.Dir, c.Listener, c.sharedLog = k, ShardDir(s.cfg.Dir, k), s.mux.listener(k), s.logs
	if s.count > 1 {
		c.Logger = s.log.With("shard", k)
	}
	return c
}

// Len is the number of shards.
func (s *Shards) Len() int { return s.count }

// Shard is this node's member of shard k's group; nil when this node
// does not hold the group (OpenShardsPlan, Leave).
func (s *Shards) Shard(k int) *Node {
	return s.nodes[k].Load()
}

// Held reports whether this node holds shard k's group.
func (s *Shards) Held(k int) bool { return s.Shard(k) != nil }

// Leaders lists, for each shard, its leader as this node knows it (0:
// none known, or a shard whose group this node does not hold).
func (s *Shards) Leaders() []uint64 {
	out := make([]uint64, s.count)
	for k := range s.count {
		if n := s.Shard(k); n != nil {
			out[k] = n.Status().Leader
		}
	}
	return out
}

// ErrShardHeld and ErrShardNotHeld are Join's and Leave's answers for a
// group this node already holds, or does not; ErrShardZero is Leave's
// for shard 0, which every node holds.
var (
	ErrShardHeld    = errors.New("raftstore: this node already holds the shard's group")
	ErrShardNotHeld = errors.New("raftstore: this node does not hold the shard's group")
	ErrShardZero    = errors.New("raftstore: shard 0's group cannot be left")
)

// Join opens shard k's group on this node, which does not hold it, as a
// member being added (Config.Join: it never campaigns on its own and
// learns the group's state from its leader, by a snapshot, once that
// leader has run AddMember for it); peers lists this node and members it
// can reach. A group this node left before is opened empty. With a
// single shard, or no shared log, there is nothing to join.
func (s *Shards) Join(k int, peers []Peer) (*Node, error) {
	if k <= 0 || k >= s.count {
		return nil, fmt.Errorf("raftstore: shard %d: want 1 to %d", k, s.count-1)
	}
	s.joinMu.Lock()
	defer s.joinMu.Unlock()
	if s.Held(k) {
		return nil, fmt.Errorf("shard %d: %w", k, ErrShardHeld)
	}
	select {
	case <-s.stop:
		return nil, ErrNodeClosed
	default:
	}
	c := s.groupConfig(k)
	c.Join, c.Peers = true, peers
	n, err := Open(c)
	if err != nil {
		_ = s.mux.current(k).Close()
		return nil, fmt.Errorf("raftstore: shard %d: %w", k, err)
	}
	s.nodes[k].Store(n)
	s.log.Info("raftstore: joined a shard's group", "shard", k)
	return n, nil
}

// Leave closes this node's member of shard k's group and deletes its
// state: its directory and its keys in the shared log. A member still in
// the group's membership is simply gone to the others, as a node down;
// the caller leaves once the group has removed it. A crash part way is
// finished by the next OpenShardsPlan.
func (s *Shards) Leave(k int) error {
	if k == 0 {
		return ErrShardZero
	}
	if k < 0 || k >= s.count {
		return fmt.Errorf("raftstore: shard %d: want 1 to %d", k, s.count-1)
	}
	s.joinMu.Lock()
	defer s.joinMu.Unlock()
	n := s.nodes[k].Swap(nil)
	if n == nil {
		return fmt.Errorf("shard %d: %w", k, ErrShardNotHeld)
	}
	if err := n.Close(); err != nil && !errors.Is(err, ErrNodeClosed) {
		s.log.Warn("raftstore: closing the group this node leaves", "shard", k, "err", err)
	}
	if sl := s.mux.current(k); sl != nil {
		_ = sl.Close()
	}
	fs := s.cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	dir := ShardDir(s.cfg.Dir, k)
	if err := renameSynced(fs, dir, dir+leftSuffix, s.cfg.Dir); err != nil {
		return fmt.Errorf("raftstore: shard %d: %w", k, err)
	}
	if err := s.finishLeave(k); err != nil {
		return fmt.Errorf("raftstore: shard %d: %w", k, err)
	}
	s.log.Info("raftstore: left a shard's group; its state is deleted", "shard", k)
	return nil
}

// leftSuffix marks the directory of a group being left (Leave).
const leftSuffix = ".left"

// finishLeave deletes what is left of shard k's group once its directory
// was renamed by Leave: its keys in the shared log, then the directory.
// Without the renamed directory it does nothing.
func (s *Shards) finishLeave(k int) error {
	fs := s.cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	left := ShardDir(s.cfg.Dir, k) + leftSuffix
	if _, err := fs.Stat(left); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if err := deleteShardLog(s.logs, k); err != nil {
		return err
	}
	return fs.RemoveAll(left)
}

// Close stops the balancer and every group, then the listener.
func (s *Shards) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.joinMu.Lock() // a Join under way ends first
		defer s.joinMu.Unlock()
		err = s.closeNodes()
		s.mux.close()
	})
	return err
}

func (s *Shards) closeNodes() error {
	var errs []error
	for k := range s.nodes {
		n := s.nodes[k].Load()
		if n == nil {
			continue
		}
		if err := n.Close(); err != nil && !errors.Is(err, ErrNodeClosed) {
			errs = append(errs, err)
		}
	}
	if s.logs != nil {
		if err := s.logs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftstore: shared raft log: %w", err))
		}
		s.logs = nil
	}
	return errors.Join(errs...)
}

// balance runs on every node. With ShardPlan.Leader each round is
// balanceOwn, run by every shard's leader for its own shards; otherwise
// it acts while this node leads shard 0:
// once a round, if one node leads at least two shards more than another
// that shard 0's leader hears from, it asks for one of the first's
// leaderships to move to the second (Raft's leadership transfer, which a
// follower forwards to the shard's leader). At most one transfer per
// round, and only after two rounds that saw the same leaders and the same
// nodes.
func (s *Shards) balance() {
	defer s.wg.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	// The last round's view: the shard-0 leadership, each shard's leader
	// and the eligible nodes. A move needs two rounds in a row that saw
	// the same: a leader just elected or a node just gone (still heard
	// for up to an election timeout after it died) waits a round, so a
	// leadership is not sent to a dead node (its group would refuse
	// writes until the transfer is abandoned, an election timeout later).
	var (
		term     uint64
		leaders  []uint64
		eligible [][]uint64
	)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.leaderOf != nil {
			if s.hold.Load() {
				leaders = nil
			} else {
				leaders = s.balanceOwn(leaders)
			}
			continue
		}
		st := s.Shard(0).Status()
		if st.Role != "leader" || s.hold.Load() {
			term, leaders, eligible = 0, nil, nil
			continue
		}
		l, e := s.Leaders(), s.eligible(st)
		stable := st.Term == term && slices.Equal(l, leaders) && slices.EqualFunc(e, eligible, slices.Equal)
		term, leaders, eligible = st.Term, l, e
		if !stable {
			continue
		}
		k, to, ok := balanceMoveEach(l, e)
		if !ok {
			continue
		}
		r := s.Shard(k)
		if r == nil {
			continue // left since
		}
		leaders = nil // the next round waits for the move to show
		s.log.Info("raftstore: moving a shard's leadership to spread the leaders", "shard", k, "from", r.Status().Leader, "to", to)
		r.requestTransfer(to)
	}
}

// allLeaders lists each shard's leader: from its group's status where
// this node holds it, else from ShardPlan.Leader (0: unknown).
func (s *Shards) allLeaders() []uint64 {
	out := make([]uint64, s.count)
	for k := range s.count {
		if r := s.Shard(k); r != nil {
			out[k] = r.Status().Leader
		} else if s.leaderOf != nil {
			out[k] = s.leaderOf(k)
		}
	}
	return out
}

// balanceOwn is one round of the balancer when each shard's leader
// spreads the leaderships (ShardPlan.Leader): given the leaders the last
// round saw, it returns this round's (nil after a move, so that the next
// round waits for it to show). Once two rounds in a row saw the same
// leaders, every one known, it moves at most one leadership this node
// holds — of the highest-numbered shard it leads, shard 0 last — to the
// voter of that shard, live as the shard's own status says (eligibleAt),
// that leads the fewest shards (lowest id on a tie), when this node leads
// at least two more (ownMove).
func (s *Shards) balanceOwn(prev []uint64) []uint64 {
	l := s.allLeaders()
	if !slices.Equal(l, prev) || slices.Contains(l, 0) {
		return l
	}
	now := time.Now()
	for k := s.count - 1; k >= 0; k-- {
		r := s.Shard(k)
		if r == nil {
			continue
		}
		st := r.Status()
		if st.Role != "leader" || st.Leader != st.ID {
			continue
		}
		to, ok := ownMove(l, st.ID, eligibleAt(r.Members(), st, now, s.election))
		if !ok {
			continue
		}
		s.log.Info("raftstore: moving a shard's leadership to spread the leaders", "shard", k, "from", st.ID, "to", to)
		r.requestTransfer(to)
		return nil
	}
	return l
}

// ownMove is where node self, which leads a shard whose eligible voters
// are eligible, moves it, given every shard's leader: to the eligible
// voter other than self that leads the fewest shards (lowest id on a
// tie), when self leads at least two more.
func ownMove(leaders []uint64, self uint64, eligible []uint64) (uint64, bool) {
	count := map[uint64]int{}
	for _, l := range leaders {
		count[l]++
	}
	var least uint64
	for _, id := range eligible {
		if id == self {
			continue
		}
		if least == 0 || count[id] < count[least] || count[id] == count[least] && id < least {
			least = id
		}
	}
	if least == 0 || count[self]-count[least] < 2 {
		return 0, false
	}
	return least, true
}

// answeredWithin: a voter whose last Raft message to shard 0's leader is
// older than the election timeout over this is not given a leadership.
// A live voter answers a heartbeat every tick (a tenth of the timeout);
// Heard alone, refreshed once an election timeout, kept a node killed a
// moment before eligible for up to two timeouts, and a leadership sent to
// it left its shard refusing writes until Raft abandoned the transfer
// (the likely cause of a 3-shard fault run in which shard 2's leader
// had its writes dropped for two seconds, failing three engines).
const answeredWithin = 2

// eligible lists, for each shard, the nodes shard 0's leader (this node,
// whose status st is) may move its leadership to: the voters of shard 0
// it hears from (eligibleAt) that are voters of that shard too. A shard
// whose group this node does not hold gets nil: the balancer leaves it
// alone (ADR 0016; its voters are not known here).
func (s *Shards) eligible(st Status) [][]uint64 {
	live := eligibleAt(s.Shard(0).Members(), st, time.Now(), s.election)
	out := make([][]uint64, s.count)
	for k := range s.count {
		r := s.Shard(k)
		if r == nil {
			continue
		}
		if k == 0 {
			out[k] = live
			continue
		}
		out[k] = []uint64{} // held: balanced, with whoever may lead it
		for _, m := range r.Members() {
			if m.Membership == Voter && slices.Contains(live, m.ID) {
				out[k] = append(out[k], m.ID)
			}
		}
	}
	return out
}

// eligibleAt lists the voters among members that the leader whose status
// st is has, at now, heard from within an election timeout and had a Raft
// message from within election/answeredWithin, itself included.
func eligibleAt(members []Member, st Status, now time.Time, election time.Duration) []uint64 {
	var out []uint64
	for _, m := range members {
		if m.Membership != Voter {
			continue
		}
		h, heard := st.Heard[m.ID]
		a, answered := st.Answered[m.ID]
		if m.ID == st.ID || heard && now.Sub(h) <= election && answered && now.Sub(a) <= election/answeredWithin {
			out = append(out, m.ID)
		}
	}
	return out
}

// balanceMove picks one leadership to move, given each shard's leader (0:
// unknown) and the nodes that may take one: from the node leading the
// most shards (lowest id on a tie) to the eligible node leading the
// fewest (lowest id on a tie), when the two differ by two or more; the
// shard moved is the highest-numbered of the first's, so shard 0 (and the
// balancer with it) moves last. No move while a shard has no known
// leader (an election under way).
func balanceMove(leaders []uint64, eligible []uint64) (shard int, to uint64, ok bool) {
	each := make([][]uint64, len(leaders))
	for k := range each {
		each[k] = eligible
	}
	return balanceMoveEach(leaders, each)
}

// balanceMoveEach is balanceMove with, for each shard, the nodes that may
// take its leadership (its voters among the eligible, ADR 0016); a shard
// with nil is left out (neither counted nor moved). The move is from the
// node leading the most counted shards (lowest id on a tie), of the
// highest-numbered of its shards that has an eligible node leading two
// fewer or less, to the one of those leading the fewest (lowest id on a
// tie). When every shard has the same list it is balanceMove.
func balanceMoveEach(leaders []uint64, eligible [][]uint64) (shard int, to uint64, ok bool) {
	count := map[uint64]int{}
	for k, l := range leaders {
		if eligible[k] == nil {
			continue
		}
		for _, id := range eligible[k] {
			count[id] += 0
		}
		if l == 0 {
			return 0, 0, false // an election under way
		}
		count[l]++
	}
	ids := make([]uint64, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var most uint64
	for _, id := range ids {
		if most == 0 || count[id] > count[most] {
			most = id
		}
	}
	for k := len(leaders) - 1; k >= 0; k-- {
		if leaders[k] != most || len(eligible[k]) < 2 {
			continue
		}
		var least uint64
		for _, id := range eligible[k] {
			if least == 0 || count[id] < count[least] || count[id] == count[least] && id < least {
				least = id
			}
		}
		if count[most]-count[least] >= 2 {
			return k, least, true
		}
	}
	return 0, 0, false
}
