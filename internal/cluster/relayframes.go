package cluster

import (
	"encoding/binary"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// frameTracker follows the frame boundaries of the leader→client half of
// a relayed AMQP connection, without copying or holding the bytes, so that
// the relay can end the connection with a connection.close of its own,
// between two frames, when the leader goes away (relay.finish).
//
// It knows only the frame envelope: type octet, channel, size, payload and
// the 0xCE end octet; of a method frame on channel 0 it reads the class
// and method ids, to see the leader's own connection.close and
// close-ok. A stream that does not parse as frames (a leader answering a
// bad protocol header with its own) marks it broken for good, and a
// broken tracker is never at a boundary.
type frameTracker struct {
	hdr  [7]byte // the frame header read so far
	hn   int     // octets of hdr read; 0 between frames
	left uint64  // octets of the current frame (payload and end) still to pass; 0 in a header
	pos  uint32  // octets of the current payload passed
	size uint32  // the current frame's payload size
	ids  [4]byte // class and method ids of a channel-0 method frame
	m0   bool    // the current frame is a method on channel 0

	frames int  // complete frames passed
	closed bool // the leader sent connection.close or connection.close-ok
	broken bool // the stream is not AMQP frames
}

// feed passes p, the next octets of the stream, through the tracker.
func (t *frameTracker) feed(p []byte) {
	for len(p) > 0 && !t.broken {
		if t.left == 0 {
			k := copy(t.hdr[t.hn:], p)
			t.hn += k
			p = p[k:]
			if t.hn < len(t.hdr) {
				return
			}
			t.hn = 0
			typ := t.hdr[0]
			if typ != wire.FrameMethod && typ != wire.FrameHeader && typ != wire.FrameBody && typ != wire.FrameHeartbeat {
				t.broken = true
				return
			}
			t.size = binary.BigEndian.Uint32(t.hdr[3:7])
			t.left = uint64(t.size) + 1
			t.pos = 0
			t.m0 = typ == wire.FrameMethod && binary.BigEndian.Uint16(t.hdr[1:3]) == 0
			continue
		}
		k := min(t.left, uint64(len(p)))
		for i := uint64(0); t.m0 && i < k && t.pos < 4 && t.pos < t.size; i++ {
			t.ids[t.pos] = p[i]
			t.pos++
		}
		t.left -= k
		if t.left == 0 {
			if p[k-1] != wire.FrameEnd {
				t.broken = true
				return
			}
			t.frames++
			if t.m0 && t.size >= 4 && binary.BigEndian.Uint16(t.ids[0:2]) == wire.ClassConnection {
				switch binary.BigEndian.Uint16(t.ids[2:4]) {
				case wire.MethodConnectionClose, wire.MethodConnectionCloseOK:
					t.closed = true
				}
			}
		}
		p = p[k:]
	}
}

// canClose reports whether a connection.close written now would reach the
// client whole, between two frames, on a connection the leader has opened
// (its connection.start passed) and not already begun to close.
func (t *frameTracker) canClose() bool {
	return !t.broken && !t.closed && t.frames > 0 && t.hn == 0 && t.left == 0
}
