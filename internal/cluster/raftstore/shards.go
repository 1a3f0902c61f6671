package raftstore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	nodes []*Node
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
	if cfg.Listener == nil {
		return nil, errors.New("raftstore: no listener")
	}
	if count < 1 {
		_ = cfg.Listener.Close()
		return nil, fmt.Errorf("raftstore: %d shards: want 1 or more", count)
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	tick := cmp.Or(cfg.TickInterval, DefaultTickInterval)
	s = &Shards{
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
		c := cfg
		c.Shard, c.Dir, c.Listener, c.sharedLog = k, ShardDir(cfg.Dir, k), s.mux.listener(k), s.logs
		if count > 1 {
			c.Logger = log.With("shard", k)
		}
		n, err := Open(c)
		if err != nil {
			_ = s.closeNodes() // the open error is the one to report
			s.mux.close()
			return nil, fmt.Errorf("raftstore: shard %d: %w", k, err)
		}
		s.nodes = append(s.nodes, n)
	}
	if count > 1 {
		s.wg.Add(1)
		go s.balance()
	}
	return s, nil
}

// Len is the number of shards.
func (s *Shards) Len() int { return len(s.nodes) }

// Shard is this node's member of shard k's group.
func (s *Shards) Shard(k int) *Node { return s.nodes[k] }

// Leaders lists, for each shard, its leader as this node knows it (0:
// none known).
func (s *Shards) Leaders() []uint64 {
	out := make([]uint64, len(s.nodes))
	for k, n := range s.nodes {
		out[k] = n.Status().Leader
	}
	return out
}

// Close stops the balancer and every group, then the listener.
func (s *Shards) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		err = s.closeNodes()
		s.mux.close()
	})
	return err
}

func (s *Shards) closeNodes() error {
	var errs []error
	for _, n := range s.nodes {
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

// balance runs on every node and acts while this node leads shard 0:
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
		term              uint64
		leaders, eligible []uint64
	)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		st := s.nodes[0].Status()
		if st.Role != "leader" || s.hold.Load() {
			term, leaders, eligible = 0, nil, nil
			continue
		}
		l, e := s.Leaders(), s.eligible(st)
		stable := st.Term == term && slices.Equal(l, leaders) && slices.Equal(e, eligible)
		term, leaders, eligible = st.Term, l, e
		if !stable {
			continue
		}
		k, to, ok := balanceMove(l, e)
		if !ok {
			continue
		}
		leaders = nil // the next round waits for the move to show
		s.log.Info("raftstore: moving a shard's leadership to spread the leaders", "shard", k, "from", s.nodes[k].Status().Leader, "to", to)
		s.nodes[k].requestTransfer(to)
	}
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

// eligible lists the voters of shard 0 that its leader (this node, whose
// status st is) may move a leadership to (eligibleAt).
func (s *Shards) eligible(st Status) []uint64 {
	return eligibleAt(s.nodes[0].Members(), st, time.Now(), s.election)
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
	if len(eligible) < 2 {
		return 0, 0, false
	}
	count := map[uint64]int{}
	for _, id := range eligible {
		count[id] = 0
	}
	for _, l := range leaders {
		if l == 0 {
			return 0, 0, false
		}
		count[l]++
	}
	ids := make([]uint64, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var most, least uint64
	for _, id := range ids {
		if most == 0 || count[id] > count[most] {
			most = id
		}
	}
	for _, id := range eligible {
		if least == 0 || count[id] < count[least] || count[id] == count[least] && id < least {
			least = id
		}
	}
	if count[most]-count[least] < 2 {
		return 0, 0, false
	}
	for k := len(leaders) - 1; k >= 0; k-- {
		if leaders[k] == most {
			return k, least, true
		}
	}
	return 0, 0, false
}
