// Package httpbody reads HTTP request bodies into memory without letting a
// client decide how much memory that takes.
//
// Two rules, both learned from a flood of requests that declared a 5 MiB
// Content-Length and then sent nothing:
//
//   - A buffer is never sized from a length the client declares. It starts
//     small and doubles as bytes actually arrive, so memory follows what
//     was received, not what was promised.
//   - Every byte of buffer capacity is first taken from a Budget shared by
//     all requests in flight. When the budget is spent, a request waits a
//     short while for other requests to finish and then fails with ErrBusy
//     (the front-ends answer 503, which SDKs retry), so the total memory
//     held by request bodies has a ceiling whatever the clients do.
//
// A body read by an outer handler (SigV4 hashes it before the SQS handler
// decodes it) is handed on in the request context (WithBody, FromContext)
// so it is read, and budgeted, once.
package httpbody

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
)

// Errors from Read.
var (
	// ErrBusy: the shared budget stayed spent for the whole wait. Retry.
	ErrBusy = errors.New("httpbody: request buffer budget exhausted")
	// ErrTooLarge: the body is longer than the per-request maximum.
	ErrTooLarge = errors.New("httpbody: request body too large")
)

// Defaults for NewBudget.
const (
	// DefaultLimit bounds the bytes buffered across all requests in
	// flight: 64 requests at the 5 MiB SQS maximum, far more small ones.
	DefaultLimit = 256 << 20
	// DefaultWait is how long a request waits for budget before ErrBusy.
	DefaultWait = 2 * time.Second
	// firstChunk is the first buffer's size: most SQS requests fit.
	firstChunk = 4 << 10
)

// Budget is a byte budget shared by concurrent body reads. A nil *Budget
// is unlimited (buffers still grow only as bytes arrive). Safe for
// concurrent use.
type Budget struct {
	limit int64
	wait  time.Duration
	clk   clock.Clock

	mu   sync.Mutex
	used int64
	// freed is closed (and replaced) when bytes are released while
	// readers wait for room (waiters counts them); a release nobody waits
	// for leaves it alone, so the common case allocates no channel.
	freed   chan struct{}
	waiters int

	// scratchBufs holds *[]byte scratch buffers of up to maxScratch
	// bytes for Read to reuse. Idle ones are not budgeted: there are at
	// most a few per CPU, and the GC empties the pool.
	scratchBufs sync.Pool
}

// NewBudget returns a budget of limit bytes (<= 0: DefaultLimit) whose
// readers wait up to wait (<= 0: DefaultWait) for room. clk may be nil.
func NewBudget(limit int64, wait time.Duration, clk clock.Clock) *Budget {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if wait <= 0 {
		wait = DefaultWait
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Budget{limit: limit, wait: wait, clk: clk, freed: make(chan struct{})}
}

// Limit is the budget's size in bytes (0 for a nil budget: unlimited).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// InUse is the number of bytes currently held by readers.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// acquire takes n bytes, waiting (up to the budget's wait, or until ctx
// ends) for other readers to release some. A request larger than the
// whole budget can never be satisfied and fails at once.
func (b *Budget) acquire(ctx context.Context, n int64) error {
	if b == nil {
		return nil
	}
	if n > b.limit {
		return ErrBusy
	}
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		b.waiters++
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			timer = b.clk.NewTimer(b.wait)
		}
		busy := false
		select {
		case <-freed:
		case <-timer.C():
			busy = true
		case <-ctx.Done():
			busy = true
		}
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
		if busy {
			return ErrBusy
		}
	}
}

func (b *Budget) release(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.waiters > 0 {
		// Every waiter took b.freed under b.mu when it counted itself.
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// holding is what a successful Read still holds of the budget; its release
// gives it back once, however often it is called.
type holding struct {
	b *Budget
	n atomic.Int64
}

func (h *holding) release() {
	if n := h.n.Swap(0); n != 0 {
		h.b.release(n)
	}
}

// Read reads r to its end into memory, at most max bytes, taking the
// buffer's capacity from the budget as it grows. It returns the body and a
// release function that gives the capacity back; call it once the body is
// no longer being decoded (the bytes may live on, referenced by what was
// decoded, but they are no longer "in flight"). On error nothing is held
// and release is a no-op.
//
// The bytes arrive in a scratch buffer that grows (and is budgeted) as
// they do, and the body is then copied into an allocation of exactly its
// length: the returned body is the caller's, never reused, and a 10 KiB
// body costs 10 KiB rather than the 4 + 8 + 16 KiB of a buffer doubled
// in place (request bodies were 38% of the bytes the SQS server allocated).
// A budget keeps scratch buffers of up to maxScratch bytes for reuse.
func (b *Budget) Read(ctx context.Context, r io.Reader, max int64) (body []byte, release func(), err error) {
	// held counts the bytes taken so far, given back on error. (A plain
	// local, not a closure: a successful read allocates only the body,
	// its holding and the release func.)
	held := int64(0)
	limit := int64(firstChunk) // bytes of buf budgeted, and so readable
	if limit > max+1 {
		limit = max + 1
	}
	if err := b.acquire(ctx, limit); err != nil {
		return nil, func() {}, err
	}
	held = limit
	sp := b.scratch(int(limit))
	buf := *sp
	defer func() { *sp = buf; b.keep(sp) }()
	for {
		n, rerr := r.Read(buf[len(buf):limit])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			b.release(held)
			return nil, func() {}, ErrTooLarge
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			b.release(held)
			return nil, func() {}, rerr
		}
		if int64(len(buf)) < limit {
			continue
		}
		// Full: double, but never past max+1 (one byte more than the
		// cap is enough to see that a body is too long).
		grow := limit
		if limit+grow > max+1 {
			grow = max + 1 - limit
		}
		if int64(cap(buf)) >= limit+grow {
			// The scratch buffer has the room already.
			if err := b.acquire(ctx, grow); err != nil {
				b.release(held)
				return nil, func() {}, err
			}
		} else {
			// The old buffer is held while the new one is filled in.
			if err := b.acquire(ctx, limit+grow); err != nil {
				b.release(held)
				return nil, func() {}, err
			}
			next := make([]byte, len(buf), limit+grow)
			copy(next, buf)
			b.release(limit)
			buf = next
		}
		held += grow
		limit += grow
	}
	body = make([]byte, len(buf))
	copy(body, buf)
	// From here the budget holds the body, not the scratch buffer.
	b.release(held - int64(len(body)))
	if b == nil || len(body) == 0 {
		return body, func() {}, nil
	}
	h := &holding{b: b}
	h.n.Store(int64(len(body)))
	return body, h.release, nil
}

// maxScratch is the largest scratch buffer a Budget keeps for reuse: one
// SQS batch of ten messages of a few KiB. Larger bodies use a buffer of
// their own.
const maxScratch = 64 << 10

// scratch returns an empty buffer with room for at least n bytes, behind a
// pointer so that giving it back (keep) allocates nothing.
func (b *Budget) scratch(n int) *[]byte {
	if b != nil {
		if p, ok := b.scratchBufs.Get().(*[]byte); ok && cap(*p) >= n {
			*p = (*p)[:0]
			return p
		}
	}
	buf := make([]byte, 0, n)
	return &buf
}

// keep gives a scratch buffer back for reuse. Its contents are never seen
// again: Read copies the body out first.
func (b *Budget) keep(p *[]byte) {
	if b != nil && cap(*p) <= maxScratch {
		*p = (*p)[:0]
		b.scratchBufs.Put(p)
	}
}

type bodyKey struct{}

// WithBody returns r with body recorded as its already-read body, for a
// handler further in that would read r.Body again.
func WithBody(r *http.Request, body []byte) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), bodyKey{}, &body))
}

// FromContext returns a body recorded by WithBody.
func FromContext(ctx context.Context) ([]byte, bool) {
	p, ok := ctx.Value(bodyKey{}).(*[]byte)
	if !ok {
		return nil, false
	}
	return *p, true
}
