package amqp

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// Definitions are the durable AMQP topology as data: what the config file
// declares ([[exchanges]], [[amqp_queues]], [[bindings]]) and what
// `sluice definitions export` writes, in the spirit of RabbitMQ's
// definitions file. Declare applies them through the same code as
// exchange.declare, queue.declare and queue.bind / exchange.bind (so the
// same validation and the same equivalence checks), as a built-in user
// with every permission.
type Definitions struct {
	Exchanges []ExchangeDefinition `json:"exchanges" toml:"exchanges"`
	Queues    []QueueDefinition    `json:"queues" toml:"queues"`
	Bindings  []BindingDefinition  `json:"bindings" toml:"bindings"`
}

// ExchangeDefinition is one exchange. Vhost "" means "/".
type ExchangeDefinition struct {
	Vhost      string         `json:"vhost,omitempty" toml:"vhost"`
	Name       string         `json:"name" toml:"name"`
	Type       string         `json:"type" toml:"type"`
	Durable    bool           `json:"durable" toml:"durable"`
	AutoDelete bool           `json:"auto_delete" toml:"auto_delete"`
	Internal   bool           `json:"internal" toml:"internal"`
	Arguments  map[string]any `json:"arguments,omitempty" toml:"arguments"`
}

// QueueDefinition is one AMQP queue with its x-arguments (dead-letter
// exchange and routing key, TTL, length limits, delivery limit). Vhost ""
// means "/". Exclusive queues belong to a connection and cannot be
// declared here.
type QueueDefinition struct {
	Vhost      string         `json:"vhost,omitempty" toml:"vhost"`
	Name       string         `json:"name" toml:"name"`
	Durable    bool           `json:"durable" toml:"durable"`
	AutoDelete bool           `json:"auto_delete" toml:"auto_delete"`
	Arguments  map[string]any `json:"arguments,omitempty" toml:"arguments"`
}

// BindingDefinition binds exchange Source to a queue or an exchange.
// DestinationType is "queue" (the default) or "exchange".
type BindingDefinition struct {
	Vhost           string         `json:"vhost,omitempty" toml:"vhost"`
	Source          string         `json:"source" toml:"source"`
	Destination     string         `json:"destination" toml:"destination"`
	DestinationType string         `json:"destination_type" toml:"destination_type"`
	RoutingKey      string         `json:"routing_key" toml:"routing_key"`
	Arguments       map[string]any `json:"arguments,omitempty" toml:"arguments"`
}

// Declare applies d: exchanges first, then queues, then bindings, so a
// document can name what it declares. Declaring what already exists with
// the same settings changes nothing (a restart re-applies the config
// file); declaring it with different settings fails with the
// PRECONDITION_FAILED text a client would get. It stops at the first
// error, which names the object.
func (s *Server) Declare(d Definitions) error {
	for _, x := range d.Exchanges {
		c, err := s.definitionsConn(x.Vhost)
		if err != nil {
			return err
		}
		args, err := wireTable(x.Arguments)
		if err == nil {
			err = s.declareExchange(c, &wire.ExchangeDeclare{Exchange: x.Name, Type: x.Type, Durable: x.Durable,
				AutoDelete: x.AutoDelete, Internal: x.Internal, Arguments: args})
		}
		if err != nil {
			return fmt.Errorf("amqp: exchange %q in vhost %q: %w", x.Name, c.vhost, err)
		}
	}
	for _, q := range d.Queues {
		c, err := s.definitionsConn(q.Vhost)
		if err != nil {
			return err
		}
		if q.Name == "" {
			return fmt.Errorf("amqp: a queue definition needs a name (server-named queues cannot be declared)")
		}
		args, err := wireTable(q.Arguments)
		if err == nil {
			_, _, _, err = s.declareQueue(c, &wire.QueueDeclare{Queue: q.Name, Durable: q.Durable, AutoDelete: q.AutoDelete, Arguments: args})
		}
		if err != nil {
			return fmt.Errorf("amqp: queue %q in vhost %q: %w", q.Name, c.vhost, err)
		}
	}
	for _, b := range d.Bindings {
		c, err := s.definitionsConn(b.Vhost)
		if err != nil {
			return err
		}
		toQueue := true
		switch b.DestinationType {
		case "", "queue":
		case "exchange":
			toQueue = false
		default:
			return fmt.Errorf("amqp: binding %q → %q: destination_type %q is not queue or exchange", b.Source, b.Destination, b.DestinationType)
		}
		args, err := wireTable(b.Arguments)
		if err == nil {
			err = s.bind(c, b.Source, b.Destination, toQueue, b.RoutingKey, args)
		}
		if err != nil {
			return fmt.Errorf("amqp: binding %q → %q (key %q) in vhost %q: %w", b.Source, b.Destination, b.RoutingKey, c.vhost, err)
		}
	}
	return nil
}

// definitionsConn is the pseudo-connection Declare acts as: vhost vh and a
// user allowed everything there. Only the fields the topology operations
// read are set.
func (s *Server) definitionsConn(vh string) (*conn, error) {
	if vh == "" {
		vh = "/"
	}
	if !s.vhostExists(vh) {
		return nil, fmt.Errorf("amqp: vhost %q does not exist (vhosts are those [[amqp_users]] have permissions on, and \"/\")", vh)
	}
	all := regexp.MustCompile(".*")
	u := &user{name: "sluice-definitions", perms: map[string]*perm{vh: {configure: all, write: all, read: all}}}
	return &conn{vhost: vh, user: u}, nil
}

// Definitions returns the durable topology: durable exchanges other than
// the built-in ones, durable non-exclusive queues, and the bindings
// between them. Sorted by vhost and name, so two exports of the same
// topology are byte-identical.
func (s *Server) Definitions() Definitions {
	t := s.topo
	d := Definitions{Exchanges: []ExchangeDefinition{}, Queues: []QueueDefinition{}, Bindings: []BindingDefinition{}}
	t.mu.RLock()
	for _, v := range t.vhosts {
		for _, x := range v.exchanges {
			if x.name != "" && !isBuiltin(x.name) && x.durable {
				d.Exchanges = append(d.Exchanges, ExchangeDefinition{Vhost: v.name, Name: x.name, Type: x.kind, Durable: x.durable,
					AutoDelete: x.autoDelete, Internal: x.internal, Arguments: jsonTable(x.args)})
			}
			if !x.durable {
				continue
			}
			for _, b := range x.bindings {
				kind := "exchange"
				if b.toQueue {
					kind = "queue"
					if q := v.queues[b.dest]; q == nil || !q.durable || q.exclusive {
						continue
					}
				} else if dx := v.exchanges[b.dest]; dx == nil || !dx.durable {
					continue
				}
				d.Bindings = append(d.Bindings, BindingDefinition{Vhost: v.name, Source: b.source, Destination: b.dest,
					DestinationType: kind, RoutingKey: b.key, Arguments: jsonTable(b.args)})
			}
		}
		for _, q := range v.queues {
			// An SQS queue is exported as one (by the caller); among
			// the AMQP queues only when a declare gave it arguments.
			sqsOnly := q.adopted || q.sqsQueue && len(q.args) == 0
			if q.durable && !q.exclusive && !q.deleted && !sqsOnly {
				d.Queues = append(d.Queues, QueueDefinition{Vhost: v.name, Name: q.name, Durable: q.durable,
					AutoDelete: q.autoDelete, Arguments: jsonTable(q.args)})
			}
		}
	}
	t.mu.RUnlock()
	sort.Slice(d.Exchanges, func(i, j int) bool {
		a, b := d.Exchanges[i], d.Exchanges[j]
		return a.Vhost < b.Vhost || a.Vhost == b.Vhost && a.Name < b.Name
	})
	sort.Slice(d.Queues, func(i, j int) bool {
		a, b := d.Queues[i], d.Queues[j]
		return a.Vhost < b.Vhost || a.Vhost == b.Vhost && a.Name < b.Name
	})
	sort.Slice(d.Bindings, func(i, j int) bool {
		a, b := d.Bindings[i], d.Bindings[j]
		if a.Vhost != b.Vhost {
			return a.Vhost < b.Vhost
		}
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		if a.Destination != b.Destination {
			return a.Destination < b.Destination
		}
		return a.RoutingKey < b.RoutingKey
	})
	return d
}

// IsAMQPQueue reports whether engine queue name belongs to a queue that
// AMQP created (declared over AMQP), so that a definitions export lists
// it among the AMQP queues only. An SQS queue that AMQP uses or declared
// is not one: it is exported as an SQS queue, with its attributes (and,
// when a declare gave it arguments, among the AMQP queues too, so that an
// import applies them after creating it).
func (s *Server) IsAMQPQueue(name string) bool {
	s.topo.mu.RLock()
	defer s.topo.mu.RUnlock()
	q, ok := s.topo.byEngine[name]
	return ok && !q.adopted && !q.sqsQueue
}

// DeclaredExtra is the engine queue attribute (engine.QueueConfig.Extra)
// that marks a queue declared over AMQP and created on another shard of a
// cluster (Placer), which has no topology record: a definitions export
// lists such a queue among the AMQP queues, not as an SQS queue.
// ArgumentsExtra holds the declare's arguments, when it had any (an AMQP
// table, base64): the server of shard 0 that adopts the queue — the one
// that placed it, or its successor — gives it those settings and compares
// a redeclare with them.
const (
	DeclaredExtra  = "sluice:amqp-declared"
	ArgumentsExtra = "sluice:amqp-arguments"
)

// placedDeclared reports whether cfg is that of a queue declared over AMQP
// and placed on another shard (DeclaredExtra).
func placedDeclared(cfg engine.QueueConfig) bool { return cfg.Extra[DeclaredExtra] == "true" }

// PlacedDefinition is the definition of a queue declared over AMQP and
// placed on another shard, from its engine configuration; false when cfg
// is not such a queue's (placedDeclared).
func PlacedDefinition(name string, cfg engine.QueueConfig) (QueueDefinition, bool) {
	if !placedDeclared(cfg) {
		return QueueDefinition{}, false
	}
	args, _ := placedArguments(cfg) // unreadable: listed without, as adopt uses it
	return QueueDefinition{Vhost: "/", Name: name, Durable: true, Arguments: jsonTable(args)}, true
}

// placedExtra is the Extra of a queue declared with args and placed on
// another shard.
func placedExtra(args wire.Table) map[string]string {
	extra := map[string]string{DeclaredExtra: "true"}
	if len(args) > 0 {
		b, _ := wire.AppendTable(nil, args) // a declare's table encodes: it was decoded
		extra[ArgumentsExtra] = base64.StdEncoding.EncodeToString(b)
	}
	return extra
}

// placedArguments returns the arguments placedExtra stored in cfg (nil
// when there were none).
func placedArguments(cfg engine.QueueConfig) (wire.Table, error) {
	v := cfg.Extra[ArgumentsExtra]
	if v == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, err
	}
	t, err := wire.ParseTable(b)
	if len(t) == 0 {
		t = nil
	}
	return t, err
}

// wireTable converts arguments decoded from JSON or TOML to an AMQP
// table: whole numbers become signed 64-bit integers (JSON has only
// float64; x-message-ttl and friends must be integers), objects become
// tables. Keys are sorted so the table is deterministic.
func wireTable(m map[string]any) (wire.Table, error) {
	if len(m) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t := make(wire.Table, 0, len(m))
	for _, k := range keys {
		v, err := wireValue(m[k], 0)
		if err != nil {
			return nil, fmt.Errorf("argument %q: %w", k, err)
		}
		t = append(t, wire.Field{Key: k, Value: v})
	}
	return t, nil
}

func wireValue(v any, depth int) (any, error) {
	if depth > wire.MaxTableDepth {
		return nil, errors.New("nested too deeply")
	}
	switch x := v.(type) {
	case nil, bool, string, int64:
		return x, nil
	case int:
		return int64(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
		return x, nil
	case map[string]any:
		t, err := wireTable(x)
		return t, err
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			w, err := wireValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = w
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value %v (%T)", v, v)
}
