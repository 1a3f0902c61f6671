package amqp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// The envelope is what the AMQP front-end stores with every message in
// engine.Message.Envelope. Its layout is a format: it must stay readable by
// every later version (bump envelopeVersion and keep decoding the old one).
//
//	+---------+-------+----------+-------+----------------+------------------+
//	| version | flags | exchange | nkeys | routing keys   | property bytes   |
//	+---------+-------+----------+-------+----------------+------------------+
//	  octet     octet   shortstr   octet   nkeys shortstr   rest of envelope
//
// The property bytes are the content header's flag word and properties
// exactly as the publisher sent them (after BCC is removed), so header
// tables come back tag for tag. The routing keys are the publish routing
// key followed by the CC keys; dead-lettering reuses them.
const envelopeVersion = 1

// Envelope flags.
const (
	// envBrokerDeaths says the x-death history in the headers was written
	// by Sluice. A publisher's own x-death is not trusted (RabbitMQ 4.0):
	// the next dead-lettering starts a fresh history.
	envBrokerDeaths = 1 << 0
)

var errEnvelope = errors.New("amqp: malformed message envelope")

// envelope is a decoded message envelope.
type envelope struct {
	flags    byte
	exchange string
	keys     []string // keys[0] is the routing key the message was published with
	props    []byte   // property flag word and properties
}

func (e *envelope) routingKey() string {
	if len(e.keys) == 0 {
		return ""
	}
	return e.keys[0]
}

func (e *envelope) encode() []byte {
	n := 3 + len(e.exchange) + len(e.props)
	for _, k := range e.keys {
		n += 1 + len(k)
	}
	b := make([]byte, 0, n+1)
	b = append(b, envelopeVersion, e.flags)
	b = appendShortstr(b, e.exchange)
	keys := e.keys
	if len(keys) > 255 {
		keys = keys[:255]
	}
	b = append(b, byte(len(keys)))
	for _, k := range keys {
		b = appendShortstr(b, k)
	}
	return append(b, e.props...)
}

func appendShortstr(b []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	if len(b) < 3 || b[0] != envelopeVersion {
		return e, errEnvelope
	}
	e.flags = b[1]
	b = b[2:]
	var ok bool
	if e.exchange, b, ok = takeShortstr(b); !ok || len(b) < 1 {
		return e, errEnvelope
	}
	n := int(b[0])
	b = b[1:]
	e.keys = make([]string, 0, n)
	for range n {
		var k string
		if k, b, ok = takeShortstr(b); !ok {
			return e, errEnvelope
		}
		e.keys = append(e.keys, k)
	}
	if len(b) < 2 {
		return e, errEnvelope
	}
	e.props = b
	return e, nil
}

// CheckEnvelope returns why b is not an envelope the AMQP front-end can
// deliver, or nil: its framing and its properties, header tables
// included, must decode. The admin API's import checks the envelopes an
// operator supplies with it (wired by the server), so that no consumer
// is handed property bytes it cannot parse.
func CheckEnvelope(b []byte) error {
	e, err := decodeEnvelope(b)
	if err != nil {
		return err
	}
	if _, err := parseProps(e.props); err != nil {
		return fmt.Errorf("%w: properties: %v", errEnvelope, err)
	}
	return nil
}

func takeShortstr(b []byte) (string, []byte, bool) {
	if len(b) < 1 || len(b) < 1+int(b[0]) {
		return "", nil, false
	}
	n := int(b[0])
	return string(b[1 : 1+n]), b[1+n:], true
}

// parseProps decodes property bytes (flag word and properties).
func parseProps(raw []byte) (wire.Properties, error) {
	buf := make([]byte, 12, 12+len(raw))
	binary.BigEndian.PutUint16(buf, wire.ClassBasic)
	h, err := wire.ParseContentHeader(append(buf, raw...))
	if err != nil {
		return wire.Properties{}, err
	}
	return h.Properties, nil
}

// encodeProps encodes p as property bytes (flag word and properties).
func encodeProps(p *wire.Properties) ([]byte, error) {
	h := wire.ContentHeader{ClassID: wire.ClassBasic, Properties: *p}
	b, err := wire.AppendContentHeader(nil, &h)
	if err != nil {
		return nil, err
	}
	return b[12:], nil
}

// appendContentHeader appends the content header frame, on channel, of a
// basic-class body of size bytes with the given property bytes.
func appendContentHeader(dst []byte, channel uint16, size int, props []byte) []byte {
	dst = append(dst, wire.FrameHeader)
	dst = binary.BigEndian.AppendUint16(dst, channel)
	dst = binary.BigEndian.AppendUint32(dst, uint32(12+len(props)))
	dst = binary.BigEndian.AppendUint16(dst, wire.ClassBasic)
	dst = append(dst, 0, 0) // weight
	dst = binary.BigEndian.AppendUint64(dst, uint64(size))
	dst = append(dst, props...)
	return append(dst, wire.FrameEnd)
}

// removeProp clears a property and its presence bit.
func removeExpiration(p *wire.Properties) {
	p.Expiration = ""
	p.Flags &^= wire.FlagExpiration
}
