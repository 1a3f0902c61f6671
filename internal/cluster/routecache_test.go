package cluster

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// TestRouteCache: a queue's shard, once found, routes for routeTTL by
// this node's clock and no longer (nor after the clock stepped back);
// only what was noted is remembered, never a queue of shard 0; the cache
// stays within maxRoutes.
func TestRouteCache(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	n := &Node{clk: clk}
	if _, ok := n.cachedRoute("orders"); ok {
		t.Fatal("a queue never found is routed from the cache")
	}
	n.noteRoute("orders", 2)
	clk.Advance(routeTTL - time.Millisecond)
	if k, ok := n.cachedRoute("orders"); !ok || k != 2 {
		t.Fatalf("within the TTL: %d, %v", k, ok)
	}
	if _, ok := n.cachedRoute("billing"); ok {
		t.Fatal("another queue is routed from the cache")
	}
	clk.Advance(time.Millisecond)
	if _, ok := n.cachedRoute("orders"); ok {
		t.Fatal("routed from the cache after the TTL")
	}
	n.noteRoute("orders", 1)
	clk.Advance(-time.Second)
	if _, ok := n.cachedRoute("orders"); ok {
		t.Fatal("routed from the cache after the clock stepped back")
	}
	n.noteRoute("amqp-queue", 0)
	if _, ok := n.cachedRoute("amqp-queue"); ok {
		t.Fatal("a queue of shard 0, which AMQP may drop and declare elsewhere at once, is routed from the cache")
	}
	for i := range maxRoutes + 1 {
		n.noteRoute("q"+strconv.Itoa(i), 1)
	}
	if len(n.found.m) > maxRoutes {
		t.Fatalf("%d routes kept", len(n.found.m))
	}
}
