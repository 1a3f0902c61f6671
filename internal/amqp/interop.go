package amqp

import (
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// Interoperation with SQS (see docs/amqp-compat.md). A queue of vhost "/"
// is one engine queue for both protocols.
//
// AMQP → SQS: the body is the message body; headers whose values are
// strings become String attributes, integers and floats Number
// attributes, booleans String "true"/"false", as long as the name is a
// valid SQS attribute name; at most maxInteropAttributes, in header order.
// The AMQP properties themselves stay in the envelope, which SQS ignores.
//
// SQS → AMQP: a message without an envelope is delivered from the default
// exchange with the queue name as routing key, delivery-mode 2, message-id
// the SQS MessageId, timestamp its send time, and headers from its
// attributes: String as long strings, Number as a 64-bit integer when it
// is one and a double otherwise (a Number that is neither stays a
// string), Binary as a byte array.

const maxInteropAttributes = 10

func validAttributeName(n string) bool {
	if n == "" || len(n) > 256 || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, "..") {
		return false
	}
	l := strings.ToLower(n)
	if strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// attributesFromHeaders maps AMQP headers to SQS message attributes.
func attributesFromHeaders(h wire.Table) []engine.Attribute {
	var out []engine.Attribute
	seen := make(map[string]bool)
	for _, f := range h {
		if len(out) == maxInteropAttributes {
			break
		}
		if seen[f.Key] || !validAttributeName(f.Key) {
			continue
		}
		a := engine.Attribute{Name: f.Key}
		switch v := f.Value.(type) {
		case string:
			if v == "" {
				continue
			}
			a.DataType, a.StringValue = "String", v
		case bool:
			a.DataType, a.StringValue = "String", strconv.FormatBool(v)
		case float32:
			a.DataType, a.StringValue = "Number", strconv.FormatFloat(float64(v), 'g', -1, 32)
		case float64:
			a.DataType, a.StringValue = "Number", strconv.FormatFloat(v, 'g', -1, 64)
		default:
			n, ok := asInt(v)
			if !ok {
				continue
			}
			a.DataType, a.StringValue = "Number", strconv.FormatInt(n, 10)
		}
		seen[f.Key] = true
		out = append(out, a)
	}
	return out
}

// propsFromSQS builds AMQP properties for a message sent over SQS.
func propsFromSQS(d *engine.Delivery) wire.Properties {
	p := wire.Properties{DeliveryMode: 2, MessageID: d.MessageID}
	if !d.SentAt.IsZero() {
		p.Timestamp = wire.TimestampOf(d.SentAt)
	}
	for _, a := range d.Attributes {
		var v any
		base, _, _ := strings.Cut(a.DataType, ".")
		switch base {
		case "String":
			v = a.StringValue
		case "Number":
			if n, err := strconv.ParseInt(a.StringValue, 10, 64); err == nil {
				v = n
			} else if f, err := strconv.ParseFloat(a.StringValue, 64); err == nil {
				v = f
			} else {
				v = a.StringValue
			}
		case "Binary":
			v = append([]byte(nil), a.BinaryValue...)
		default:
			continue
		}
		p.Headers = append(p.Headers, wire.Field{Key: a.Name, Value: v})
	}
	if d.ReceiveCount > 1 {
		p.Headers = append(p.Headers, wire.Field{Key: "x-delivery-count", Value: int64(d.ReceiveCount - 1)})
	}
	return p
}
