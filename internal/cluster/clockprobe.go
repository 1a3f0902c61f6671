package cluster

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// A leadership that starts without a measurement of its own.
//
// leadershipClock starts a leadership on the previous leader's clock as
// this node measured it at its status reports (timeline.go). A node that
// has no such measurement, or only one older than offsetMaxAge — it has
// just restarted and won the election before its first report, the whole
// cluster restarted, or it was cut off — asks the voters instead, before
// its server starts and so before anything it inherited can expire: a
// probe (raftstore.Probe, on the Raft listener, behind the node
// handshake) to every other voter at once, each answering with its wall
// clock and, when it has one, its estimate of the cluster's clock (the
// engine clock of its own leadership, or its wall clock corrected by a
// good measurement of at most offsetMaxAge, erring late as
// startAdjustment does). probedAdjustment turns the answers into the
// leadership's starting adjustment, erring late by each answer's half
// round trip:
//
//   - any estimate: the earliest of them, which is the previous leader's
//     clock continued;
//   - none (the whole cluster restarted, or its voters were all cut off
//     too): the median of the wall clocks of the voters that answered
//     and this node's own, when those are a majority of the voters, with
//     the earlier of the two middle values for an even count (two voters
//     that disagree: the later deadlines win);
//   - fewer than a majority answered: this node's own clock.
//
// A voter of an older release never answers; probeWait bounds the wait,
// which only a leadership without a measurement pays.

// probeWait bounds the probes of a leadership that starts without a
// measurement: a voter that has not answered by then is left out.
const probeWait = 300 * time.Millisecond

// clockAnswerSize is a clock probe's answer: this node's wall clock and
// its estimate of the cluster's clock (0: none), Unix nanoseconds,
// big-endian; then (since 2026-12-02, beaconAnswerSize more) the bound
// this node has on the clock of the probed shard's latest leadership: its
// term and the bound, Unix nanoseconds (0: none; beacon.go); then (since
// 2026-12-04) statusAnswerSize of status flags (silent.go).
const (
	clockAnswerSize  = 16
	beaconAnswerSize = 16
)

// clockAnswer is this node's answer to a clock probe on shard k's
// connections (raftstore Config.ProbeAnswer).
func (n *Node) clockAnswer(k int) []byte {
	n.mu.Lock()
	tl, c, shards := n.timeline, n.clockGood, n.shards
	n.mu.Unlock()
	now := n.clk.Now()
	var est int64
	if tl != nil {
		est = tl.Now().UnixNano() // this node leads: the cluster's clock itself
	} else if age := now.Sub(c.at); c.measured && age >= 0 && age <= offsetMaxAge {
		est = now.Add(startAdjustment(c, age)).UnixNano()
	}
	b := binary.BigEndian.AppendUint64(make([]byte, 0, clockAnswerSize+beaconAnswerSize+statusAnswerSize), uint64(now.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(est))
	var term uint64
	var bound int64
	if shards != nil && k >= 0 && k < shards.Len() {
		if r := shards.Shard(k); r != nil {
			if at, t, ok := beaconBound(r.AdvertisedSince(), now); ok {
				term, bound = t, at.UnixNano()
			}
		}
	}
	b = binary.BigEndian.AppendUint64(b, term)
	b = binary.BigEndian.AppendUint64(b, uint64(bound))
	return binary.BigEndian.AppendUint64(b, n.statusFlags())
}

// probed is one voter's answer to a clock probe, against this node's
// clock at the midpoint of the exchange.
type probed struct {
	wall time.Duration // the voter's wall clock minus this node's
	// est is the voter's estimate of the cluster's clock minus this
	// node's, less uncertainty; hasEst is false when it had none.
	est    time.Duration
	hasEst bool
	// uncertainty is half the exchange's round trip.
	uncertainty time.Duration
}

// probeClock asks every other voter of shard 0 for its clock and returns
// probedAdjustment's verdict on the answers that came within probeWait,
// and those answers (they carry shard 0's stamp bound too, for
// boundByBeacon).
func (n *Node) probeClock(ctx context.Context) (adj time.Duration, from string, ok bool, raw []voterAnswer) {
	voters, raw := n.probeVoters(ctx, 0)
	answers := make([]probed, 0, len(raw))
	for _, v := range raw {
		a := v.answer
		if len(a) < clockAnswerSize {
			n.log.Debug("no clock from a voter", "voter", v.id, "answer_bytes", len(a))
			continue
		}
		rtt := v.got.Sub(v.sent)
		mid := v.sent.Add(rtt / 2)
		p := probed{uncertainty: rtt / 2, wall: time.Unix(0, int64(binary.BigEndian.Uint64(a))).Sub(mid)}
		if est := int64(binary.BigEndian.Uint64(a[8:])); est != 0 {
			p.est, p.hasEst = time.Unix(0, est).Sub(mid)-p.uncertainty, true
		}
		answers = append(answers, p)
	}
	adj, from, ok = probedAdjustment(answers, voters)
	return adj, from, ok, raw
}

// voterAnswer is one voter's answer to a probe, with this node's clock
// just before the question and just after the answer.
type voterAnswer struct {
	id        uint64
	answer    []byte
	sent, got time.Time
}

// probeVoters probes every voter of shard k's group but this node at once
// and returns how many voters the group has and the answers that came
// within probeWait (a voter that could not be asked is logged and left
// out).
func (n *Node) probeVoters(ctx context.Context, k int) (voters int, answers []voterAnswer) {
	r := n.shards.Shard(k)
	self := n.opts.Cluster.NodeID
	var others []uint64
	for _, m := range r.Members() {
		if m.Membership != raftstore.Voter {
			continue
		}
		voters++
		if m.ID != self {
			others = append(others, m.ID)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, id := range others {
		wg.Go(func() {
			a, sent, got, err := r.Probe(ctx, id, n.clk.Now)
			if err != nil {
				n.log.Debug("no answer from a voter", "voter", id, "err", err)
				return
			}
			mu.Lock()
			answers = append(answers, voterAnswer{id: id, answer: a, sent: sent, got: got})
			mu.Unlock()
		})
	}
	wg.Wait()
	n.log.Debug("probed the voters", "shard", k, "voters", voters, "answers", len(answers))
	return voters, answers
}

// probedAdjustment is the adjustment a leadership starts with from the
// voters' answers (this node's own clock not among them) out of voters:
// see the comment at the top of this file. Answers less certain than
// offsetMaxUncertainty are left out — unless without them fewer than a
// majority answered: then every answer counts, each erring late by its
// own uncertainty, which on a loaded machine (round trips of tens of
// milliseconds) is still far nearer the cluster's time than this node's
// own clock, the only other choice. (Until 2026-12-02 they were left out
// either way, and a node 20 s ahead that restarted on a loaded machine
// led on its own clock.)
func probedAdjustment(answers []probed, voters int) (adj time.Duration, from string, ok bool) {
	if adj, from, ok := probedFrom(answers, voters, offsetMaxUncertainty); ok {
		return adj, from, true
	}
	return probedFrom(answers, voters, probeWait)
}

// probedFrom is probedAdjustment on the answers at most maxUncertainty
// uncertain.
func probedFrom(answers []probed, voters int, maxUncertainty time.Duration) (adj time.Duration, from string, ok bool) {
	var ests, walls []time.Duration
	walls = append(walls, 0) // this node's own
	for _, p := range answers {
		if p.uncertainty > maxUncertainty {
			continue
		}
		if p.hasEst {
			ests = append(ests, p.est)
		}
		walls = append(walls, p.wall-p.uncertainty)
	}
	if len(ests) > 0 {
		return slices.Min(ests), "the previous leader's clock, as the voters measured it", true
	}
	if 2*len(walls) <= voters {
		return 0, "", false
	}
	slices.Sort(walls)
	return walls[(len(walls)-1)/2], "the median of the voters' clocks", true
}
