package cluster

import (
	"sync"
	"time"
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
