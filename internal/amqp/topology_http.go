package amqp

import (
	"encoding/json"
	"math"
	"net/http"
	"sort"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// The topology document served by TopologyHandler (the dashboard's AMQP
// view). Unset numbers are null; binding arguments are plain JSON values.
type topologyDoc struct {
	Vhosts []topoVhost `json:"vhosts"`
}

type topoVhost struct {
	Name      string         `json:"name"`
	Exchanges []topoExchange `json:"exchanges"`
	Queues    []topoQueue    `json:"queues"`
	Bindings  []topoBinding  `json:"bindings"`
}

type topoExchange struct {
	Name              string `json:"name"`
	Type              string `json:"type"`
	Durable           bool   `json:"durable"`
	AutoDelete        bool   `json:"autoDelete"`
	Internal          bool   `json:"internal"`
	AlternateExchange string `json:"alternateExchange"`
}

type topoQueue struct {
	Name                 string `json:"name"`
	EngineQueue          string `json:"engineQueue"`
	Durable              bool   `json:"durable"`
	Exclusive            bool   `json:"exclusive"`
	AutoDelete           bool   `json:"autoDelete"`
	DeadLetterExchange   string `json:"deadLetterExchange"`
	DeadLetterRoutingKey string `json:"deadLetterRoutingKey"`
	MessageTTLMs         *int64 `json:"messageTTLMs"`
	MaxLength            *int64 `json:"maxLength"`
	Overflow             string `json:"overflow"`
	DeliveryLimit        *int64 `json:"deliveryLimit"`
	Consumers            int    `json:"consumers"`
	Ready                int    `json:"ready"`
	Unacked              int    `json:"unacked"`
}

type topoBinding struct {
	Source          string         `json:"source"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destinationType"`
	RoutingKey      string         `json:"routingKey"`
	Arguments       map[string]any `json:"arguments"`
}

// TopologyHandler serves the AMQP topology as JSON for the dashboard:
// GET answers {"vhosts": [{"name", "exchanges", "queues", "bindings"}]},
// vhosts, exchanges and queues sorted by name, bindings by source,
// destination and routing key. The default exchange's implicit bindings
// (every queue under its own name) are not listed. Queue counts come from
// the engine: ready (visible and delayed), unacked (in flight) and the
// AMQP consumers. It holds no lock while it asks the engine; a queue
// deleted meanwhile shows zero counts. Mount it behind operator
// authentication: it names every queue and exchange.
func (s *Server) TopologyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		doc := s.topologySnapshot()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		_ = json.NewEncoder(w).Encode(doc) // the client went away mid-response: nothing to tell it
	})
}

// topologySnapshot copies the topology under Topology.mu, then fills in
// the engine's counts without it.
func (s *Server) topologySnapshot() topologyDoc {
	t := s.topo
	doc := topologyDoc{Vhosts: []topoVhost{}}
	var engines []string
	var queues []*topoQueue
	t.mu.RLock()
	for _, v := range t.vhosts {
		tv := topoVhost{Name: v.name, Exchanges: []topoExchange{}, Queues: []topoQueue{}, Bindings: []topoBinding{}}
		for _, x := range v.exchanges {
			ae, _ := x.alternate()
			tv.Exchanges = append(tv.Exchanges, topoExchange{Name: x.name, Type: x.kind, Durable: x.durable,
				AutoDelete: x.autoDelete, Internal: x.internal, AlternateExchange: ae})
			for _, b := range x.bindings {
				kind := "exchange"
				if b.toQueue {
					kind = "queue"
				}
				tv.Bindings = append(tv.Bindings, topoBinding{Source: b.source, Destination: b.dest,
					DestinationType: kind, RoutingKey: b.key, Arguments: jsonTable(b.args)})
			}
		}
		for _, q := range v.queues {
			st := q.settings
			tq := topoQueue{Name: q.name, EngineQueue: q.engine, Durable: q.durable, Exclusive: q.exclusive,
				AutoDelete: q.autoDelete, Overflow: st.overflow, Consumers: len(q.consumers)}
			if st.hasDLX {
				tq.DeadLetterExchange = st.dlx
			}
			if st.hasDLRK {
				tq.DeadLetterRoutingKey = st.dlrk
			}
			if st.hasTTL {
				tq.MessageTTLMs = ptr(st.ttl.Milliseconds())
			}
			if _, ok := q.args.Get("x-max-length"); ok {
				tq.MaxLength = ptr(int64(st.maxLen))
			}
			if st.deliveryLimit >= 0 {
				tq.DeliveryLimit = ptr(int64(st.deliveryLimit))
			}
			tv.Queues = append(tv.Queues, tq)
		}
		doc.Vhosts = append(doc.Vhosts, tv)
	}
	t.mu.RUnlock()
	sort.Slice(doc.Vhosts, func(i, j int) bool { return doc.Vhosts[i].Name < doc.Vhosts[j].Name })
	for i := range doc.Vhosts {
		v := &doc.Vhosts[i]
		sort.Slice(v.Exchanges, func(i, j int) bool { return v.Exchanges[i].Name < v.Exchanges[j].Name })
		sort.Slice(v.Queues, func(i, j int) bool { return v.Queues[i].Name < v.Queues[j].Name })
		sort.Slice(v.Bindings, func(i, j int) bool {
			a, b := v.Bindings[i], v.Bindings[j]
			if a.Source != b.Source {
				return a.Source < b.Source
			}
			if a.Destination != b.Destination {
				return a.Destination < b.Destination
			}
			if a.DestinationType != b.DestinationType {
				return a.DestinationType < b.DestinationType
			}
			return a.RoutingKey < b.RoutingKey
		})
		for j := range v.Queues {
			queues = append(queues, &v.Queues[j])
			engines = append(engines, v.Queues[j].EngineQueue)
		}
	}
	for i, q := range queues {
		if info, err := s.eng.GetQueue(engines[i]); err == nil {
			q.Ready = info.Visible + info.Delayed
			q.Unacked = info.InFlight
		}
	}
	return doc
}

func ptr[T any](v T) *T { return &v }

// jsonTable renders a field table as plain JSON values (never nil).
func jsonTable(t wire.Table) map[string]any {
	out := make(map[string]any, len(t))
	for _, f := range t {
		if _, dup := out[f.Key]; dup {
			continue // the first entry of a key wins, as in RabbitMQ
		}
		out[f.Key] = jsonValue(f.Value, 0)
	}
	return out
}

// jsonValue converts a field value: integers, floats and decimals to
// numbers (a non-finite float to null), strings and
// booleans as they are, byte arrays to base64 strings (encoding/json),
// timestamps to seconds, tables to objects, arrays to arrays, void to null.
func jsonValue(v any, depth int) any {
	if depth > wire.MaxTableDepth {
		return nil
	}
	switch x := v.(type) {
	case float32:
		return jsonFloat(float64(x))
	case float64:
		return jsonFloat(x)
	case wire.Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale))
	case wire.Timestamp:
		return uint64(x)
	case wire.Table:
		out := make(map[string]any, len(x))
		for _, f := range x {
			if _, dup := out[f.Key]; !dup {
				out[f.Key] = jsonValue(f.Value, depth+1)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e, depth+1)
		}
		return out
	}
	return v // bool, integers, string, []byte, nil
}

func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}
