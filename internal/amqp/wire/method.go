package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Method is one AMQP method with its arguments. Every method of the spec
// (with RabbitMQ's extensions) has a generated struct in spec_gen.go named
// after the class and method: ConnectionStart, BasicPublish, ExchangeUnbindOK
// and so on; always use a pointer to it.
type Method interface {
	// IDs returns the method's class and method ids on the wire. (A method
	// rather than two: connection.close and channel.close have arguments
	// named class-id and method-id.)
	IDs() (classID, methodID uint16)
	// Name is the spec's dotted name, such as "basic.publish".
	Name() string
	// Synchronous reports whether the spec marks the method synchronous:
	// a request that expects a reply, or the reply itself.
	Synchronous() bool
	// HasContent reports whether a content header frame and body frames
	// follow the method (basic.publish, deliver, get-ok and return).
	HasContent() bool
	// AppendArgs appends the encoded arguments, without the class and
	// method ids, to dst. It fails only for values the wire cannot carry
	// (ErrFieldTooLong, ErrUnsupportedType, ErrTooDeep), and then returns
	// dst unchanged.
	AppendArgs(dst []byte) ([]byte, error)
	// UnmarshalArgs decodes the arguments from args, which must hold them
	// exactly: short input, bad tables and trailing bytes give ErrSyntax.
	// Consecutive bit arguments share an octet, the first in its least
	// significant bit; unused bits of such an octet are ignored.
	UnmarshalArgs(args []byte) error
}

// ReadMethod decodes the arguments of the method classID/methodID from args
// (a method frame's payload after its first four bytes). It returns an error
// wrapping ErrUnknownMethod for ids the spec does not define and ErrSyntax
// for undecodable arguments.
func ReadMethod(classID, methodID uint16, args []byte) (Method, error) {
	m := newMethod(classID, methodID)
	if m == nil {
		return nil, fmt.Errorf("%w: class %d method %d", ErrUnknownMethod, classID, methodID)
	}
	if err := m.UnmarshalArgs(args); err != nil {
		return nil, err
	}
	return m, nil
}

// ParseMethod decodes a method frame's payload: class id (short), method id
// (short), arguments. A payload shorter than four bytes is ErrMalformedFrame;
// otherwise errors are as for ReadMethod.
func ParseMethod(payload []byte) (Method, error) {
	if len(payload) < 4 {
		return nil, fmt.Errorf("%w: method frame of %d bytes", ErrMalformedFrame, len(payload))
	}
	return ReadMethod(binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), payload[4:])
}

// AppendMethod appends m's class id, method id and arguments (a method
// frame's payload) to dst. On error it returns dst unchanged.
func AppendMethod(dst []byte, m Method) ([]byte, error) {
	c, id := m.IDs()
	b := binary.BigEndian.AppendUint16(dst, c)
	b = binary.BigEndian.AppendUint16(b, id)
	b, err := m.AppendArgs(b)
	if err != nil {
		return dst, err
	}
	return b, nil
}

// AppendMethodFrame appends the whole method frame that carries m on
// channel (the frame MethodFrame returns, encoded as AppendFrame encodes
// it) to dst, without a separate payload buffer. On error it returns dst
// unchanged.
func AppendMethodFrame(dst []byte, channel uint16, m Method) ([]byte, error) {
	start := len(dst)
	b := append(dst, FrameMethod)
	b = binary.BigEndian.AppendUint16(b, channel)
	b = append(b, 0, 0, 0, 0) // the payload's size, set below
	b, err := AppendMethod(b, m)
	if err != nil {
		return dst, err
	}
	n := len(b) - start - 7
	if uint64(n) > math.MaxUint32-FrameOverhead {
		return dst, fmt.Errorf("%w: frame payload of %d bytes", ErrFieldTooLong, n)
	}
	binary.BigEndian.PutUint32(b[start+3:], uint32(n))
	return append(b, FrameEnd), nil
}

// MethodFrame returns the method frame that carries m on channel.
func MethodFrame(channel uint16, m Method) (Frame, error) {
	p, err := AppendMethod(nil, m)
	if err != nil {
		return Frame{}, err
	}
	return Frame{Type: FrameMethod, Channel: channel, Payload: p}, nil
}
