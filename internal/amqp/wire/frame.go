package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// ProtocolHeader is the eight bytes a client sends first on an AMQP 0-9-1
// connection, and the bytes a server answers a wrong header with before
// closing the socket.
const ProtocolHeader = "AMQP\x00\x00\x09\x01"

// FrameOverhead is the bytes a frame adds around its payload: type (1),
// channel (2), size (4) and frame-end (1). frame_max counts them, so a body
// frame under frame_max F carries at most F-FrameOverhead bytes of body.
const FrameOverhead = 8

// heartbeatFrame is the only valid heartbeat (errata §12): type 8, channel
// 0, empty payload.
const heartbeatFrame = "\x08\x00\x00\x00\x00\x00\x00\xce"

// readChunk bounds how much ReadFrame allocates ahead of the bytes that have
// actually arrived, so a size field claiming 4 GiB (with frame_max 0, or a
// generous one) cannot make it allocate 4 GiB up front.
const readChunk = 1 << 20

// Frame is one AMQP frame. For method frames Payload is class id, method id
// and arguments (see ParseMethod); for header frames it is a content header
// (see ParseContentHeader); for body frames, a slice of the message body;
// heartbeats have none.
type Frame struct {
	Type    uint8 // FrameMethod, FrameHeader, FrameBody or FrameHeartbeat
	Channel uint16
	Payload []byte
}

// Heartbeat returns the heartbeat frame: type 8 on channel 0, no payload.
func Heartbeat() Frame { return Frame{Type: FrameHeartbeat} }

// ReadProtocolHeader reads the eight-byte protocol header a client opens a
// connection with. It returns nil for ProtocolHeader, an error wrapping
// ErrBadProtocolHeader (quoting the bytes) for anything else, and the read
// error (io.EOF, io.ErrUnexpectedEOF, …) if eight bytes do not arrive.
//
// On ErrBadProtocolHeader the server must write ProtocolHeader and close the
// connection; the spec has no connection.close for this case.
func ReadProtocolHeader(r io.Reader) error {
	var b [len(ProtocolHeader)]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	if string(b[:]) != ProtocolHeader {
		return fmt.Errorf("%w: got %q", ErrBadProtocolHeader, b[:])
	}
	return nil
}

// ReadFrame reads one frame:
//
//	 0      1         3             7                  7+size     8+size
//	+------+---------+-------------+--------------------+-----------+
//	| type | channel |    size     |      payload       | frame-end |
//	+------+---------+-------------+--------------------+-----------+
//	 octet   short       long         size octets          0xCE
//
// maxSize is the negotiated frame_max, which counts the whole frame (payload
// plus FrameOverhead); 0 means no limit. A frame is checked in this order,
// and each failure is fatal to the connection (501 FRAME_ERROR, see
// ReplyCodeFor):
//
//   - type not FrameMethod, FrameHeader, FrameBody or FrameHeartbeat:
//     ErrUnknownFrameType (before the payload is read);
//   - size+FrameOverhead > maxSize: ErrFrameTooLarge (before the payload is
//     read, so nothing is allocated for it);
//   - the octet after the payload is not 0xCE: ErrBadFrameEnd;
//   - a heartbeat with a payload: ErrMalformedFrame.
//
// ReadFrame checks nothing else: the channel of a heartbeat (505 in
// RabbitMQ) and the shape of method and header payloads are left to
// ParseMethod, ParseContentHeader and the connection layer.
//
// It returns io.EOF only when the stream ends cleanly before a frame starts,
// and io.ErrUnexpectedEOF when it ends inside one. The payload is a fresh
// slice the caller owns; memory grows with the bytes received, not with the
// size field.
func ReadFrame(r *bufio.Reader, maxSize uint32) (Frame, error) {
	var h [7]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: h[0], Channel: binary.BigEndian.Uint16(h[1:3])}
	size := binary.BigEndian.Uint32(h[3:7])
	switch f.Type {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		return Frame{}, fmt.Errorf("%w: %d", ErrUnknownFrameType, f.Type)
	}
	if maxSize != 0 && uint64(size)+FrameOverhead > uint64(maxSize) {
		return Frame{}, fmt.Errorf("%w: %d payload bytes + %d > frame_max %d", ErrFrameTooLarge, size, FrameOverhead, maxSize)
	}
	p, err := readPayload(r, size)
	if err != nil {
		return Frame{}, err
	}
	end, err := r.ReadByte()
	if err != nil {
		return Frame{}, unexpected(err)
	}
	if end != FrameEnd {
		return Frame{}, fmt.Errorf("%w: got 0x%02X", ErrBadFrameEnd, end)
	}
	if f.Type == FrameHeartbeat && size != 0 {
		return Frame{}, fmt.Errorf("%w: heartbeat with %d payload bytes", ErrMalformedFrame, size)
	}
	if size > 0 {
		f.Payload = p
	}
	return f, nil
}

// readPayload reads n bytes, allocating at most readChunk bytes beyond what
// has arrived.
func readPayload(r io.Reader, n uint32) ([]byte, error) {
	if n <= readChunk {
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, unexpected(err)
		}
		return p, nil
	}
	var p []byte
	for uint32(len(p)) < n {
		k := min(n-uint32(len(p)), readChunk)
		p = append(p, make([]byte, k)...)
		if _, err := io.ReadFull(r, p[len(p)-int(k):]); err != nil {
			return nil, unexpected(err)
		}
	}
	return p, nil
}

// unexpected turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrame appends f in wire form to dst. It fails for an unknown frame
// type or a payload longer than a u32 can count; it does not know frame_max,
// which the caller must respect (WriteContent splits bodies for it).
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	switch f.Type {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		return dst, fmt.Errorf("%w: %d", ErrUnknownFrameType, f.Type)
	}
	if uint64(len(f.Payload)) > math.MaxUint32-FrameOverhead {
		return dst, fmt.Errorf("%w: frame payload of %d bytes", ErrFieldTooLong, len(f.Payload))
	}
	dst = append(dst, f.Type)
	dst = binary.BigEndian.AppendUint16(dst, f.Channel)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(f.Payload)))
	dst = append(dst, f.Payload...)
	return append(dst, FrameEnd), nil
}

// WriteFrame writes f to w, with the same checks as AppendFrame. It makes
// three small writes (header, payload, end), so w should be buffered; it
// does not flush. Callers sharing w between goroutines must serialise whole
// frames themselves.
func WriteFrame(w *bufio.Writer, f Frame) error {
	if f.Type == FrameHeartbeat && f.Channel == 0 && len(f.Payload) == 0 {
		_, err := w.WriteString(heartbeatFrame)
		return err
	}
	var h [FrameOverhead]byte
	hb, err := AppendFrame(h[:0], Frame{Type: f.Type, Channel: f.Channel})
	if err != nil {
		return err
	}
	if uint64(len(f.Payload)) > math.MaxUint32-FrameOverhead {
		return fmt.Errorf("%w: frame payload of %d bytes", ErrFieldTooLong, len(f.Payload))
	}
	binary.BigEndian.PutUint32(hb[3:7], uint32(len(f.Payload)))
	if _, err := w.Write(hb[:7]); err != nil {
		return err
	}
	if _, err := w.Write(f.Payload); err != nil {
		return err
	}
	return w.WriteByte(FrameEnd)
}
