package amqp

import (
	"bytes"
	"regexp"
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

// Buffers come back from the pool at least as large as asked, empty, and
// only pooled capacities are kept.
func TestFrameBufs(t *testing.T) {
	var p frameBufs
	for _, n := range []int{1, 511, 512, 513, 1200, 65536} {
		b, ok := p.get(n)
		if !ok || len(*b) != 0 || cap(*b) < n || cap(*b) > 2*max(n, 512) {
			t.Fatalf("get(%d): len %d cap %d pooled %v", n, len(*b), cap(*b), ok)
		}
		*b = append(*b, "dirty"...)
		p.put(b)
		again, _ := p.get(n)
		if len(*again) != 0 || cap(*again) < n {
			t.Fatalf("get(%d) after put: len %d cap %d", n, len(*again), cap(*again))
		}
	}
	if b, ok := p.get(65537); ok || cap(*b) < 65537 {
		t.Fatalf("get(65537): pooled %v cap %d", ok, cap(*b))
	}
	if b, ok := p.get(0); ok || b == nil {
		t.Fatalf("get(0): pooled %v", ok)
	}
	odd := make([]byte, 0, 1000)
	p.put(&odd) // not a pooled capacity: dropped
	for range 100 {
		if b, _ := p.get(1000); cap(*b) == 1000 {
			t.Fatal("a buffer of a capacity the pool does not make came back")
		}
	}
}

// The patterns matchesAnything treats as "everything" must match every
// name the regexp would be asked about, and the shortcut must not widen
// any other pattern.
func TestPermissionShortcut(t *testing.T) {
	names := []string{"", "q", "a\nb", "\n", "\x00\xff", "amq.gen-x", "名前", strings.Repeat("z", 255)}
	for _, src := range []string{".*", "^.*", ".*$", "(.*)"} {
		if !matchesAnything(src) {
			t.Fatalf("%q not recognised", src)
		}
		re := regexp.MustCompile(src)
		for _, n := range names {
			if !re.MatchString(n) {
				t.Fatalf("%q does not match %q: the shortcut would allow what the regexp refuses", src, n)
			}
		}
	}
	for _, src := range []string{"^.*$", "^$", "^q", "", ".+"} {
		if matchesAnything(src) {
			t.Fatalf("%q taken as matching everything", src)
		}
	}
	u, err := compileUser(User{Name: "u", Password: "p", Permissions: map[string]Permission{
		"/": {Configure: "^own-", Write: ".*", Read: "^.*$"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind int
		name string
		want bool
	}{
		{permConfigure, "own-q", true}, {permConfigure, "q", false},
		{permWrite, "a\nb", true}, {permWrite, "", true},
		{permRead, "q", true}, {permRead, "a\nb", false},
	} {
		if got := u.allowed("/", c.kind, c.name); got != c.want {
			t.Errorf("allowed(%d, %q) = %v, want %v", c.kind, c.name, got, c.want)
		}
	}
	if u.allowed("other", permWrite, "q") {
		t.Error("a vhost without permissions allowed a write")
	}
}
