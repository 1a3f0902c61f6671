package amqp

import (
	"bytes"
	"encoding/binary"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// Headers the broker adds to a basic.deliver or basic.get-ok of a stored
// message. x-delivery-count goes on every redelivery, as on RabbitMQ's
// quorum queues. The failure-report headers — the engine receipt handle of
// this delivery and the engine queue it came from, with which a consumer
// can report a failure through the admin API's failure-report extension
// (POST /sluice/v1/failures) while it still holds the delivery — are added
// only for a client that opts in (optFailureHeaders): by default a message
// is delivered with exactly the headers it was published with, as clients
// and their test suites expect.
const (
	headerReceipt = "x-sluice-receipt"
	headerQueue   = "x-sluice-queue"
	headerCount   = "x-delivery-count"

	// optFailureHeaders, set to true as a basic.consume argument or as a
	// client property of the connection (connection.start-ok; not inside
	// "capabilities", which clients fill in themselves), asks for
	// x-sluice-receipt and x-sluice-queue on that consumer's deliveries
	// or on every delivery and get-ok of the connection.
	optFailureHeaders = "x-sluice-failure-headers"
	// headerOriginalID is on deliveries of a redriven message: the
	// engine id of the message before its first redrive (a redrive makes
	// a new message), so a consumer keeps one idempotency key (DLQ-100).
	headerOriginalID = "x-sluice-original-message-id"
)

// brokerHeaders returns the headers a delivery of d from engine queue eq
// gets: x-delivery-count on redeliveries (the number of earlier
// deliveries, absent on the first), then, when failure is set,
// x-sluice-receipt and x-sluice-queue, and on a redriven message always
// x-sluice-original-message-id (like x-death, it records what the broker
// did to the message).
func brokerHeaders(d *engine.Delivery, eq string, failure bool) wire.Table {
	t := make(wire.Table, 0, 3)
	if d.ReceiveCount > 1 {
		t = append(t, wire.Field{Key: headerCount, Value: int64(d.ReceiveCount - 1)})
	}
	if failure && d.ReceiptHandle != "" {
		t = append(t, wire.Field{Key: headerReceipt, Value: d.ReceiptHandle},
			wire.Field{Key: headerQueue, Value: eq})
	}
	if r := d.Redrive; r != nil && r.OriginalMessageID != "" {
		t = append(t, wire.Field{Key: headerOriginalID, Value: r.OriginalMessageID})
	}
	return t
}

// addHeaders returns property bytes (flag word and properties) with the
// given fields added to the headers table. The stored bytes are not
// re-encoded: the fields are appended to the table (which is added when
// absent) and the rest is copied, so every other header keeps its tag and
// position. When the table may already hold one of the keys (a publisher
// set it), the properties are decoded and the keys replaced instead, so a
// publisher cannot forge them (RabbitMQ and most clients read the first
// entry of a key, amqp091-go the last).
func addHeaders(props []byte, fields wire.Table) []byte {
	if len(fields) == 0 {
		return props
	}
	enc, err := wire.AppendTable(nil, fields)
	if err != nil {
		return props
	}
	if out, ok := spliceHeaders(props, enc[4:], fields); ok {
		return out
	}
	p, err := parseProps(props)
	if err != nil {
		return props
	}
	p.Headers = append(wire.Table(nil), p.Headers...)
	for _, f := range fields {
		p.Headers = p.Headers.Set(f.Key, f.Value)
	}
	raw, err := encodeProps(&p)
	if err != nil {
		return props
	}
	return raw
}

// spliceHeaders appends encoded table entries to the headers table of
// props. ok is false when it cannot (a continuation flag, malformed
// bytes, or the table may already contain one of the keys).
func spliceHeaders(props, entries []byte, fields wire.Table) ([]byte, bool) {
	if len(props) < 2 {
		return nil, false
	}
	flags := binary.BigEndian.Uint16(props)
	if flags&1 != 0 {
		return nil, false // more flag words: let the decoder handle it
	}
	off := 2
	for _, f := range [...]uint16{wire.FlagContentType, wire.FlagContentEncoding} {
		if flags&f != 0 {
			if off >= len(props) {
				return nil, false
			}
			off += 1 + int(props[off])
		}
	}
	if off > len(props) {
		return nil, false
	}
	out := make([]byte, 0, len(props)+len(entries)+4)
	if flags&wire.FlagHeaders == 0 {
		out = binary.BigEndian.AppendUint16(out, flags|wire.FlagHeaders)
		out = append(out, props[2:off]...)
		out = binary.BigEndian.AppendUint32(out, uint32(len(entries)))
		out = append(out, entries...)
		return append(out, props[off:]...), true
	}
	if off+4 > len(props) {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(props[off:]))
	end := off + 4 + n
	if n < 0 || end > len(props) {
		return nil, false
	}
	table := props[off+4 : end]
	for _, f := range fields {
		// The key as a table entry starts: its length, then its bytes.
		// A false match (inside a value) only costs the slow path.
		if bytes.Contains(table, append([]byte{byte(len(f.Key))}, f.Key...)) {
			return nil, false
		}
	}
	out = append(out, props[:off]...)
	out = binary.BigEndian.AppendUint32(out, uint32(n+len(entries)))
	out = append(out, table...)
	out = append(out, entries...)
	return append(out, props[end:]...), true
}
