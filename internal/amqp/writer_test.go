package amqp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// contentSize is the capacity a delivery is encoded into and the room it
// reserves: it must cover the encoding (or every delivery reallocates)
// and not overshoot it by much (the reservation holds the outgoing
// queue's room).
func TestContentSizeFitsTheEncoding(t *testing.T) {
	long := strings.Repeat("k", 255)
	for _, frameMax := range []uint32{wire.FrameMinSize, 131072} {
		c := &conn{frameMax: frameMax}
		chunk := int(frameMax) - wire.FrameOverhead
		for _, n := range []int{0, 1, 1024, chunk - 1, chunk, chunk + 1, 3 * chunk} {
			body := bytes.Repeat([]byte{'b'}, n)
			for _, props := range [][]byte{nil, {0x10, 0, 2}, bytes.Repeat([]byte{1}, 300)} {
				for _, m := range []struct {
					m    wire.Method
					strs int
				}{
					{&wire.BasicDeliver{ConsumerTag: long, DeliveryTag: 1 << 60, Redelivered: true, Exchange: long, RoutingKey: long}, 3 * 255},
					{&wire.BasicDeliver{DeliveryTag: 1}, 0},
					{&wire.BasicGetOK{DeliveryTag: 1, Exchange: long, RoutingKey: "k", MessageCount: 7}, 256},
					{&wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE", Exchange: "x", RoutingKey: long}, 8 + 1 + 255},
				} {
					size := c.contentSize(props, body, m.strs)
					b, err := c.appendContent(make([]byte, 0, size), 1, m.m, props, body)
					if err != nil {
						t.Fatal(err)
					}
					if len(b) > size || size-len(b) > contentMethodFixed {
						t.Errorf("frame_max %d, body %d, props %d, %s: encoded %d bytes, contentSize %d",
							frameMax, n, len(props), m.m.Name(), len(b), size)
					}
				}
			}
		}
	}
}
