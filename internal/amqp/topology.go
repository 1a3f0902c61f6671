package amqp

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/flowrule"
)

// Topology is the AMQP model over the engine's queues: vhosts, exchanges,
// bindings and the AMQP side of each queue (arguments, owner, consumers).
// It is created before the engine (NewTopology), handed to engine.Open as
// its DeadLetterRouter, and filled from the engine's metadata by New.
//
// Locking: mu guards every field of the topology and of the vhosts,
// exchanges, bindings and queues in it. It is a leaf lock: code holding it
// never calls the engine (which may call RouteDeadLetter, which takes it)
// nor writes to a socket.
type Topology struct {
	loaded     chan struct{} // closed once New has loaded the topology (or failed)
	loadedOnce sync.Once

	mu       sync.RWMutex
	log      *slog.Logger
	vhosts   map[string]*vhost
	byEngine map[string]*queue // engine queue name → queue
	warned   map[string]bool   // dead-letter cycles already logged, by queue

	// Queue deletes in progress, for adopt: dropping counts, by engine
	// queue, the deletes that have taken a queue out of the maps but not
	// yet dropped its engine queue; dropGen counts the deletes started.
	dropping map[string]int
	dropGen  uint64

	// unrestored counts the stored bindings to queues AMQP did not
	// declare that the server's restoreBindings has not restored yet
	// (AdoptSource, RouteReady).
	unrestored atomic.Int64
}

var _ engine.RouteWaiter = (*Topology)(nil)

// knows reports whether engine queue name is in the topology.
func (t *Topology) knows(name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byEngine[name] != nil
}

// RouteReady implements engine.RouteWaiter: the topology is loaded and
// every stored binding is in it. Until then (in a cluster with shards,
// while shard 0's AMQP server looks up the queues of other shards its
// bindings lead to) a dead letter routed through it could go nowhere, or
// to some of its targets only, and an engine with Options.RouteLater keeps
// it as a route transfer until it is ready.
func (t *Topology) RouteReady() bool {
	select {
	case <-t.loaded:
		return t.unrestored.Load() == 0
	default:
		return false
	}
}

// NewTopology returns an empty topology. Pass it to engine.Open as
// Options.DeadLetterRouter and then to New.
func NewTopology() *Topology {
	return &Topology{
		loaded:   make(chan struct{}),
		log:      slog.New(slog.DiscardHandler),
		vhosts:   make(map[string]*vhost),
		byEngine: make(map[string]*queue),
		warned:   make(map[string]bool),
		dropping: make(map[string]int),
	}
}

// release lets RouteDeadLetter proceed.
func (t *Topology) release() { t.loadedOnce.Do(func() { close(t.loaded) }) }

type vhost struct {
	name      string
	exchanges map[string]*exchange
	queues    map[string]*queue
}

// queue is the AMQP side of an engine queue. Guarded by Topology.mu.
type queue struct {
	vhost, name, engine            string
	durable, exclusive, autoDelete bool
	owner                          *conn // exclusive owner; nil when not exclusive
	args                           wire.Table
	settings                       queueSettings

	consumers   map[*consumer]struct{}
	exclusiveBy *consumer // the exclusive consumer, if any
	// sac is the single-active-consumer line, sacWake closed when its
	// head leaves (sac.go).
	sac     []*consumer
	sacWake chan struct{}
	// prio is the consumer-priority state (priority.go).
	prio        prioLine
	hadConsumer bool      // for auto-delete: deleted when the last consumer goes
	lastUsed    time.Time // for x-expires
	deleted     bool
	// adopted marks an SQS queue AMQP uses without a declaration of
	// its own (adopt): kept in memory only, exported as an SQS queue.
	// sqsQueue marks a recorded AMQP side of an engine queue that SQS
	// created (a declare of an SQS queue): exported as an SQS queue,
	// and among the AMQP queues too when the declare gave it arguments.
	adopted, sqsQueue bool
	// placed marks an adopted queue that was declared over AMQP and
	// created on another shard of a cluster (Placer): its arguments
	// are the declare's, kept with its engine queue (placedSettings).
	placed bool

	// undelivered counts messages its consumers took from the engine and
	// have not yet queued for writing (nor returned). They count as ready
	// in queue.declare-ok: a client that cancels once a passive declare
	// reports 0 must already have every no-ack delivery ahead of the
	// declare-ok (pika's TestBasicCancelWithNonAckableConsumer). Not
	// guarded by Topology.mu.
	undelivered atomic.Int64
	// flow is the publisher throttle and trend its backlog's floor
	// (flow.go).
	flow  flowGate
	trend flowrule.Trend
}

// builtinExchanges exist in every vhost and are durable.
var builtinExchanges = [...]struct{ name, kind string }{
	{"amq.direct", kindDirect}, {"amq.fanout", kindFanout}, {"amq.topic", kindTopic},
	{"amq.headers", kindHeaders}, {"amq.match", kindHeaders},
}

// vhostLocked returns the vhost, creating it (with the built-in exchanges)
// on first use.
func (t *Topology) vhostLocked(name string) *vhost {
	v := t.vhosts[name]
	if v == nil {
		v = &vhost{name: name, exchanges: make(map[string]*exchange), queues: make(map[string]*queue)}
		v.exchanges[""] = &exchange{name: "", kind: kindDirect, durable: true}
		for _, b := range builtinExchanges {
			v.exchanges[b.name] = &exchange{name: b.name, kind: b.kind, durable: true}
		}
		t.vhosts[name] = v
	}
	return v
}

// engineName maps an AMQP queue to its engine queue. Queues of "/" use
// their own name, so SQS and AMQP share them. Other vhosts' queues live
// under "amq.vhost/<vhost, path-escaped>/<name>": SQS names cannot contain
// "." or "/", and AMQP clients cannot declare names starting with "amq.",
// so neither side can collide with them. Names that would pass the
// engine's 255-byte limit end in "#" and a SHA-256 of the queue name.
func engineName(vhost, name string) string {
	if vhost == "/" {
		return name
	}
	n := "amq.vhost/" + url.PathEscape(vhost) + "/" + name
	if len(n) <= 255 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	p := "amq.vhost/" + url.PathEscape(vhost)
	if len(p) > 180 {
		vs := sha256.Sum256([]byte(vhost))
		p = "amq.vhost/#" + hex.EncodeToString(vs[:16])
	}
	return p + "/#" + hex.EncodeToString(sum[:])
}

// routeLocked returns the queues a message published to exchange x with
// routing keys (the routing key, then CC keys) and headers reaches, each
// once. It follows exchange-to-exchange bindings and alternate exchanges;
// an exchange is visited once, so binding cycles end.
func (v *vhost) routeLocked(x *exchange, keys []string, headers wire.Table) []*queue {
	var out []*queue
	seen := make(map[*queue]bool)
	add := func(q *queue) {
		if q != nil && !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	visited := make(map[string]bool)
	var walk func(x *exchange)
	walk = func(x *exchange) {
		if x == nil || visited[x.name] {
			return
		}
		visited[x.name] = true
		if x.name == "" {
			for _, k := range keys {
				add(v.queues[k])
			}
			return
		}
		n := 0
		for _, b := range x.bindings {
			if !b.matches(x.kind, keys, headers) {
				continue
			}
			n++
			if b.toQueue {
				add(v.queues[b.dest])
			} else {
				walk(v.exchanges[b.dest])
			}
		}
		if n == 0 {
			if ae, ok := x.alternate(); ok {
				walk(v.exchanges[ae])
			}
		}
	}
	walk(x)
	return out
}

// bindingsToLocked returns the bindings whose destination is dest.
func (v *vhost) bindingsToLocked(dest string, toQueue bool) []*binding {
	var out []*binding
	for _, x := range v.exchanges {
		for _, b := range x.bindings {
			if b.dest == dest && b.toQueue == toQueue {
				out = append(out, b)
			}
		}
	}
	return out
}

// removeBindingLocked removes b from its source exchange.
func (v *vhost) removeBindingLocked(b *binding) {
	x := v.exchanges[b.source]
	if x == nil {
		return
	}
	for i, o := range x.bindings {
		if o.same(b) {
			x.bindings = append(x.bindings[:i:i], x.bindings[i+1:]...)
			return
		}
	}
}

// Durable records, in the engine's metadata. Each value is an AMQP field
// table (wire encoding with its length prefix), so arguments keep their
// tags. Keys only identify records; the values carry every field.
const (
	metaExchanges = "amqp.exchange" // vhost NUL name → vhost, name, type, durable, auto-delete, internal, arguments
	metaQueues    = "amqp.queue"    // vhost NUL name → vhost, name, engine, durable, exclusive, auto-delete, arguments, retired (records of older builds)
	metaBindings  = "amqp.binding"  // sha256 of the fields → vhost, source, destination, to-queue, routing-key, arguments
)

func metaKey(parts ...string) string { return strings.Join(parts, "\x00") }

func exchangeRecord(vhost string, x *exchange) []byte {
	b, _ := wire.AppendTable(nil, wire.Table{
		{Key: "vhost", Value: vhost}, {Key: "name", Value: x.name},
		{Key: "type", Value: x.kind}, {Key: "durable", Value: x.durable},
		{Key: "auto-delete", Value: x.autoDelete}, {Key: "internal", Value: x.internal},
		{Key: "arguments", Value: nonNil(x.args)},
	})
	return b
}

func queueRecord(q *queue, retired bool) []byte {
	b, _ := wire.AppendTable(nil, wire.Table{
		{Key: "vhost", Value: q.vhost}, {Key: "name", Value: q.name},
		{Key: "engine", Value: q.engine}, {Key: "durable", Value: q.durable},
		{Key: "exclusive", Value: q.exclusive}, {Key: "auto-delete", Value: q.autoDelete},
		{Key: "arguments", Value: nonNil(q.args)}, {Key: "retired", Value: retired},
		{Key: "sqs-queue", Value: q.sqsQueue},
	})
	return b
}

// bindingKey identifies a binding among the records; the record itself
// carries the fields (names may contain NUL).
func bindingKey(vhost string, b *binding) string {
	kind := "e"
	if b.toQueue {
		kind = "q"
	}
	sum := sha256.Sum256([]byte(metaKey(vhost, b.source, kind, b.dest, b.key, b.argsID)))
	return hex.EncodeToString(sum[:])
}

func bindingRecord(vhost string, b *binding) []byte {
	r, _ := wire.AppendTable(nil, wire.Table{
		{Key: "vhost", Value: vhost}, {Key: "source", Value: b.source}, {Key: "destination", Value: b.dest},
		{Key: "to-queue", Value: b.toQueue}, {Key: "routing-key", Value: b.key},
		{Key: "arguments", Value: nonNil(b.args)},
	})
	return r
}

func nonNil(t wire.Table) wire.Table {
	if t == nil {
		return wire.Table{}
	}
	return t
}

// record reads a metadata record's fields.
type record struct{ t wire.Table }

func parseRecord(b []byte) (record, error) {
	t, err := wire.ParseTable(b)
	return record{t}, err
}

func (r record) str(k string) string {
	v, _ := r.t.Get(k)
	s, _ := v.(string)
	return s
}

func (r record) flag(k string) bool {
	v, _ := r.t.Get(k)
	b, _ := v.(bool)
	return b
}

func (r record) table(k string) wire.Table {
	v, _ := r.t.Get(k)
	t, _ := v.(wire.Table)
	if len(t) == 0 {
		return nil
	}
	return t
}
