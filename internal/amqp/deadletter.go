package amqp

import (
	"slices"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

var _ engine.DeadLetterRouter = (*Topology)(nil)

// deathReason maps an engine dead-letter reason to RabbitMQ's x-death
// reason.
func deathReason(r string) string {
	switch r {
	case engine.ReasonTerminal:
		return "rejected"
	case engine.ReasonExpired:
		return "expired"
	case engine.ReasonQueueFull:
		return "maxlen"
	case engine.ReasonDeliveryLimit, engine.ReasonMaxReceives:
		return "delivery_limit"
	}
	return r
}

// RouteDeadLetter implements engine.DeadLetterRouter with RabbitMQ's
// dead-lettering (reference §8): the message goes through the source
// queue's x-dead-letter-exchange with x-dead-letter-routing-key, or with
// its original routing keys (CC included, BCC never kept); its x-death
// history gets one entry per (queue, reason), most recent first, with a
// count; x-first-death-* are set once and x-last-death-* every time; a
// per-message expiration is removed and kept as original-expiration.
//
// The cycle rule: unless the reason is rejected, a target queue already
// in the history is dropped when every event since its last appearance
// was automatic (no rejected among them); other targets still get the
// message.
//
// The engine calls it with the source queue's lock held. It blocks until
// New has loaded the topology, and otherwise takes only Topology.mu.
func (t *Topology) RouteDeadLetter(source string, dl *engine.DeadLetter) ([]string, []byte) {
	<-t.loaded
	t.mu.RLock()
	q := t.byEngine[source]
	if q == nil || !q.settings.hasDLX {
		t.mu.RUnlock()
		return nil, nil
	}
	v := t.vhosts[q.vhost]
	x := v.exchanges[q.settings.dlx]
	qname, vhostName, st := q.name, q.vhost, q.settings
	t.mu.RUnlock()
	if x == nil {
		return nil, nil // a missing DLX drops the message, as RabbitMQ
	}
	reason := deathReason(dl.Reason)
	env, err := decodeEnvelope(dl.Envelope)
	var props wire.Properties
	if err == nil {
		props, err = parseProps(env.props)
	}
	if err != nil {
		// Sent over SQS: give it AMQP properties first.
		d := engine.Delivery{MessageID: dl.MessageID, Attributes: dl.Attributes, SentAt: dl.SentAt}
		props = propsFromSQS(&d)
		env = envelope{exchange: "", keys: []string{qname}}
	}
	keys := env.keys
	if st.hasDLRK {
		keys = []string{st.dlrk}
	}
	headers := append(wire.Table(nil), props.Headers...)
	if env.flags&envBrokerDeaths == 0 {
		// A publisher's own history is not trusted (RabbitMQ 4.0+).
		headers = headers.Delete("x-death").Delete("x-first-death-queue").Delete("x-first-death-reason").
			Delete("x-first-death-exchange").Delete("x-last-death-queue").Delete("x-last-death-reason").Delete("x-last-death-exchange")
	}
	deaths := deathList(headers)
	now := wire.TimestampOf(dl.Time)
	found := -1
	for i, d := range deaths {
		if str(d, "queue") == qname && str(d, "reason") == reason {
			found = i
			break
		}
	}
	var entry wire.Table
	if found >= 0 {
		entry = deaths[found]
		n, _ := entry.Get("count")
		c, _ := asInt(n)
		entry = append(wire.Table(nil), entry...).Set("count", c+1)
		deaths = append(deaths[:found:found], deaths[found+1:]...)
	} else {
		rks := make([]any, len(env.keys))
		for i, k := range env.keys {
			rks[i] = k
		}
		entry = wire.Table{
			{Key: "count", Value: int64(1)},
			{Key: "reason", Value: reason},
			{Key: "queue", Value: qname},
			{Key: "time", Value: now},
			{Key: "exchange", Value: env.exchange},
			{Key: "routing-keys", Value: rks},
		}
		if props.Flags&wire.FlagExpiration != 0 || props.Expiration != "" {
			entry = append(entry, wire.Field{Key: "original-expiration", Value: props.Expiration})
		}
	}
	deaths = append([]wire.Table{entry}, deaths...)
	arr := make([]any, len(deaths))
	for i, d := range deaths {
		arr[i] = d
	}
	headers = headers.Set("x-death", arr)
	if _, ok := headers.Get("x-first-death-queue"); !ok {
		headers = headers.Set("x-first-death-queue", qname).Set("x-first-death-reason", reason).Set("x-first-death-exchange", env.exchange)
	}
	headers = headers.Set("x-last-death-queue", qname).Set("x-last-death-reason", reason).Set("x-last-death-exchange", env.exchange)
	if st.hasDLRK {
		headers = headers.Delete("CC")
	}
	props.Headers = headers
	removeExpiration(&props)
	raw, err := encodeProps(&props)
	if err != nil {
		t.log.Warn("amqp: cannot encode a dead letter's properties; dropped", "queue", qname, "err", err)
		return nil, nil
	}

	// Route through the DLX.
	t.mu.RLock()
	v = t.vhosts[vhostName]
	var targets []*queue
	if x = v.exchanges[st.dlx]; x != nil {
		targets = v.routeLocked(x, keys, headers)
	}
	t.mu.RUnlock()
	var names []string
	for _, tq := range targets {
		if reason != "rejected" && isCycle(tq.name, deaths) {
			t.mu.Lock()
			if !t.warned[tq.engine] {
				t.warned[tq.engine] = true
				t.log.Warn("amqp: dead-letter cycle detected; message dropped for this queue", "queue", tq.name, "vhost", vhostName, "source", qname, "reason", reason)
			}
			t.mu.Unlock()
			continue
		}
		names = append(names, tq.engine)
	}
	out := envelope{flags: env.flags | envBrokerDeaths, exchange: st.dlx, keys: keys, props: raw}
	return names, out.encode()
}

// isCycle applies RabbitMQ's cycle rule to target with the history
// (most recent first, the current event included).
func isCycle(target string, deaths []wire.Table) bool {
	for _, d := range deaths {
		if str(d, "reason") == "rejected" {
			return false
		}
		if str(d, "queue") == target {
			return true
		}
	}
	return false
}

// deathList reads the x-death header's entries.
func deathList(h wire.Table) []wire.Table {
	v, ok := h.Get("x-death")
	if !ok {
		return nil
	}
	arr, _ := v.([]any)
	out := make([]wire.Table, 0, len(arr))
	for _, e := range arr {
		if t, ok := e.(wire.Table); ok {
			out = append(out, t)
		}
	}
	return out
}

func str(t wire.Table, k string) string {
	v, _ := t.Get(k)
	s, _ := asString(v)
	return s
}

var (
	_ engine.DeadLetterTargeter    = (*Topology)(nil)
	_ engine.DeadLetterRouteLister = (*Topology)(nil)
)

// DeadLetterTargets implements engine.DeadLetterTargeter: the engine
// queues that source's dead letters can reach through its
// x-dead-letter-exchange. With x-dead-letter-routing-key the route is
// exact (that key through the exchange's bindings); without it the keys
// are the message's own, unknown here, so every queue bound to the
// exchange (following exchange-to-exchange bindings) counts. The default
// exchange ("") reaches the queue named by the routing key.
func (t *Topology) DeadLetterTargets(source string) []string {
	<-t.loaded
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.deadLetterTargetsLocked(t.byEngine[source])
}

// DeadLetterRoutes maps each engine queue that the dead letters of a queue
// this topology knows can reach (DeadLetterTargets) to those queues,
// sorted, a queue never its own: the queues declared here and those of
// other shards it adopted (a cluster's shard 0, AdoptSource). A cluster
// gives it to the shards of the targets, whose engines count them as
// dead-letter queues (engine.Options.SourcesElsewhere).
func (t *Topology) DeadLetterRoutes() map[string][]string {
	<-t.loaded
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := map[string][]string{}
	for name, q := range t.byEngine {
		for _, dlq := range t.deadLetterTargetsLocked(q) {
			if dlq != name {
				out[dlq] = append(out[dlq], name)
			}
		}
	}
	for _, srcs := range out {
		slices.Sort(srcs)
	}
	return out
}

// deadLetterTargetsLocked is DeadLetterTargets of q (nil: none).
func (t *Topology) deadLetterTargetsLocked(q *queue) []string {
	if q == nil || !q.settings.hasDLX {
		return nil
	}
	v := t.vhosts[q.vhost]
	x := v.exchanges[q.settings.dlx]
	if x == nil {
		return nil
	}
	var reached []*queue
	switch {
	case q.settings.hasDLRK:
		reached = v.routeLocked(x, []string{q.settings.dlrk}, nil)
	case x.name == "":
		reached = v.routeLocked(x, []string{q.name}, nil) // RabbitMQ: back to the queue itself
	default:
		reached = v.boundQueuesLocked(x)
	}
	out := make([]string, 0, len(reached))
	for _, r := range reached {
		out = append(out, r.engine)
	}
	return out
}

// boundQueuesLocked returns every queue bound to x, directly or through
// exchange-to-exchange bindings and alternate exchanges, whatever the
// routing keys.
func (v *vhost) boundQueuesLocked(x *exchange) []*queue {
	var out []*queue
	seenQ := make(map[*queue]bool)
	seenX := make(map[string]bool)
	var walk func(x *exchange)
	walk = func(x *exchange) {
		if x == nil || seenX[x.name] {
			return
		}
		seenX[x.name] = true
		for _, b := range x.bindings {
			if !b.toQueue {
				walk(v.exchanges[b.dest])
				continue
			}
			if q := v.queues[b.dest]; q != nil && !seenQ[q] {
				seenQ[q] = true
				out = append(out, q)
			}
		}
		if ae, ok := x.alternate(); ok {
			walk(v.exchanges[ae])
		}
	}
	walk(x)
	return out
}

var _ engine.DeadLetterSourcer = (*Topology)(nil)

// DeadLetterSource implements engine.DeadLetterSourcer: the queue named by
// the most recent entry of the message's x-death header, in the DLQ's
// vhost, when that queue exists. Only messages the engine has no
// dead-letter record for get here (the broker's own dead letters carry
// their source), e.g. dead letters moved over from RabbitMQ with their
// history.
func (t *Topology) DeadLetterSource(dlq string, env []byte) string {
	<-t.loaded
	e, err := decodeEnvelope(env)
	if err != nil {
		return ""
	}
	props, err := parseProps(e.props)
	if err != nil {
		return ""
	}
	deaths := deathList(props.Headers)
	if len(deaths) == 0 {
		return ""
	}
	name := str(deaths[0], "queue")
	t.mu.RLock()
	defer t.mu.RUnlock()
	vh := "/"
	if q := t.byEngine[dlq]; q != nil {
		vh = q.vhost
	}
	if v := t.vhosts[vh]; v != nil {
		if q := v.queues[name]; q != nil {
			return q.engine
		}
	}
	return ""
}
