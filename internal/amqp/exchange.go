package amqp

import (
	"strings"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Exchange types.
const (
	kindDirect  = "direct"
	kindFanout  = "fanout"
	kindTopic   = "topic"
	kindHeaders = "headers"
)

func validKind(k string) bool {
	switch k {
	case kindDirect, kindFanout, kindTopic, kindHeaders:
		return true
	}
	return false
}

// exchange is an exchange of a vhost. Guarded by Topology.mu.
type exchange struct {
	name                          string
	kind                          string
	durable, autoDelete, internal bool
	args                          wire.Table
	bindings                      []*binding // bindings whose source is this exchange
}

// alternate returns the alternate-exchange argument, if any.
func (x *exchange) alternate() (string, bool) {
	v, ok := x.args.Get("alternate-exchange")
	if !ok {
		return "", false
	}
	s, ok := asString(v)
	return s, ok
}

// binding routes from an exchange to a queue or an exchange.
type binding struct {
	source  string
	dest    string
	toQueue bool
	key     string
	args    wire.Table
	argsID  string // the encoded arguments: bindings are equal when source, dest, key and argsID are
	words   []string
}

func newBinding(source, dest string, toQueue bool, key string, args wire.Table) *binding {
	enc, _ := wire.AppendTable(nil, args)
	return &binding{source: source, dest: dest, toQueue: toQueue, key: key, args: args, argsID: string(enc), words: strings.Split(key, ".")}
}

func (b *binding) same(o *binding) bool {
	return b.source == o.source && b.dest == o.dest && b.toQueue == o.toQueue && b.key == o.key && b.argsID == o.argsID
}

// matches reports whether a message with the routing key (or one of its CC
// keys) and headers takes this binding on an exchange of kind.
func (b *binding) matches(kind string, keys []string, headers wire.Table) bool {
	switch kind {
	case kindFanout:
		return true
	case kindDirect:
		for _, k := range keys {
			if k == b.key {
				return true
			}
		}
	case kindTopic:
		for _, k := range keys {
			if topicMatch(b.words, strings.Split(k, ".")) {
				return true
			}
		}
	case kindHeaders:
		return headersMatch(b.args, headers)
	}
	return false
}

// topicMatch matches routing-key words against a binding pattern: "*"
// is exactly one word, "#" zero or more. Dynamic programming over
// (pattern, key) positions keeps hostile patterns linear in their size
// product.
func topicMatch(pat, key []string) bool {
	// cur[j]: pattern prefix matched key prefix of length j.
	cur := make([]bool, len(key)+1)
	next := make([]bool, len(key)+1)
	cur[0] = true
	for _, p := range pat {
		clear(next)
		switch p {
		case "#":
			seen := false
			for j := 0; j <= len(key); j++ {
				seen = seen || cur[j]
				next[j] = seen
			}
		case "*":
			for j := 1; j <= len(key); j++ {
				next[j] = cur[j-1]
			}
		default:
			for j := 1; j <= len(key); j++ {
				next[j] = cur[j-1] && key[j-1] == p
			}
		}
		cur, next = next, cur
	}
	return cur[len(key)]
}

// headersMatch is the headers exchange: the binding's x-match is "all"
// (default) or "any"; "all-with-x" and "any-with-x" also compare binding
// arguments whose names start with "x-", which are otherwise skipped. A
// void binding value matches presence; otherwise the message header must
// have the same type class and value.
func headersMatch(args, headers wire.Table) bool {
	mode := "all"
	if v, ok := args.Get("x-match"); ok {
		if s, ok := asString(v); ok {
			mode = s
		}
	}
	any := mode == "any" || mode == "any-with-x"
	withX := strings.HasSuffix(mode, "-with-x")
	n := 0
	for _, a := range args {
		if a.Key == "x-match" || (!withX && strings.HasPrefix(a.Key, "x-")) {
			continue
		}
		n++
		v, present := headers.Get(a.Key)
		ok := present && (a.Value == nil || valuesEqual(a.Value, v))
		if any && ok {
			return true
		}
		if !any && !ok {
			return false
		}
	}
	return !any
}

// typeClass is RabbitMQ's type class of a field value: every integer tag is
// "int", float and double are "float"; others are their own.
func typeClass(v any) string {
	switch v.(type) {
	case int8, uint8, int16, uint16, int32, uint32, int64:
		return "int"
	case float32, float64:
		return "float"
	case string:
		return "longstr"
	case []byte:
		return "binary"
	case bool:
		return "bool"
	case wire.Decimal:
		return "decimal"
	case wire.Timestamp:
		return "timestamp"
	case wire.Table:
		return "table"
	case []any:
		return "array"
	case nil:
		return "void"
	}
	return "unknown"
}

// typeName is RabbitMQ's name of a field value's type, for messages.
func typeName(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case wire.Decimal:
		return "decimal"
	case string:
		return "longstr"
	case []byte:
		return "binary"
	case []any:
		return "array"
	case wire.Timestamp:
		return "timestamp"
	case wire.Table:
		return "table"
	case nil:
		return "void"
	}
	return "unknown"
}

// asInt returns an integer field value of any integer tag.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// valuesEqual compares field values by type class and value.
func valuesEqual(a, b any) bool {
	if typeClass(a) != typeClass(b) {
		return false
	}
	if x, ok := asInt(a); ok {
		y, _ := asInt(b)
		return x == y
	}
	switch x := a.(type) {
	case float32:
		return toFloat(x) == toFloat(b)
	case float64:
		return x == toFloat(b)
	case []byte:
		return string(x) == string(b.([]byte))
	case wire.Table, []any:
		ea, _ := wire.AppendTable(nil, wire.Table{{Key: "v", Value: a}})
		eb, _ := wire.AppendTable(nil, wire.Table{{Key: "v", Value: b}})
		return string(ea) == string(eb)
	}
	return a == b
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	}
	return 0
}
