package cluster

import (
	"context"
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
// its engine clock: once before its server serves — so that no write of
// its leadership can commit without a stamp of it before them — and
// again every beaconInterval. A node that starts leading a shard has
// applied every entry committed before its term, its predecessor's last
// stamp among them, and knows when it applied it (raftstore
// AdvertisedSince): the stamp was encoded before, and the predecessor's
// clock runs at no less than 1 − slewRate of real time, so by now that
// clock reads at least Clock + (now − applied) × (1 − slewRate)
// (beaconBound). The leadership starts no later than that, whichever way
// it chose its clock.
//
// What it does not cover: a node that restarted since its predecessor's
// last stamp loaded that stamp from its state store and does not know
// when it was written (it may be long ago: a whole cluster down for an
// hour); it starts as before, unbounded.

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
}

// stampAdvertisement replicates ad, stamped with tl's reading now, on
// shard k, and waits until it is applied here (raftstore Advertise).
func (n *Node) stampAdvertisement(k int, ad Advertisement, tl *timeline) error {
	b, _ := json.Marshal(advertisement{Advertisement: ad, Clock: tl.Now().UnixNano()}) // strings and numbers always encode
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

// stampEvery stamps ad every beaconInterval until ctx ends.
func (n *Node) stampEvery(ctx context.Context, k int, ad Advertisement, tl *timeline, log *slog.Logger) {
	t := time.NewTicker(beaconInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A stamp that fails (leadership ending, no quorum for now) is
		// replaced by the next one.
		if err := n.stampAdvertisement(k, ad, tl); err != nil && ctx.Err() == nil {
			log.Debug("cannot stamp the leader's advertisement", "err", err)
		}
	}
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
	var last advertisement
	var at time.Time
	for _, a := range ads {
		var ad advertisement
		if json.Unmarshal(a.Info, &ad) != nil || ad.Term < last.Term || (ad.Term == last.Term && last.Term != 0) {
			continue
		}
		last, at = ad, a.AppliedAt
	}
	if last.Term == 0 || last.Clock == 0 || at.IsZero() {
		return time.Time{}, last.Term, false
	}
	elapsed := max(now.Sub(at), 0)
	return time.Unix(0, last.Clock).Add(time.Duration(float64(elapsed) * (1 - slewRate))), last.Term, true
}

// boundByBeacon returns adj, the adjustment a leadership of shard k is to
// start with, or less: no more than puts the engine clock at shard k's
// beaconBound now.
func (n *Node) boundByBeacon(k int, adj time.Duration) time.Duration {
	if n.shards == nil {
		return adj
	}
	now := n.clk.Now()
	bound, term, ok := beaconBound(n.shards.Shard(k).AdvertisedSince(), now)
	if !ok {
		return adj
	}
	limit := bound.Sub(now)
	if adj <= limit {
		return adj
	}
	lvl := slog.LevelInfo
	if adj-limit < quietAdjustment {
		lvl = slog.LevelDebug
	}
	n.shardLog(k).Log(context.Background(), lvl, "starting behind the clock chosen: the previous leader's last stamped clock was behind it",
		"previous_term", term, "behind_by", (adj - limit).Round(time.Millisecond))
	return limit
}
