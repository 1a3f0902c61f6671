package wire

import "errors"

// Decoding errors. Every error a decoder in this package returns for bad
// input wraps exactly one of these, so the connection layer can map it to a
// reply code once, with [ReplyCodeFor]:
//
//	error                  reply code               raised by
//	ErrFrameTooLarge       501 FRAME_ERROR          ReadFrame
//	ErrBadFrameEnd         501 FRAME_ERROR          ReadFrame
//	ErrUnknownFrameType    501 FRAME_ERROR          ReadFrame
//	ErrMalformedFrame      501 FRAME_ERROR          ReadFrame, ParseMethod, ParseContentHeader
//	ErrSyntax              502 SYNTAX_ERROR         every argument, property and table decoder
//	ErrUnknownMethod       503 COMMAND_INVALID      ReadMethod, ParseMethod
//	ErrBadProtocolHeader   none: answer with ProtocolHeader and close
//
// I/O errors from the underlying reader (io.EOF, io.ErrUnexpectedEOF, net
// errors) are returned as they are and have no reply code: the peer is gone
// or the stream is cut, so there is nobody to send connection.close to.
var (
	// ErrFrameTooLarge means a frame's size field exceeds the negotiated
	// frame_max (which counts the 7-byte header and the end byte).
	ErrFrameTooLarge = errors.New("wire: frame larger than frame_max")

	// ErrBadFrameEnd means the byte after a frame's payload is not 0xCE.
	// The stream is out of step and cannot be resynchronised.
	ErrBadFrameEnd = errors.New("wire: frame-end octet is not 0xCE")

	// ErrUnknownFrameType means a frame's type octet is not 1, 2, 3 or 8.
	ErrUnknownFrameType = errors.New("wire: unknown frame type")

	// ErrMalformedFrame means a frame is too short for its type (a method
	// frame without class and method ids, a content header shorter than 14
	// bytes) or a heartbeat frame carries a payload.
	ErrMalformedFrame = errors.New("wire: malformed frame")

	// ErrSyntax means a method's arguments, a content header's properties
	// or a field table could not be decoded: a length running past the
	// end, an unknown field-value tag, nesting deeper than MaxTableDepth, or
	// bytes left over after the last argument.
	ErrSyntax = errors.New("wire: syntax error")

	// ErrUnknownMethod means a method frame names a class and method id
	// pair that the AMQP 0-9-1 spec (with RabbitMQ's extensions) does not
	// define. Sluice answers it with 503 COMMAND_INVALID.
	ErrUnknownMethod = errors.New("wire: unknown class or method id")

	// ErrBadProtocolHeader means the first eight bytes of a connection are
	// not ProtocolHeader. The spec requires the server to write its own
	// ProtocolHeader and close the socket; no connection.close is sent.
	ErrBadProtocolHeader = errors.New("wire: bad protocol header")
)

// Encoding errors. They mean the caller built a value the wire cannot carry;
// they are programming errors in the broker, not peer misbehaviour, and have
// no reply code.
var (
	// ErrFieldTooLong means a short string exceeds 255 bytes or a long
	// string, byte array, table or array exceeds 2^32-1 bytes.
	ErrFieldTooLong = errors.New("wire: value too long for its field")

	// ErrUnsupportedType means a Table or array holds a Go value that has no
	// field-value tag; see Table for the accepted types.
	ErrUnsupportedType = errors.New("wire: unsupported field value type")

	// ErrTooDeep means a Table or array to encode nests deeper than
	// MaxTableDepth (or refers to itself).
	ErrTooDeep = errors.New("wire: field table nested too deeply")
)

// ReplyCodeFor returns the AMQP reply code the server must close the
// connection with when a decoder returned err: FrameError (501),
// SyntaxError (502) or CommandInvalid (503). It returns 0 for errors that
// call for no connection.close: nil, I/O errors, ErrBadProtocolHeader and
// encoding errors.
func ReplyCodeFor(err error) uint16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrBadFrameEnd),
		errors.Is(err, ErrUnknownFrameType), errors.Is(err, ErrMalformedFrame):
		return FrameError
	case errors.Is(err, ErrSyntax):
		return SyntaxError
	case errors.Is(err, ErrUnknownMethod):
		return CommandInvalid
	}
	return 0
}
