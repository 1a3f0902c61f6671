package cluster

// Routing: where a request or an engine call for shard k goes (route,
// target), and the caches that keep that cheap.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/server"
)

// routeTTL is how long the shard a queue was found on routes the calls
// and requests for it without reading this node's copies again. Finding a
// queue reads the copy of each shard in turn (a pebble lookup through
// every level of each), which was a tenth of shard 0's leader's CPU with
// an AMQP client on a queue of another shard: every engine call looked it
// up again, as does every SQS request routed by a node.
//
// A queue does not move between shards within a TTL: one deleted on shard
// k is held on the shard its name hashes to for engine.NameReuseDelay (a
// minute), which sends its creates meanwhile to k, whose engine refuses
// them as deleted recently (engine.HoldDeletedName, ReserveName). So a
// route remembered for a second names the only shard the queue can be on;
// if it was deleted since, that shard's leader answers that there is no
// such queue, as it would have. Only queues found are remembered, never
// their absence: a queue created a moment ago is looked for as before.
// Nor queues of shard 0: an AMQP queue there is dropped by the AMQP
// server without that hold (engine.DropQueue; RabbitMQ lets a name be
// declared again at once), so its name could be made on another shard
// the next moment. Every other shard's queues are SQS queues, deleted
// with the hold whatever the front-end (remoteEngine.DropQueue deletes).
const routeTTL = time.Second

// maxRoutes bounds the cache; past it, it starts again empty.
const maxRoutes = 1 << 14

type routeCache struct {
	mu sync.Mutex
	m  map[string]foundRoute
}

type foundRoute struct {
	shard int
	at    time.Time
}

// cachedRoute returns the shard queue name was found on within routeTTL.
func (n *Node) cachedRoute(name string) (int, bool) {
	now := n.clk.Now()
	c := &n.found
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[name]
	if !ok || now.Before(r.at) || now.Sub(r.at) >= routeTTL {
		return 0, false
	}
	return r.shard, true
}

// noteRoute remembers that queue name was found on shard k, unless k is
// shard 0 (routeTTL says why).
func (n *Node) noteRoute(name string, k int) {
	if k == 0 {
		return
	}
	now := n.clk.Now()
	c := &n.found
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxRoutes {
		c.m = make(map[string]foundRoute)
	}
	c.m[name] = foundRoute{shard: k, at: now}
}

// decodedAd is an advertisement as a shard's Raft node holds it (shared,
// never changed: raftstore LeaderAdvertised), or a shard's leader record
// as this node's copy of shard 0 holds it, and the Advertisement in it.
type decodedAd struct {
	raw []byte
	ad  Advertisement
	ok  bool
}

// decodeAd decodes the Advertisement in b (a leader's advertisement, or
// a shardRecord, which embeds one), reusing the one slot last decoded
// while b is the same: target runs on every request forwarded and every
// engine call to another shard, and decoding the JSON each time was about
// 3 % of shard 0's leader's CPU under an AMQP load on another shard's
// queue (2026-12-06, docs/benchmarks.md). A leader stamps its advertisement again every
// beaconInterval, so it is decoded about once a second per shard; a
// record changes with its shard's leader or membership.
func decodeAd(slot *atomic.Pointer[decodedAd], b []byte) (Advertisement, bool) {
	if b == nil {
		return Advertisement{}, false
	}
	if c := slot.Load(); c != nil && bytes.Equal(c.raw, b) {
		return c.ad, c.ok
	}
	c := &decodedAd{raw: b}
	c.ok = json.Unmarshal(b, &c.ad) == nil
	slot.Store(c)
	return c.ad, c.ok
}

// route returns where to send a client of shard k now: the shard leader's
// advertised addresses (this node's own server when it leads), waiting up
// to the deadline of ctx while there is no leader or it has not
// advertised yet.
func (n *Node) route(ctx context.Context, k int) (Advertisement, uint64, error) {
	tick := time.NewTicker(20 * time.Millisecond) // advertisements apply without a notification
	defer tick.Stop()
	for {
		n.mu.Lock()
		changed := n.changed
		n.mu.Unlock()
		if ad, leader, ok := n.target(k); ok {
			return ad, leader, nil
		}
		select {
		case <-ctx.Done():
			return Advertisement{}, 0, errNoLeader
		case <-changed:
		case <-tick.C:
		}
	}
}

var errNoLeader = errors.New("cluster: no leader serving")

// localServerFor returns this node's own server for shard k when ad is
// its advertisement (this node leads and serves), else nil: the clients of
// this node's public listeners then call it directly (its HTTP handler,
// its AMQP server) rather than through the loopback.
func (n *Node) localServerFor(k int, ad Advertisement) *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.serving[k]; s != nil && s.ad == ad {
		return s.srv
	}
	return nil
}

// target is route without waiting.
func (n *Node) target(k int) (Advertisement, uint64, bool) {
	r := n.shards.Shard(k)
	if r == nil {
		return n.recordedTarget(k) // a shard this node holds no copy of (ADR 0016)
	}
	self, leader, term, b := r.LeaderAdvertised()
	if leader == 0 {
		return Advertisement{}, 0, false
	}
	if leader == self {
		n.mu.Lock()
		defer n.mu.Unlock()
		if s := n.serving[k]; s != nil && s.ad.Term == term {
			return s.ad, leader, true
		}
		return Advertisement{}, 0, false
	}
	ad, ok := decodeAd(&n.ads[k], b)
	if !ok || ad.Term != term {
		return Advertisement{}, 0, false
	}
	return ad, leader, true
}
