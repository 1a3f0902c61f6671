// Package wire encodes and decodes AMQP 0-9-1 as RabbitMQ speaks it: the
// protocol header, frames, methods, content headers and field tables. It is
// pure protocol: no sockets, no timers, no broker state, and it imports
// nothing else from Sluice. The connection layer above it decides what a
// decoded frame means and which reply code an error earns (ReplyCodeFor
// gives the spec's mapping).
//
// # Wire format
//
// A connection starts with the client's ProtocolHeader, "AMQP" 0 0 9 1
// (ReadProtocolHeader). After that both sides exchange frames:
//
//	+------+---------+-------------+---------------+------+
//	| type | channel |    size     |    payload    | 0xCE |
//	+------+---------+-------------+---------------+------+
//	 octet   short       long        size octets    octet
//
//	type 1 method      payload: class-id short, method-id short, arguments
//	type 2 header      payload: ContentHeader (class, weight, body size, properties)
//	type 3 body        payload: a slice of the message body
//	type 8 heartbeat   no payload, always on channel 0
//
// All integers are big-endian. A content-carrying method (HasContent) is
// followed on its channel by one header frame and then body frames until
// BodySize bytes have arrived; an empty body has no body frames.
//
// # Code generation
//
// The method structs, ids, reply codes and Properties are generated from
// the spec XML in gen/amqp0-9-1.xml by gen/main.go into spec_gen.go and
// one spec_<class>_gen.go per class; run
// `go generate ./internal/amqp/wire` after changing either. The primitive
// codecs they call (codec.go, table.go) are written by hand.
//
// # Contracts
//
//   - Decoders work on a byte slice already bounded by frame_max and check
//     every length against the bytes that remain before allocating, so a
//     hostile length field cannot make them allocate more than the frame.
//   - Decoded strings, byte arrays and tables are copies; they never alias
//     the frame payload.
//   - decode→encode reproduces the input byte for byte for every method,
//     content header and table, with two documented exceptions: unused bits
//     in a bit octet are dropped, and a boolean field value other than 0 or 1
//     is re-encoded as 1.
//   - Field tables follow RabbitMQ's tag set, not the spec's; see Table.
//   - Nothing in the package is mutable global state; all functions are safe
//     for concurrent use on distinct values.
package wire

//go:generate go run ./gen
