package bench

// Message body layout. Every body starts with a fixed-width printable prefix
// (bodies must be valid XML characters, so no binary):
//
//	offset 0      4         12 13               29 30
//	       "SB1." <run:8hex> "." <stamp:16hex>    "." filler 'x' up to Size
//
// run is a random id of this RunSQS call, so messages left in the queue by an
// earlier run are recognised, deleted and not counted. stamp is the send time
// in nanoseconds since the run's start on the monotonic clock: producers and
// consumers share one process, so receive − send is an exact end-to-end
// latency with no wall-clock skew.
const (
	bodyMagic = "SB1."
	runOff    = 4
	stampOff  = 13
	// PrefixLen is the length of the body prefix and so the smallest -size.
	PrefixLen = 30
)

const hexDigits = "0123456789abcdef"

// putHex writes v as len(dst) lower-case hex digits, most significant first.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// parseHex reads lower- or upper-case hex digits; ok is false on any other
// byte or on an empty input.
func parseHex(b []byte) (v uint64, ok bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// newBody returns a body of size bytes for run with a zero stamp.
func newBody(run uint32, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = 'x'
	}
	copy(b, bodyMagic)
	putHex(b[runOff:runOff+8], uint64(run))
	b[stampOff-1] = '.'
	putHex(b[stampOff:stampOff+16], 0)
	b[PrefixLen-1] = '.'
	return b
}

// bodyStamp is the part of a received body the consumers need. It decodes
// itself from the JSON string without allocating the body.
type bodyStamp struct {
	run   uint32
	stamp int64
	ok    bool
}

// UnmarshalJSON parses the prefix of a JSON string holding a bench body. A
// body that is not one of ours (or is escaped in its prefix) gives ok=false;
// it is not an error, so one foreign message does not fail the response.
func (s *bodyStamp) UnmarshalJSON(raw []byte) error {
	*s = bodyStamp{}
	if len(raw) < PrefixLen+2 || raw[0] != '"' {
		return nil
	}
	b := raw[1:]
	if string(b[:runOff]) != bodyMagic || b[stampOff-1] != '.' || b[PrefixLen-1] != '.' {
		return nil
	}
	run, ok1 := parseHex(b[runOff : runOff+8])
	stamp, ok2 := parseHex(b[stampOff : stampOff+16])
	if !ok1 || !ok2 {
		return nil
	}
	*s = bodyStamp{run: uint32(run), stamp: int64(stamp), ok: true}
	return nil
}
