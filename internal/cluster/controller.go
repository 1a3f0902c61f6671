package cluster

// The placement controller (ADR 0016 decision 4, [cluster] placement
// "subset"): on shard 0's leader, once a round, it compares where each
// shard above 0 lives (the memberships the shards' leaders record in
// shard 0, follow.go) with the cluster's nodes (shard 0's members, and
// which of them shard 0's leader has heard from within replace_after),
// and moves members, one change per shard per round, on that shard's
// leader:
//
//   - a shard with fewer live members than replication_factor gets a
//     learner: the live node with the fewest memberships that is not a
//     member (lowest id on a tie); the shard's leader sends it a
//     snapshot and promotes it once it has caught up;
//   - a shard with more members than the factor, or a member that is no
//     longer a node of the cluster (sluice cluster remove) or has been
//     silent for replace_after, while its live members are enough, has
//     the extra ones marked on its leader (raftstore's Retire): those
//     gone first, then the busiest: a marked voter is replaced by a
//     caught-up learner before it is demoted and removed, so a shard
//     never has fewer copies in sync than it had;
//   - when no shard is moving, one shard moves from the busiest live node
//     to the idlest when they differ by two or more memberships (a node
//     added, sluice cluster add, takes its share this way).
//
// Nothing of the controller is kept: each round starts from the records,
// so a new leader of shard 0 goes on where the last one stopped.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// placementView is what a round of the controller decides from.
type placementView struct {
	factor int
	// nodes are the cluster's nodes (shard 0's members), live those heard
	// from within replace_after.
	nodes []uint64
	live  map[uint64]bool
	// shards holds each shard's members as its leader recorded them; a
	// shard without a record is missing and left alone.
	shards map[int]shardRecord
	// refused lists, for each shard, the nodes its leader refused to add
	// (a member it removed before: raftstore.ErrIDRemoved).
	refused map[int]map[uint64]bool
}

// placementMove is one change of a shard's members: a node to add as a
// learner, or members to retire.
type placementMove struct {
	shard  int
	add    uint64
	retire []uint64
}

// planPlacement returns a round's moves: at most one per shard.
func planPlacement(v placementView) []placementMove {
	isNode := map[uint64]bool{}
	for _, id := range v.nodes {
		isNode[id] = true
	}
	load := map[uint64]int{}
	for _, id := range v.nodes {
		load[id] = 0
	}
	for _, rec := range v.shards {
		for _, id := range rec.members() {
			load[id]++
		}
	}
	// candidate is the live node, not a member of rec, with the fewest
	// memberships (lowest id on a tie); 0 if none.
	candidate := func(k int, rec shardRecord) uint64 {
		var best uint64
		for _, id := range v.nodes {
			if !v.live[id] || rec.has(id) || v.refused[k][id] {
				continue
			}
			if best == 0 || load[id] < load[best] || load[id] == load[best] && id < best {
				best = id
			}
		}
		return best
	}
	var moves []placementMove
	moving := false
	for _, k := range slices.Sorted(maps.Keys(v.shards)) {
		rec := v.shards[k]
		if !rec.known() {
			continue
		}
		var keep, gone []uint64
		for _, id := range rec.members() {
			if isNode[id] && v.live[id] {
				keep = append(keep, id)
			} else {
				gone = append(gone, id)
			}
		}
		switch {
		case len(keep) < v.factor:
			moving = true
			if c := candidate(k, rec); c != 0 {
				moves = append(moves, placementMove{shard: k, add: c})
				load[c]++
			}
		case len(keep) > v.factor || len(gone) > 0:
			moving = true
			// The busiest of those kept go, beyond the factor (the
			// highest id on a tie).
			slices.SortFunc(keep, func(a, b uint64) int {
				return cmp.Or(cmp.Compare(load[b], load[a]), cmp.Compare(b, a))
			})
			retire := append(gone, keep[:len(keep)-v.factor]...)
			slices.Sort(retire)
			moves = append(moves, placementMove{shard: k, retire: retire})
		}
	}
	if moving {
		return moves
	}
	// Balance: one shard from the busiest live node to the idlest.
	var busiest, idlest uint64
	for _, id := range v.nodes {
		if !v.live[id] {
			continue
		}
		if busiest == 0 || load[id] > load[busiest] || load[id] == load[busiest] && id > busiest {
			busiest = id
		}
		if idlest == 0 || load[id] < load[idlest] || load[id] == load[idlest] && id < idlest {
			idlest = id
		}
	}
	if busiest == 0 || load[busiest]-load[idlest] < 2 {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(v.shards)) {
		rec := v.shards[k]
		if rec.has(busiest) && !rec.has(idlest) && !v.refused[k][idlest] {
			return []placementMove{{shard: k, add: idlest}}
		}
	}
	return nil
}

// DefaultControlInterval is the placement controller's round when
// Options.BalanceInterval is 0: the balancer's.
const DefaultControlInterval = raftstore.DefaultBalanceInterval

// retireFor is how long a member marked to leave a shard stays marked
// on its leader: a few rounds, so that a controller that stops (shard
// 0's leadership moved) leaves no mark behind for long.
func (n *Node) retireFor() time.Duration {
	return 3 * cmp.Or(n.controlEvery, DefaultControlInterval)
}

// controlPlacement runs the placement controller while this node leads
// shard 0, until ctx ends (serveLocal, with [cluster] placement
// "subset").
func (n *Node) controlPlacement(ctx context.Context, log *slog.Logger) {
	since := time.Now()
	refused := map[int]map[uint64]bool{}
	t := time.NewTicker(cmp.Or(n.controlEvery, DefaultControlInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v := n.placementView(since)
		v.refused = refused
		for _, m := range planPlacement(v) {
			err := n.applyMove(ctx, m)
			switch {
			case errors.Is(err, raftstore.ErrIDRemoved):
				if refused[m.shard] == nil {
					refused[m.shard] = map[uint64]bool{}
				}
				refused[m.shard][m.add] = true
				log.Info("placement: the shard's leader will not take this node back (it left the shard before); another is chosen", "shard", m.shard, "node", m.add)
			case errors.Is(err, raftstore.ErrChangePending), errors.Is(err, raftstore.ErrMemberExists):
			case err != nil && ctx.Err() == nil:
				log.Info("placement: a move did not apply; next round retries", "shard", m.shard, "add", m.add, "retire", m.retire, "err", err)
			case err == nil && m.add != 0:
				log.Info("placement: a node added to a shard as a learner", "shard", m.shard, "node", m.add)
			}
		}
	}
}

// placementView reads a round's view on shard 0's leader, which has led
// since since.
func (n *Node) placementView(since time.Time) placementView {
	v := placementView{factor: n.opts.Cluster.Factor(), live: map[uint64]bool{}, shards: map[int]shardRecord{}}
	st := n.raft.Status()
	quiet := cmp.Or(time.Duration(n.opts.Cluster.ReplaceAfter), raftstore.DefaultReplaceAfter)
	now := time.Now()
	for _, m := range st.Members {
		v.nodes = append(v.nodes, m.ID)
		heard, ok := st.Heard[m.ID]
		if !ok {
			heard = since
		}
		v.live[m.ID] = m.ID == st.ID || now.Sub(heard) < quiet
	}
	for k := 1; k < n.shards.Len(); k++ {
		if rec, _, ok := n.shardRecordOf(k); ok && rec.known() {
			v.shards[k] = rec
		}
	}
	return v
}

// retirePath is the internal path on a shard's leader that marks members
// to leave the shard (retireRequest); placeAddPath the one that adds a
// node as a learner, also one that left the shard before
// (raftstore.Node.AddMemberAgain; a MemberRequest).
const (
	retirePath   = internalMembersPath + "/retire"
	placeAddPath = internalMembersPath + "/place"
)

// retireRequest is the body of a POST to retirePath.
type retireRequest struct {
	IDs []uint64 `json:"ids"`
	// ForMillis is how long the marks last.
	ForMillis int64 `json:"for_ms"`
}

// applyMove sends m to its shard's leader.
func (n *Node) applyMove(ctx context.Context, m placementMove) error {
	path, req := retirePath, any(retireRequest{IDs: m.retire, ForMillis: n.retireFor().Milliseconds()})
	if m.add != 0 {
		addr := ""
		for _, mem := range n.raft.Members() {
			if mem.ID == m.add {
				addr = mem.RaftAddr
			}
		}
		if addr == "" {
			return fmt.Errorf("node %d has no Raft address in shard 0", m.add)
		}
		path, req = placeAddPath, MemberRequest{ID: m.add, Raft: addr}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = n.shardRequest(ctx, m.shard, http.MethodPost, path, body, 64<<10, MembershipTimeout)
	var ae *shardAnswerError
	if errors.As(err, &ae) {
		return memberAnswer(ae.status, bytes.NewReader(ae.body))
	}
	return err
}

// serveRetire marks members of shard k to leave it, on its leader
// (raftstore's Retire). When this node is among them it hands its
// leadership over to a voter that is not, so that the next leader moves
// it out.
func (n *Node) serveRetire(k int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rn := n.shards.Shard(k)
		if rn == nil || !n.leadsShard(k) {
			unavailable(w, r, "this node no longer leads; retry")
			return
		}
		var req retireRequest
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxMemberRequestSize+1))
		if err == nil && len(body) > MaxMemberRequestSize {
			err = errors.New("too long")
		}
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err != nil || req.ForMillis <= 0 {
			memberError(w, http.StatusBadRequest, "InvalidRequest", fmt.Sprintf("the body must be {\"ids\": [...], \"for_ms\": > 0}: %v", err))
			return
		}
		if err := rn.Retire(req.IDs, time.Duration(req.ForMillis)*time.Millisecond); err != nil {
			n.membershipDone(w, r, rn, err)
			return
		}
		if slices.Contains(req.IDs, n.opts.Cluster.NodeID) {
			var to []uint64
			for _, id := range rn.TransferCandidates() {
				if !slices.Contains(req.IDs, id) {
					to = append(to, id)
				}
			}
			if len(to) > 0 {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := rn.TransferLeadershipTo(ctx, to[0]); err != nil {
						n.shardLog(k).Info("placement: this leader, moved out of the shard, did not hand over", "to", to[0], "err", err)
					}
				}()
			}
		}
		n.membershipDone(w, r, rn, nil)
	}
}
