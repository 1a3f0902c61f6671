package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"time"
)

// Options configure a Worker. Start from DefaultOptions and change what
// you need: New refuses Options that did not come from DefaultOptions,
// because two of the defaults (UnknownIsTransient, PanicIsTerminal) are
// true and a zero Options would silently flip them.
type Options struct {
	// Concurrency is how many handlers run at once. Default 10.
	Concurrency int
	// Prefetch is the most messages asked for per receive (1–10, the SQS
	// maximum). The worker only receives as many as it has idle handlers,
	// so no message waits leased in a buffer. Default 10.
	Prefetch int
	// ShutdownTimeout is how long in-flight handlers may run after the
	// context passed to Run is cancelled. Then their context is cancelled
	// and their messages are released for immediate redelivery. Default
	// 30 s.
	ShutdownTimeout time.Duration

	// UnknownIsTransient decides errors that nothing classifies (no
	// Terminal/Transient mark, no Classifier verdict, not a timeout).
	// Default true: such a message is retried with backoff until the
	// queue's maxReceiveCount dead-letters it. The practice sources
	// disagree: treating unknown errors as terminal keeps bugs from
	// burning retries and load, and the DLQ shows a misclassification
	// within minutes; treating them as transient keeps a gateway blip from
	// flooding the DLQ. The default follows what a plain nack or an SQS
	// lease expiry already means, bounded by maxReceiveCount. Set false
	// for consumers whose downstream errors are all explicitly marked.
	UnknownIsTransient bool
	// PanicIsTerminal decides recovered panics. Default true: a panic is
	// almost always a bug that the same input triggers again, so retrying
	// only repeats it; the message goes to the DLQ at once with the stack.
	PanicIsTerminal bool
	// Classifier classifies errors that were not marked with Terminal,
	// Transient or RetryAfter. nil: none.
	Classifier Classifier

	// Backoff is the client-side retry delay for transient failures, used
	// when the broker has no retry policy for the queue (plain SQS, or a
	// Sluice queue without SluiceRetryPolicy).
	Backoff Backoff
	// RetryBudget limits early retries; see RetryBudget.
	RetryBudget RetryBudget
	// Breaker pauses receiving while most deliveries fail transiently.
	Breaker Breaker

	// Deduper, when set, skips messages already processed. nil: off.
	Deduper Deduper
	// KeyFunc derives the idempotency key. nil: DefaultKey.
	KeyFunc KeyFunc

	// Metrics receives events. nil: NopMetrics.
	Metrics Metrics
	// Logger receives structured logs. nil: discard.
	Logger *slog.Logger

	// ConsumerID identifies this process in failure reports. Default
	// "hostname/pid".
	ConsumerID string
	// Version is the consumer version in failure reports. Default: the
	// main module's version from the build info (with its VCS revision
	// when the version is "(devel)").
	Version string

	fromDefaults bool
}

// Backoff is exponential backoff with full jitter: the delay before
// attempt n+1 is uniform(0, min(Cap, Base·2^(n-1))).
type Backoff struct {
	Base time.Duration // default 1 s
	Cap  time.Duration // default 30 s; required
}

// Delay returns the delay after the given attempt (1-based).
func (b Backoff) Delay(attempt int) time.Duration {
	return rand.N(b.ceiling(attempt) + 1)
}

// ceiling is min(Cap, Base·2^(attempt-1)).
func (b Backoff) ceiling(attempt int) time.Duration {
	d := b.Base
	for i := 1; i < attempt && d < b.Cap; i++ {
		d *= 2
	}
	return min(d, b.Cap)
}

// DefaultOptions returns the defaults documented on each field.
func DefaultOptions() Options {
	return Options{
		Concurrency:        10,
		Prefetch:           10,
		ShutdownTimeout:    30 * time.Second,
		UnknownIsTransient: true,
		PanicIsTerminal:    true,
		Backoff:            Backoff{Base: time.Second, Cap: 30 * time.Second},
		RetryBudget:        RetryBudget{Ratio: 0.2, MinRetries: 10, Window: 30 * time.Second},
		Breaker:            Breaker{Threshold: 0.5, MinAttempts: 20, Window: 10 * time.Second, OpenFor: 5 * time.Second},
		fromDefaults:       true,
	}
}

// Validate reports the first invalid option.
func (o *Options) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("worker: "+f, a...) }
	switch {
	case !o.fromDefaults:
		return bad("Options must start from DefaultOptions()")
	case o.Concurrency < 1:
		return bad("Concurrency must be at least 1, got %d", o.Concurrency)
	case o.Prefetch < 1 || o.Prefetch > 10:
		return bad("Prefetch must be 1–10, got %d", o.Prefetch)
	case o.ShutdownTimeout < 0:
		return bad("ShutdownTimeout must not be negative")
	case o.Backoff.Base <= 0 || o.Backoff.Cap < o.Backoff.Base:
		return bad("Backoff needs 0 < Base ≤ Cap, got %v and %v", o.Backoff.Base, o.Backoff.Cap)
	case !o.RetryBudget.Disabled && (o.RetryBudget.Ratio < 0 || o.RetryBudget.Ratio > 1 || o.RetryBudget.Window <= 0 || o.RetryBudget.MinRetries < 0):
		return bad("RetryBudget needs 0 ≤ Ratio ≤ 1, Window > 0 and MinRetries ≥ 0")
	case !o.Breaker.Disabled && (o.Breaker.Threshold <= 0 || o.Breaker.Threshold > 1 || o.Breaker.MinAttempts < 1 || o.Breaker.Window <= 0 || o.Breaker.OpenFor <= 0):
		return bad("Breaker needs 0 < Threshold ≤ 1, MinAttempts ≥ 1, Window > 0 and OpenFor > 0")
	}
	return nil
}

// Worker consumes a Source with a Handler. Create it with New, start it
// with Run; Stats and BreakerState may be called at any time.
type Worker struct {
	src     Source
	h       Handler
	opts    Options
	log     *slog.Logger
	metrics Metrics
	keyFn   KeyFunc
	now     func() time.Time

	budget  *budget
	breaker *breaker
	stats   counters

	mu      sync.Mutex
	running bool
	live    map[*delivery]struct{} // deliveries being handled
}

// New returns a Worker, or the first invalid option.
func New(src Source, h Handler, opts Options) (*Worker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if src == nil || h == nil {
		return nil, errors.New("worker: Source and Handler are required")
	}
	w := &Worker{src: src, h: h, opts: opts, log: opts.Logger, metrics: opts.Metrics, keyFn: opts.KeyFunc,
		now: time.Now, live: map[*delivery]struct{}{}}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.metrics == nil {
		w.metrics = NopMetrics{}
	}
	if w.keyFn == nil {
		w.keyFn = DefaultKey
	}
	if w.opts.ConsumerID == "" {
		host, _ := os.Hostname()
		w.opts.ConsumerID = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if w.opts.Version == "" {
		w.opts.Version = buildVersion()
	}
	w.budget = newBudget(opts.RetryBudget)
	w.breaker = newBreaker(opts.Breaker, w.now, func(from, to BreakerState) {
		if to == BreakerOpen {
			w.stats.breakerOpens.Add(1)
		}
		switch to {
		case BreakerOpen:
			// The log line an operator finds when the worker "stalls":
			// say why and what to do.
			w.log.Warn("circuit breaker open: receiving paused; most recent attempts failed transiently (is a downstream down?)",
				"from", from.String(), "to", to.String(), "threshold", w.opts.Breaker.Threshold, "window", w.opts.Breaker.Window,
				"probe_after", w.opts.Breaker.OpenFor,
				"hint", "failures caused by the message itself should be worker.Terminal; tune Options.Breaker (docs/worker.md, Circuit breaker)")
		case BreakerHalfOpen:
			w.log.Info("circuit breaker half-open: probing with one message", "from", from.String(), "to", to.String())
		default:
			w.log.Info("circuit breaker closed: receiving again", "from", from.String(), "to", to.String())
		}
		w.metrics.BreakerChanged(from, to)
	})
	return w, nil
}

// Run is New followed by Worker.Run.
func Run(ctx context.Context, src Source, h Handler, opts Options) error {
	w, err := New(src, h, opts)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats { return w.stats.snapshot() }

// BreakerState returns the circuit breaker's state.
func (w *Worker) BreakerState() BreakerState { return w.breaker.State() }

// settleTimeout bounds each call that settles a delivery.
const settleTimeout = 30 * time.Second

// Run receives and handles messages until ctx is cancelled, then shuts
// down: it stops receiving, lets in-flight handlers finish for up to
// ShutdownTimeout (their leases still extended), then cancels the
// handlers' context and releases their messages for immediate redelivery.
// No message is lost: each one received is acked, failed, released, or at
// worst (a receive cut short by the cancellation) redelivered when its
// lease runs out. Run returns nil after a shutdown caused by ctx, or the
// error of a Receive that the Source marked terminal (e.g. the queue does
// not exist), after the same shutdown. A Worker runs once.
//
// Run returns even when a handler ignores its cancelled context; such a
// handler's result is discarded.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	w.running = true
	w.mu.Unlock()

	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	slots := make(chan struct{}, w.opts.Concurrency)
	var handlers, pollers sync.WaitGroup
	n := min(4, max(1, (w.opts.Concurrency+w.opts.Prefetch-1)/w.opts.Prefetch))
	for range n {
		pollers.Go(func() {
			if err := w.poll(rctx, hctx, slots, &handlers); err != nil {
				stop(err)
			}
		})
	}
	w.log.Info("worker started", "concurrency", w.opts.Concurrency, "prefetch", w.opts.Prefetch, "pollers", n,
		"consumer_id", w.opts.ConsumerID, "version", w.opts.Version)
	<-rctx.Done()
	pollers.Wait()
	err := context.Cause(rctx)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}

	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	timer := time.NewTimer(w.opts.ShutdownTimeout)
	defer timer.Stop()
	w.log.Info("worker stopping", "in_flight", w.stats.inFlight.Load())
	select {
	case <-done:
	case <-timer.C:
		w.releaseAll(hctx)
		hcancel()
	}
	w.log.Info("worker stopped", "processed", w.stats.processed.Load(), "released", w.stats.released.Load())
	return err
}

// releaseAll settles every delivery still being handled by handing it back
// to the broker. Each is claimed first, so its handler, when it returns,
// does nothing more.
func (w *Worker) releaseAll(ctx context.Context) {
	w.mu.Lock()
	var ds []*delivery
	for d := range w.live {
		if d.claim() {
			ds = append(ds, d)
		}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, settleTimeout)
			defer cancel()
			if err := w.src.Release(sctx, d.m); err != nil {
				w.log.Warn("could not release message at shutdown; it is redelivered when its lease ends",
					"msg_id", d.m.ID, "err", err)
				return
			}
			w.stats.released.Add(1)
			w.metrics.Released()
			w.log.Info("released message at shutdown", "msg_id", d.m.ID)
		})
	}
	wg.Wait()
}

// poll receives for idle handler slots until ctx is done.
func (w *Worker) poll(ctx, hctx context.Context, slots chan struct{}, handlers *sync.WaitGroup) error {
	var errDelay time.Duration
	for ctx.Err() == nil {
		want, probe, err := w.breaker.acquire(ctx, w.opts.Prefetch)
		if err != nil {
			return nil
		}
		k := acquireSlots(ctx, slots, want)
		if k == 0 {
			if probe {
				w.breaker.cancelProbe()
			}
			return nil
		}
		msgs, err := w.src.Receive(ctx, k)
		w.stats.receives.Add(1)
		for range k - len(msgs) {
			<-slots
		}
		if probe && len(msgs) == 0 {
			w.breaker.cancelProbe()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrTerminal) {
				w.log.Error("receive failed; stopping", "err", err)
				return err
			}
			errDelay = min(max(2*errDelay, 100*time.Millisecond), 5*time.Second)
			w.log.Warn("receive failed; retrying", "err", err, "delay", errDelay)
			sleep(ctx, rand.N(errDelay)+errDelay/2)
			continue
		}
		errDelay = 0
		if len(msgs) > 0 {
			w.stats.received.Add(uint64(len(msgs)))
			w.metrics.Received(len(msgs))
		}
		for i, m := range msgs {
			d := newDelivery(m, probe && i == 0)
			w.track(d)
			handlers.Go(func() {
				defer func() { <-slots }()
				defer w.untrack(d)
				w.process(hctx, d)
			})
		}
	}
	return nil
}

// acquireSlots takes one handler slot, waiting for it, and then up to n-1
// more that are free now. It returns how many it took (0 when ctx ended).
func acquireSlots(ctx context.Context, slots chan struct{}, n int) int {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	k := 1
	for k < n {
		select {
		case slots <- struct{}{}:
			k++
		default:
			return k
		}
	}
	return k
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// delivery is a message being handled. Whoever claims it first (its
// handler's result, or the shutdown release) settles it; heartbeats hold
// its lock while extending, so no extension can land after a settlement.
type delivery struct {
	m       *Message
	probe   bool
	mu      sync.Mutex
	settled bool
	done    chan struct{} // closed by claim
}

func newDelivery(m *Message, probe bool) *delivery {
	return &delivery{m: m, probe: probe, done: make(chan struct{})}
}

func (d *delivery) claim() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return false
	}
	d.settled = true
	close(d.done)
	return true
}

func (w *Worker) track(d *delivery) {
	w.stats.inFlight.Add(1)
	w.mu.Lock()
	w.live[d] = struct{}{}
	w.mu.Unlock()
}

func (w *Worker) untrack(d *delivery) {
	w.mu.Lock()
	delete(w.live, d)
	w.mu.Unlock()
	w.stats.inFlight.Add(-1)
}

// heartbeat extends d's lease every half lease until d is settled.
func (w *Worker) heartbeat(d *delivery) {
	lease := d.m.Lease
	if lease <= 0 {
		return
	}
	t := time.NewTicker(lease / 2)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.mu.Lock()
		if d.settled {
			d.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), lease/2)
		err := w.src.Extend(ctx, d.m)
		cancel()
		d.mu.Unlock()
		switch {
		case errors.Is(err, ErrLeaseLost):
			w.log.Warn("lease lost while the handler runs; the message may be handled twice", "msg_id", d.m.ID, "err", err)
			return
		case err != nil:
			w.log.Warn("could not extend lease", "msg_id", d.m.ID, "err", err)
		default:
			w.log.Debug("lease extended", "msg_id", d.m.ID, "by", lease)
		}
	}
}

// process handles one delivery and settles it.
func (w *Worker) process(hctx context.Context, d *delivery) {
	m := d.m
	go w.heartbeat(d)
	key := ""
	var err error
	if w.opts.Deduper != nil {
		key = w.keyFn(m)
		seen, serr := w.opts.Deduper.Seen(hctx, key)
		switch {
		case serr != nil:
			err = Transient(fmt.Errorf("worker: deduper: %w", serr))
		case seen:
			w.duplicate(d, key)
			return
		}
	}
	start := w.now()
	if err == nil {
		err = w.call(hctx, m)
	}
	latency := w.now().Sub(start)
	w.metrics.HandlerLatency(latency)
	if !d.claim() {
		return // released at shutdown
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), settleTimeout)
	defer cancel()
	if err == nil {
		w.succeeded(sctx, d, key, latency)
		return
	}
	w.failed(sctx, d, err)
}

// call runs the handler, turning a panic into a *PanicError.
func (w *Worker) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return w.h.Handle(ctx, m)
}

func (w *Worker) duplicate(d *delivery, key string) {
	if !d.claim() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	w.stats.duplicates.Add(1)
	w.metrics.Duplicate()
	w.breaker.record(d.probe, false, true)
	w.log.Info("duplicate skipped", "msg_id", d.m.ID, "key", key, "attempt", d.m.Attempt)
	if err := w.src.Ack(ctx, d.m); err != nil {
		w.log.Warn("could not ack duplicate", "msg_id", d.m.ID, "err", err)
	}
}

func (w *Worker) succeeded(ctx context.Context, d *delivery, key string, latency time.Duration) {
	m := d.m
	if w.opts.Deduper != nil {
		if err := w.opts.Deduper.Mark(ctx, key); err != nil {
			w.log.Warn("deduper could not mark a processed message; a redelivery would run it again",
				"msg_id", m.ID, "key", key, "err", err)
		}
	}
	if err := w.src.Ack(ctx, m); err != nil {
		w.log.Warn("processed, but the ack failed; the message will be delivered again", "msg_id", m.ID, "err", err)
	}
	w.stats.processed.Add(1)
	w.metrics.Processed()
	w.budget.attempt(w.now())
	w.breaker.record(d.probe, false, false)
	w.log.Debug("processed", "msg_id", m.ID, "attempt", m.Attempt, "latency", latency)
}

func (w *Worker) failed(ctx context.Context, d *delivery, err error) {
	m := d.m
	class, after, hasAfter := w.classify(err)
	f := Failure{
		ErrorClass:      truncate(errorClass(err), 256),
		ErrorMessage:    truncate(err.Error(), MaxErrorMessage),
		Trace:           errorTrace(err),
		ConsumerID:      w.opts.ConsumerID,
		ConsumerVersion: w.opts.Version,
	}
	now := w.now()
	w.stats.failed.Add(1)
	w.metrics.Failed(class)
	w.budget.attempt(now)
	log := w.log.With("msg_id", m.ID, "attempt", m.Attempt, "class", class.String(), "error_class", f.ErrorClass, "err", err)

	var out Outcome
	var serr error
	if class == ClassTerminal {
		w.stats.terminal.Add(1)
		w.breaker.record(d.probe, false, true)
		f.Terminal = true
		out, serr = w.src.Fail(ctx, m, f)
		if errors.Is(serr, ErrNoDeadLetterQueue) {
			log.Error("terminal failure on a queue without a dead-letter queue: the message is kept and retried after the longest backoff; attach a DLQ")
			f.Terminal, f.Backoff, f.Hold = false, w.opts.Backoff.Cap, true
			out, serr = w.src.Fail(ctx, m, f)
		}
	} else {
		w.breaker.record(d.probe, true, false)
		if w.budget.allow(now) {
			f.Backoff = w.opts.Backoff.Delay(m.Attempt)
			if hasAfter {
				f.Backoff, f.Hold = after, true
			}
			w.stats.retried.Add(1)
			w.metrics.Retried(f.Backoff)
		} else {
			f.Backoff, f.Hold = m.Lease, true
			if f.Backoff <= 0 {
				f.Backoff = w.opts.Backoff.Cap
			}
			w.stats.deferred.Add(1)
			w.metrics.Deferred()
			log.Info("retry budget spent: the message waits out a whole lease", "delay", f.Backoff)
		}
		out, serr = w.src.Fail(ctx, m, f)
	}
	switch {
	case serr != nil:
		log.Warn("handler failed and the failure could not be settled; the message is redelivered when its lease ends",
			"settle_err", serr)
	case out.DeadLettered:
		w.stats.deadLettered.Add(1)
		w.metrics.DeadLettered()
		log.Warn("handler failed; message dead-lettered", "target", out.Target, "reported", out.Reported)
	default:
		log.Warn("handler failed; message will be retried", "visible_at", out.VisibleAt, "reported", out.Reported)
	}
}

// buildVersion is the main module's version, or its VCS revision for a
// development build.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return "devel-" + truncate(s.Value, 12)
			}
		}
		if v == "" {
			v = "unknown"
		}
	}
	return v
}
