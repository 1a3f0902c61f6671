package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// Clock beacons: the predecessor's own clock bounds where a leadership
// starts.
//
// leadershipClock starts a leadership on this node's measurement of the
// previous leader's clock (erring late: never early against it), else on
// the voters' answers to a probe, else on this node's own clock. The last
// two have no bound against the predecessor: a predecessor whose clock
// was behind the voters' wall clocks (it had itself started late, as
// every start errs, or on a clock of its own, and was still slewing
// toward their median at 1 %) left leases stamped on that clock, and a
// successor started on the voters' median ended them up to that far
// early. A shard above 0 started on shard 0's timeline, when that had
// just been started from a probe, met the same.
//
// So every leader stamps its advertisement (the entry that tells the
// other nodes where it serves, replicated in its shard's Raft log) with
// its engine clock and how far that clock is behind the one it slews
// toward: once before its server serves — so that no write of its
// leadership can commit without a stamp of it before them — and again
// every beaconInterval. A node that starts leading a shard has applied
// every entry committed before its term, its predecessor's last stamp
// among them, and knows when it applied it (raftstore AdvertisedSince):
// the stamp was encoded before, and the predecessor's clock runs at no
// less than 1 − slewRate of real time, so by now that clock reads at least
// Clock + (now − applied) × (1 − slewRate) (beaconBound). That bound is
// certain but can be loose: a stamp applied by a node that restarted or
// caught up after the shard had no leader for a while was written that
// long before. So the stamped lag bounds how far it may hold a
// leadership back (boundByBeacon): a predecessor that was on its target
// clock holds its successor back by at most beaconMargin.
//
// A node that restarted since its predecessor's last stamp loaded that
// stamp from its state store and does not know when it was written (it
// may be long ago: a whole cluster down for an hour), so it asks the
// other voters for their certain bound on the same leadership's clock (a
// probe, as clockprobe.go's, on that shard's connections; at most
// probeWait). When none has one (they restarted too), the stamped lag
// alone bounds it.

// beaconInterval is how often a leader stamps its advertisement again:
// the bound's slack, besides the apply delay, is 1 % of the time since
// the last stamp.
const beaconInterval = time.Second

// advertisement is an Advertisement as a leader writes it: with its
// engine clock when it encoded it (Unix ns; absent from older releases,
// whose advertisements bound nothing).
type advertisement struct {
	Advertisement
	Clock int64 `json:"clock,omitempty"`
	// Behind is how far (ns) the stamped clock was behind the clock it
	// slews toward (the voters' median for shard 0, the cluster's clock
	// for the others): 0 when on it or ahead.
	Behind int64 `json:"behind,omitempty"`
}

// beaconMargin is how much further than its stamped lag a leadership may
// start behind its candidate clock when the stamp's age is not known
// closely (boundByBeacon): for the lag's change since the stamp.
const beaconMargin = 50 * time.Millisecond

// stampAdvertisement replicates ad, stamped with tl's reading now, on
// shard k, and waits until it is applied here (raftstore Advertise).
func (n *Node) stampAdvertisement(k int, ad Advertisement, tl *timeline) error {
	b, _ := json.Marshal(advertisement{Advertisement: ad, Clock: tl.Now().UnixNano(), Behind: int64(tl.Behind())}) // strings and numbers always encode
	return n.shards.Shard(k).Advertise(b)
}

// stampFirst stamps ad until it is applied here, retrying every second;
// false when ctx ended first.
func (n *Node) stampFirst(ctx context.Context, k int, ad Advertisement, tl *timeline, log *slog.Logger) bool {
	for {
		err := n.stampAdvertisement(k, ad, tl)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("cannot advertise the leader's addresses yet; retrying", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// stampEvery stamps ad every beaconInterval until ctx ends, at the
// whole multiples of beaconInterval of the wall clock: every shard's
// leader stamps at the same moments, so that with several shards the
// Raft log appends of an idle cluster coincide on each node and share its
// log store's fsync (raftstore sharedlog.go) rather than each taking one.
func (n *Node) stampEvery(ctx context.Context, k int, ad Advertisement, tl *timeline, log *slog.Logger) {
	t := time.NewTimer(untilNextBeat(time.Now()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(untilNextBeat(time.Now()))
		}
		// A stamp that fails (leadership ending, no quorum for now) is
		// replaced by the next one.
		if err := n.stampAdvertisement(k, ad, tl); err != nil && ctx.Err() == nil {
			log.Debug("cannot stamp the leader's advertisement", "err", err)
		}
	}
}

// untilNextBeat is the time from now to the next whole multiple of
// beaconInterval (a full interval when now is on one).
func untilNextBeat(now time.Time) time.Duration {
	return now.Truncate(beaconInterval).Add(beaconInterval).Sub(now)
}

// latestStamp returns the advertisement of the latest leadership in ads
// (the highest term) and when this process applied it (zero: loaded at
// start); found is false when ads holds none.
func latestStamp(ads map[uint64]raftstore.Advertised) (last advertisement, at time.Time, found bool) {
	for _, a := range ads {
		var ad advertisement
		if json.Unmarshal(a.Info, &ad) != nil || ad.Term < last.Term || (ad.Term == last.Term && found) {
			continue
		}
		last, at, found = ad, a.AppliedAt, true
	}
	return last, at, found
}

// beaconBound returns the earliest reading the clock of the latest
// leadership that advertised in ads (the highest term) is certain to have
// reached at now (on the clock raftstore's AdvertisedSince used), and
// that leadership's term. ok is false when that advertisement bounds
// nothing: it has no stamp (an older release), or this process did not
// apply it (loaded at start). An older leadership's stamp is no bound on
// a later one, which may have started behind it, so it is never used
// instead.
func beaconBound(ads map[uint64]raftstore.Advertised, now time.Time) (bound time.Time, term uint64, ok bool) {
	last, at, found := latestStamp(ads)
	if !found || last.Clock == 0 || at.IsZero() {
		return time.Time{}, last.Term, false
	}
	return advanced(time.Unix(0, last.Clock), now.Sub(at)), last.Term, true
}

// advanced is a clock reading c advanced by elapsed of real time at the
// slowest rate a timeline runs at (1 − slewRate); a negative elapsed (a
// step back of the measuring clock) advances nothing.
func advanced(c time.Time, elapsed time.Duration) time.Time {
	return c.Add(time.Duration(float64(max(elapsed, 0)) * (1 - slewRate)))
}

// boundByBeacon returns adj, the adjustment a leadership of shard k is to
// start with, or less. Two bounds on its predecessor's clock come from
// the predecessor's last stamp:
//
//   - a certain one: the stamp advanced by the time since this node
//     applied it, or, when this node only loaded it at start (it
//     restarted since), the latest such bound the shard's other voters
//     have: from asked, their answers to a probe this node just made,
//     when not nil, else from a probe of its own (probeBeacon). It is
//     never ahead of the predecessor's clock,
//     but it is far behind when the stamp was applied long after it was
//     written: by a node that restarted or caught up, the whole time the
//     shard had no leader;
//   - an estimate: adj less the lag behind its target the predecessor
//     stamped and beaconMargin (the predecessor was that far behind the
//     clock adj is taken from).
//
// The leadership starts no later than the greater of the two: on the
// certain bound where that is the closer, and never more than the
// stamped lag (plus the margin) behind adj for a certain bound that is
// only loose. Without a stamp (none, or an older release's), adj.
func (n *Node) boundByBeacon(ctx context.Context, k int, adj time.Duration, asked *[]voterAnswer) time.Duration {
	if n.shards == nil {
		return adj
	}
	ads := n.shards.Shard(k).AdvertisedSince()
	last, at, found := latestStamp(ads)
	if !found || last.Clock == 0 {
		return adj // no leadership stamped before: nothing to bound by
	}
	var certain time.Time
	ok := true
	if !at.IsZero() {
		certain = advanced(time.Unix(0, last.Clock), n.clk.Now().Sub(at))
	} else if asked != nil {
		certain, ok = beaconFromAnswers(*asked, n.clk.Now(), last.Term, time.Unix(0, last.Clock))
	} else {
		certain, ok = n.probeBeacon(ctx, k, last.Term, time.Unix(0, last.Clock))
	}
	limit, from := startLimit(adj, time.Duration(last.Behind), certain, ok, n.clk.Now())
	if adj <= limit {
		return adj
	}
	lvl := slog.LevelInfo
	if adj-limit < quietAdjustment {
		lvl = slog.LevelDebug
	}
	n.shardLog(k).Log(ctx, lvl, "starting behind the clock chosen: the previous leader's clock was behind it",
		"previous_term", last.Term, "bound", from, "behind_by", (adj - limit).Round(time.Millisecond))
	return limit
}

// startLimit is boundByBeacon's verdict: the latest adjustment a
// leadership may start with at now, given its candidate adj, the lag its
// predecessor stamped (behind) and, when ok, the certain bound on the
// predecessor's clock; from says which of the two it is.
func startLimit(adj, behind time.Duration, certain time.Time, ok bool, now time.Time) (limit time.Duration, from string) {
	limit, from = adj-behind-beaconMargin, "its stamped lag"
	if ok {
		if c := certain.Sub(now); c > limit {
			limit, from = c, "its last stamp"
		}
	}
	return limit, from
}

// probeBeacon asks the other voters of shard k for their bound on the
// clock of its leadership of term (clockAnswer) and returns the latest
// of those bounds and floor, the stamp this node loaded, as of now; ok is
// false when no voter answered with a bound for that term within
// probeWait. Each voter's bound held when it answered, so before this
// node read the answer, and is advanced from there.
func (n *Node) probeBeacon(ctx context.Context, k int, term uint64, floor time.Time) (time.Time, bool) {
	_, answers := n.probeVoters(ctx, k)
	return beaconFromAnswers(answers, n.clk.Now(), term, floor)
}

// beaconFromAnswers is probeBeacon's verdict on answers, the voters'
// answers to a probe on one shard's connections, as of now.
func beaconFromAnswers(answers []voterAnswer, now time.Time, term uint64, floor time.Time) (time.Time, bool) {
	best, ok := floor, false
	for _, v := range answers {
		a := v.answer
		if len(a) < clockAnswerSize+beaconAnswerSize {
			continue // an older release's answer: no bound
		}
		t := binary.BigEndian.Uint64(a[clockAnswerSize:])
		b := int64(binary.BigEndian.Uint64(a[clockAnswerSize+8:]))
		if t != term || b == 0 {
			continue
		}
		ok = true
		if c := advanced(time.Unix(0, b), now.Sub(v.got)); c.After(best) {
			best = c
		}
	}
	return best, ok
}
