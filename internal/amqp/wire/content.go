package wire

import (
	"bufio"
	"fmt"
)

// ContentHeader is the payload of a content header frame, which follows a
// method whose HasContent is true:
//
//	 0          2        4             12           14
//	+----------+--------+-------------+------------+------------------+
//	| class-id | weight |  body-size  | prop-flags | properties ...   |
//	+----------+--------+-------------+------------+------------------+
//	   short     short     longlong      short       present ones only
//
// ClassID must equal the class of the method before it (60, basic) and
// Weight must be 0; checking both is the connection layer's job (RabbitMQ
// answers a mismatch with 505 UNEXPECTED_FRAME or 502).
type ContentHeader struct {
	ClassID    uint16
	Weight     uint16
	BodySize   uint64
	Properties Properties
}

// ParseContentHeader decodes a content header frame's payload. Fewer than
// the 14 bytes up to and including the property flags is ErrMalformedFrame;
// undecodable or trailing property bytes are ErrSyntax. Property flag bits
// 1 and 0 (0 would announce a further flag word, which basic never needs)
// are kept in Properties.Flags but otherwise ignored, as RabbitMQ does.
func ParseContentHeader(payload []byte) (ContentHeader, error) {
	if len(payload) < 14 {
		return ContentHeader{}, fmt.Errorf("%w: content header of %d bytes", ErrMalformedFrame, len(payload))
	}
	d := decoder{buf: payload}
	h := ContentHeader{ClassID: d.short(), Weight: d.short(), BodySize: d.longlong()}
	h.Properties.decode(&d)
	if err := d.finish("content header"); err != nil {
		return ContentHeader{}, err
	}
	return h, nil
}

// AppendContentHeader appends h as a content header frame's payload to
// dst. On error it returns dst unchanged.
func AppendContentHeader(dst []byte, h *ContentHeader) ([]byte, error) {
	e := encoder{buf: dst}
	e.short(h.ClassID)
	e.short(h.Weight)
	e.longlong(h.BodySize)
	h.Properties.encode(&e)
	if e.err != nil {
		return dst, fmt.Errorf("content header: %w", e.err)
	}
	return e.buf, nil
}

// WriteContent writes a content-carrying method with its content on
// channel: the method frame, a content header frame (class of m, weight 0,
// len(body)) and the body split into frames of at most
// frameMax-FrameOverhead bytes. An empty body has no body frames.
// frameMax is the negotiated frame_max, 0 for none. Method and header
// frames are never split (errata §11), so they may exceed frameMax; that
// is the caller's concern (RabbitMQ refuses frame_max below 4096, which
// fits any real header).
//
// It returns an error if m does not carry content, or if frameMax is
// non-zero but too small to carry a byte of body. It does not flush w.
func WriteContent(w *bufio.Writer, channel uint16, frameMax uint32, m Method, props *Properties, body []byte) error {
	if !m.HasContent() {
		return fmt.Errorf("wire: %s does not carry content", m.Name())
	}
	chunk := len(body)
	if frameMax != 0 {
		if frameMax <= FrameOverhead {
			return fmt.Errorf("wire: frame_max %d leaves no room for a body", frameMax)
		}
		chunk = min(chunk, int(frameMax-FrameOverhead))
	}
	// Encode both payloads before writing anything, so an encoding error
	// cannot leave half a message on the stream.
	buf, err := AppendMethod(nil, m)
	if err != nil {
		return err
	}
	split := len(buf)
	class, _ := m.IDs()
	h := ContentHeader{ClassID: class, BodySize: uint64(len(body))}
	if props != nil {
		h.Properties = *props
	}
	if buf, err = AppendContentHeader(buf, &h); err != nil {
		return err
	}
	if err := WriteFrame(w, Frame{Type: FrameMethod, Channel: channel, Payload: buf[:split]}); err != nil {
		return err
	}
	if err := WriteFrame(w, Frame{Type: FrameHeader, Channel: channel, Payload: buf[split:]}); err != nil {
		return err
	}
	for len(body) > 0 {
		n := min(chunk, len(body))
		if err := WriteFrame(w, Frame{Type: FrameBody, Channel: channel, Payload: body[:n]}); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}
