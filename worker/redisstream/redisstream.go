// Package redisstream is the worker SDK's Redis Streams transport: a
// worker.Source over a consumer group, with the poison-message lifecycle
// Redis has no native support for.
//
//   - Deliveries are XREADGROUP reads; the attempt count is the pending
//     entry's delivery count (XPENDING), which Redis keeps.
//   - Crashed consumers' entries, and entries waiting for a retry, are
//     taken over with XAUTOCLAIM once idle for Lease. A retry backoff is an
//     XCLAIM … IDLE (Lease − backoff) JUSTID on the entry, which makes it
//     claimable after the backoff without counting a delivery.
//   - A terminal failure, or a transient one on the last attempt, is
//     MULTI { XADD <stream>.dlq <fields + sluice-* context>; XACK } — one
//     transaction, so the entry is never acknowledged without its DLQ copy.
//   - A lease is extended with XCLAIM … JUSTID by the owner (idle reset,
//     no delivery counted).
//
// DLQ (this package's dlq.Store) peeks with XRANGE and redrives with
// MULTI { XADD <target> *; XDEL <dlq> id }.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
)

// Options configure a Source.
type Options struct {
	Stream   string // required
	Group    string // required; created (from the stream's start, MKSTREAM) when missing
	Consumer string // required; this process's consumer name in the group
	// BodyField is the entry field that holds the message body; the other
	// fields are Message.Attributes. "": "body".
	BodyField string
	// MaxAttempts is how many deliveries an entry gets before it is
	// dead-lettered. 0: 5.
	MaxAttempts int
	// Lease is how long an entry stays with its consumer without an
	// extension before another consumer may take it over (XAUTOCLAIM
	// min-idle). The worker extends it at half. 0: 30 s.
	Lease time.Duration
	// Block is how long one XREADGROUP waits. go-redis cannot interrupt a
	// blocked read, so this bounds how long a shutdown waits for Receive.
	// 0: 1 s.
	Block time.Duration
	// DLQStream is the dead-letter stream. "": Stream + ".dlq".
	DLQStream string
	// Logger receives the source's logs. nil: discard.
	Logger *slog.Logger
}

// Source consumes one stream through one consumer of a group.
type Source struct {
	rdb  *redis.Client
	o    Options
	log  *slog.Logger
	mu   sync.Mutex
	next string // XAUTOCLAIM cursor
}

var _ worker.Source = (*Source)(nil)

// NewSource checks o, creates the group when it does not exist, and
// returns the Source. It does not own rdb.
func NewSource(ctx context.Context, rdb *redis.Client, o Options) (*Source, error) {
	if rdb == nil || o.Stream == "" || o.Group == "" || o.Consumer == "" {
		return nil, errors.New("redisstream: a client, Stream, Group and Consumer are required")
	}
	if o.MaxAttempts < 0 || o.Lease < 0 || o.Block < 0 {
		return nil, errors.New("redisstream: MaxAttempts, Lease and Block must not be negative")
	}
	if o.BodyField == "" {
		o.BodyField = "body"
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Block == 0 {
		o.Block = time.Second
	}
	if o.DLQStream == "" {
		o.DLQStream = o.Stream + ".dlq"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	err := rdb.XGroupCreateMkStream(ctx, o.Stream, o.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return nil, fmt.Errorf("redisstream: create group: %w", err)
	}
	return &Source{rdb: rdb, o: o, log: o.Logger, next: "0-0"}, nil
}

// Receive takes over idle entries first (crashed consumers', and retries
// whose backoff is over), then reads new ones.
func (s *Source) Receive(ctx context.Context, max int) ([]*worker.Message, error) {
	s.mu.Lock()
	start := s.next
	s.mu.Unlock()
	claimed, next, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s.o.Stream, Group: s.o.Group,
		Consumer: s.o.Consumer, MinIdle: s.o.Lease, Start: start, Count: int64(max)}).Result()
	if err != nil {
		return nil, s.receiveErr(err)
	}
	s.mu.Lock()
	s.next = next
	s.mu.Unlock()
	var out []*worker.Message
	for _, xm := range claimed {
		n, err := s.deliveries(ctx, xm.ID)
		if err != nil {
			return out, err
		}
		m := s.message(xm, n)
		if n > s.o.MaxAttempts {
			// Delivered past the limit without a settled failure: a
			// consumer died (or shut down) on the last attempt.
			f := worker.Failure{ErrorClass: "sluice.DeliveryLimit", ConsumerID: s.o.Consumer,
				ErrorMessage: fmt.Sprintf("delivered %d times, more than MaxAttempts %d, without a settled failure", n, s.o.MaxAttempts)}
			if _, err := s.deadLetter(ctx, m, f, dlq.ReasonOverLimit); err != nil {
				return out, err
			}
			continue
		}
		out = append(out, m)
	}
	if len(out) >= max || len(claimed) > 0 {
		return out, nil
	}
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.o.Group, Consumer: s.o.Consumer,
		Streams: []string{s.o.Stream, ">"}, Count: int64(max - len(out)), Block: s.o.Block}).Result()
	if errors.Is(err, redis.Nil) {
		return out, nil
	}
	if err != nil {
		return out, s.receiveErr(err)
	}
	for _, st := range res {
		for _, xm := range st.Messages {
			out = append(out, s.message(xm, 1))
		}
	}
	return out, nil
}

func (s *Source) receiveErr(err error) error {
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		return fmt.Errorf("%w: redisstream: %v", worker.ErrTerminal, err)
	}
	return err
}

// deliveries is the delivery count of a pending entry (XPENDING).
func (s *Source) deliveries(ctx context.Context, id string) (int, error) {
	p, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.o.Stream, Group: s.o.Group,
		Start: id, End: id, Count: 1}).Result()
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 1, nil
	}
	return int(p[0].RetryCount), nil
}

func (s *Source) message(xm redis.XMessage, attempt int) *worker.Message {
	attrs := map[string]string{}
	var body []byte
	for k, v := range xm.Values {
		sv := fmt.Sprint(v)
		if k == s.o.BodyField {
			body = []byte(sv)
			continue
		}
		attrs[k] = sv
	}
	m := &worker.Message{ID: xm.ID, OriginalID: attrs[dlq.FieldOriginID], Body: body, Attributes: attrs,
		Attempt: attempt, Lease: s.o.Lease, Raw: xm, Receipt: xm.ID}
	if ms, err := strconv.ParseInt(strings.SplitN(xm.ID, "-", 2)[0], 10, 64); err == nil {
		m.SentAt = time.UnixMilli(ms)
	}
	return m
}

// Ack acknowledges the entry (XACK).
func (s *Source) Ack(ctx context.Context, m *worker.Message) error {
	return s.rdb.XAck(ctx, s.o.Stream, s.o.Group, m.ID).Err()
}

// Extend resets the entry's idle time by claiming it for this consumer
// again with JUSTID, which counts no delivery. ErrLeaseLost when another
// consumer took it over or it was deleted.
func (s *Source) Extend(ctx context.Context, m *worker.Message) error {
	return s.setIdle(ctx, m, 0)
}

// Release makes the entry claimable at once: its idle time is set to
// Lease. The next XAUTOCLAIM counts a delivery.
func (s *Source) Release(ctx context.Context, m *worker.Message) error {
	return s.setIdle(ctx, m, s.o.Lease)
}

// setIdle is XCLAIM stream group consumer 0 id IDLE ms JUSTID, when this
// consumer still owns the entry (XCLAIM with min-idle 0 would otherwise
// take it back from a consumer that took it over).
func (s *Source) setIdle(ctx context.Context, m *worker.Message, idle time.Duration) error {
	p, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.o.Stream, Group: s.o.Group,
		Start: m.ID, End: m.ID, Count: 1}).Result()
	if err != nil {
		return err
	}
	if len(p) == 0 || p[0].Consumer != s.o.Consumer {
		return fmt.Errorf("%w: entry %s is no longer pending for %s", worker.ErrLeaseLost, m.ID, s.o.Consumer)
	}
	ids, err := s.rdb.Do(ctx, "XCLAIM", s.o.Stream, s.o.Group, s.o.Consumer, 0, m.ID,
		"IDLE", idle.Milliseconds(), "JUSTID").StringSlice()
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: entry %s is no longer pending", worker.ErrLeaseLost, m.ID)
	}
	return nil
}

// Fail dead-letters the entry on a terminal failure or its last attempt;
// otherwise it leaves it pending, claimable again after f.Backoff.
func (s *Source) Fail(ctx context.Context, m *worker.Message, f worker.Failure) (worker.Outcome, error) {
	if f.Terminal {
		return s.deadLetter(ctx, m, f, dlq.ReasonTerminal)
	}
	if m.Attempt >= s.o.MaxAttempts {
		return s.deadLetter(ctx, m, f, dlq.ReasonMaxAttempts)
	}
	backoff := min(f.Backoff, s.o.Lease)
	if err := s.setIdle(ctx, m, s.o.Lease-backoff); err != nil {
		return worker.Outcome{}, err
	}
	return worker.Outcome{VisibleAt: time.Now().Add(backoff)}, nil
}

// deadLetter is MULTI { XADD dlq; XACK }.
func (s *Source) deadLetter(ctx context.Context, m *worker.Message, f worker.Failure, reason string) (worker.Outcome, error) {
	c := dlq.NewContext(m, f, reason, s.o.Stream+"/"+m.ID+"/"+s.o.Group, s.o.Stream, dlq.Redrives(m.Attributes), time.Now())
	values := map[string]any{}
	for k, v := range m.Attributes {
		if !dlq.IsContextField(k) {
			values[k] = v
		}
	}
	values[s.o.BodyField] = string(m.Body)
	for k, v := range c.Fields(0) {
		values[k] = v
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.o.DLQStream, Values: values})
		p.XAck(ctx, s.o.Stream, s.o.Group, m.ID)
		return nil
	})
	if err != nil {
		return worker.Outcome{}, fmt.Errorf("redisstream: dead-letter %s: %w", m.ID, err)
	}
	return worker.Outcome{DeadLettered: true, Target: s.o.DLQStream, Reported: true}, nil
}

// DLQ is a dead-letter stream as a dlq.Store.
type DLQ struct {
	rdb       *redis.Client
	stream    string
	bodyField string
	target    string
}

// NewDLQ returns the Store for dead-letter stream stream. Redrive adds
// entries to target; "" sends each back to the stream it came from (which
// every group of that stream reads: give a group its own retry stream
// when several groups share one).
func NewDLQ(rdb *redis.Client, stream, bodyField, target string) *DLQ {
	if bodyField == "" {
		bodyField = "body"
	}
	return &DLQ{rdb: rdb, stream: stream, bodyField: bodyField, target: target}
}

// List is XRANGE from after cursor.
func (d *DLQ) List(ctx context.Context, cursor string, max int) ([]dlq.Entry, string, error) {
	start := "-"
	if cursor != "" {
		start = "(" + cursor
	}
	xs, err := d.rdb.XRangeN(ctx, d.stream, start, "+", int64(max)).Result()
	if err != nil {
		return nil, cursor, err
	}
	out := make([]dlq.Entry, 0, len(xs))
	for _, x := range xs {
		fields := map[string]string{}
		for k, v := range x.Values {
			fields[k] = fmt.Sprint(v)
		}
		e := dlq.Entry{ID: x.ID, Body: []byte(fields[d.bodyField]), Attributes: map[string]string{}}
		e.Context, e.Valid = dlq.ParseContext(fields)
		for k, v := range fields {
			if k != d.bodyField && !dlq.IsContextField(k) {
				e.Attributes[k] = v
			}
		}
		out = append(out, e)
		cursor = x.ID
	}
	return out, cursor, nil
}

// Redrive is MULTI { XADD target *; XDEL dlq id }.
func (d *DLQ) Redrive(ctx context.Context, e dlq.Entry) error {
	target := d.target
	if target == "" {
		target = e.Context.Origin
	}
	if target == "" {
		return fmt.Errorf("redisstream: entry %s does not say which stream it came from; set a target", e.ID)
	}
	values := map[string]any{d.bodyField: string(e.Body)}
	for k, v := range dlq.RedriveFields(e.Attributes, e.Context) {
		values[k] = v
	}
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: target, Values: values})
		p.XDel(ctx, d.stream, e.ID)
		return nil
	})
	return err
}

var _ dlq.Store = (*DLQ)(nil)
