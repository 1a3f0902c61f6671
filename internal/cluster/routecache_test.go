package cluster

import (
	"bytes"
	"strconv"
	"sync/atomic"
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

// TestDecodeAd: an advertisement is decoded once while its bytes stay the
// same, and again when they change (a new leader, a new stamp); bytes
// that do not decode answer false, and so does none; a leader record,
// which embeds an advertisement beside its membership, decodes too.
func TestDecodeAd(t *testing.T) {
	var slot atomic.Pointer[decodedAd]
	if _, ok := decodeAd(&slot, nil); ok {
		t.Fatal("no advertisement decoded as one")
	}
	a := []byte(`{"term":3,"sqs":"127.0.0.1:1","engine_wire":true}`)
	ad, ok := decodeAd(&slot, a)
	if !ok || ad.Term != 3 || ad.SQS != "127.0.0.1:1" || !ad.EngineWire {
		t.Fatalf("first decode: %+v, %v", ad, ok)
	}
	first := slot.Load()
	if ad, ok = decodeAd(&slot, bytes.Clone(a)); !ok || ad.Term != 3 || slot.Load() != first {
		t.Fatalf("the same bytes again: %+v, %v; decoded again: %v", ad, ok, slot.Load() != first)
	}
	rec := []byte(`{"term":4,"sqs":"127.0.0.1:2","voters":[1,2],"applied":9}`)
	if ad, ok = decodeAd(&slot, rec); !ok || ad.Term != 4 || ad.SQS != "127.0.0.1:2" {
		t.Fatalf("a new leader's record: %+v, %v", ad, ok)
	}
	if _, ok = decodeAd(&slot, []byte(`{"term":`)); ok {
		t.Fatal("bytes that do not decode answered ok")
	}
	if ad, ok = decodeAd(&slot, a); !ok || ad.Term != 3 {
		t.Fatalf("back to the first bytes: %+v, %v", ad, ok)
	}
}
