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

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed (and replaced) whenever bytes are released
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
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			timer = b.clk.NewTimer(b.wait)
		}
		select {
		case <-freed:
		case <-timer.C():
			return ErrBusy
		case <-ctx.Done():
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
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// Read reads r to its end into memory, at most max bytes, taking the
// buffer's capacity from the budget as it grows. It returns the body and a
// release function that gives the capacity back; call it once the body is
// no longer being decoded (the bytes may live on, referenced by what was
// decoded, but they are no longer "in flight"). On error nothing is held
// and release is a no-op.
func (b *Budget) Read(ctx context.Context, r io.Reader, max int64) (body []byte, release func(), err error) {
	held := int64(0)
	free := func() { b.release(held); held = 0 }
	fail := func(e error) ([]byte, func(), error) { free(); return nil, func() {}, e }

	size := int64(firstChunk)
	if size > max+1 {
		size = max + 1
	}
	if err := b.acquire(ctx, size); err != nil {
		return nil, func() {}, err
	}
	held = size
	buf := make([]byte, 0, size)
	for {
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return fail(ErrTooLarge)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fail(rerr)
		}
		if len(buf) < cap(buf) {
			continue
		}
		// Full: double, but never past max+1 (one byte more than the
		// cap is enough to see that a body is too long).
		grow := int64(cap(buf))
		if int64(cap(buf))+grow > max+1 {
			grow = max + 1 - int64(cap(buf))
		}
		// The old buffer is held while the new one is filled in.
		if err := b.acquire(ctx, int64(cap(buf))+grow); err != nil {
			return fail(err)
		}
		next := make([]byte, len(buf), int64(cap(buf))+grow)
		copy(next, buf)
		b.release(int64(cap(buf)))
		held += grow
		buf = next
	}
	var once sync.Once
	return buf, func() { once.Do(free) }, nil
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
