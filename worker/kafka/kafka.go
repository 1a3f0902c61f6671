// Package kafka is the worker SDK's Kafka transport (franz-go): a
// worker.Source over a consumer group that gives Kafka the poison-message
// lifecycle it has no native support for, the way the Kafka community
// hand-rolls it.
//
//   - Order is kept per partition: only the oldest uncommitted record of a
//     partition is handed to a handler at a time. A failing record blocks
//     its partition while it is retried (in-consumer backoff, bounded by
//     MaxAttempts), never after it is dead-lettered.
//   - On a terminal failure or the last attempt the record is produced to
//     <topic>.dlq, keyed as the original, with sluice-* context headers
//     (original topic, partition, offset, timestamp, error class,
//     message, trace, attempts, consumer id and version, failure time).
//     The offset is committed only after that produce is acknowledged, so
//     a crash in between re-consumes and dead-letters it again (a
//     duplicate with the same sluice-src, never a loss).
//   - Offsets are committed per record after it is processed or
//     dead-lettered (auto-commit off).
//
// The attempt count lives in the consumer's memory: a worker that crashes
// mid-record restarts its count at 1 on the next owner (see docs/worker.md).
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
)

// Headers a dead letter carries besides the dlq.Field* context.
const (
	HeaderPartition = "sluice-partition"
	HeaderOffset    = "sluice-offset"
	HeaderTimestamp = "sluice-timestamp" // the original record's timestamp, RFC 3339
)

// Options configure a Source.
type Options struct {
	Seeds []string // required: bootstrap brokers
	Topic string   // required
	Group string   // required: consumer group
	// MaxAttempts is how many times a record is handled before it is
	// dead-lettered. 0: 5.
	MaxAttempts int
	// DLQTopic is the dead-letter topic. "": Topic + ".dlq".
	DLQTopic string
	// PollWait bounds one poll when nothing is ready. 0: 1 s.
	PollWait time.Duration
	// ClientOptions are extra franz-go options (TLS, SASL, …).
	ClientOptions []kgo.Opt
	// Logger receives the source's logs. nil: discard.
	Logger *slog.Logger
}

// Source consumes one topic as a member of a consumer group. It owns its
// client: Close it after the worker's Run returns.
type Source struct {
	cl  *kgo.Client
	o   Options
	log *slog.Logger

	pollMu sync.Mutex // one poll at a time
	mu     sync.Mutex
	parts  map[int32]*partition
}

// partition is the consumer's view of one assigned partition.
type partition struct {
	queue    []*kgo.Record // fetched, not yet committed, in offset order
	inFlight bool          // queue[0] is with a handler
	attempts int           // handlings of queue[0] so far
	readyAt  time.Time     // queue[0] may be handed out again from then
	epoch    uint64        // bumped when the partition is revoked
}

// receipt ties a delivery to its partition's state.
type receipt struct {
	rec   *kgo.Record
	epoch uint64
}

var _ worker.Source = (*Source)(nil)

// NewSource connects the consumer (auto-commit off) and returns the
// Source.
func NewSource(o Options) (*Source, error) {
	if len(o.Seeds) == 0 || o.Topic == "" || o.Group == "" {
		return nil, errors.New("kafka: Seeds, Topic and Group are required")
	}
	if o.MaxAttempts < 0 || o.PollWait < 0 {
		return nil, errors.New("kafka: MaxAttempts and PollWait must not be negative")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.DLQTopic == "" {
		o.DLQTopic = o.Topic + ".dlq"
	}
	if o.PollWait == 0 {
		o.PollWait = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{o: o, log: o.Logger, parts: map[int32]*partition{}}
	drop := func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range lost[o.Topic] {
			if st := s.parts[p]; st != nil {
				delete(s.parts, p)
				st.epoch++
			}
		}
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(o.Seeds...), kgo.ConsumerGroup(o.Group), kgo.ConsumeTopics(o.Topic),
		kgo.DisableAutoCommit(), kgo.OnPartitionsRevoked(drop), kgo.OnPartitionsLost(drop),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, o.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	s.cl = cl
	return s, nil
}

// Close leaves the group and closes the client.
func (s *Source) Close() { s.cl.Close() }

// Client is the underlying franz-go client.
func (s *Source) Client() *kgo.Client { return s.cl }

// Receive hands out the head record of each partition that has none with
// a handler and whose retry backoff is over, polling for more when none
// is ready.
func (s *Source) Receive(ctx context.Context, max int) ([]*worker.Message, error) {
	deadline := time.Now().Add(s.o.PollWait)
	for {
		if out := s.ready(max); len(out) > 0 {
			return out, nil
		}
		wait := time.Until(deadline)
		if wait <= 0 || ctx.Err() != nil {
			return nil, nil
		}
		if err := s.poll(ctx, min(wait, 200*time.Millisecond)); err != nil {
			return nil, err
		}
	}
}

func (s *Source) ready(max int) []*worker.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []*worker.Message
	for _, p := range s.parts {
		if len(out) >= max {
			break
		}
		if p.inFlight || len(p.queue) == 0 || now.Before(p.readyAt) {
			continue
		}
		p.inFlight = true
		p.attempts++
		out = append(out, s.message(p.queue[0], p.attempts, p.epoch))
	}
	return out
}

func (s *Source) poll(ctx context.Context, wait time.Duration) error {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs := s.cl.PollRecords(pctx, 500)
	if fs.IsClientClosed() {
		return fmt.Errorf("%w: kafka: client closed", worker.ErrTerminal)
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			ferr = fmt.Errorf("kafka: fetch %s/%d: %w", t, p, err)
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	fs.EachRecord(func(r *kgo.Record) {
		p := s.parts[r.Partition]
		if p == nil {
			p = &partition{}
			s.parts[r.Partition] = p
		}
		if n := len(p.queue); n > 0 && r.Offset <= p.queue[n-1].Offset {
			return // already buffered (a re-fetch after a rebalance)
		}
		p.queue = append(p.queue, r)
	})
	return ferr
}

func (s *Source) message(r *kgo.Record, attempt int, epoch uint64) *worker.Message {
	attrs := map[string]string{}
	for _, h := range r.Headers {
		attrs[h.Key] = string(h.Value)
	}
	return &worker.Message{ID: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), OriginalID: attrs[dlq.FieldOriginID],
		Body: r.Value, Attributes: attrs, Attempt: attempt, SentAt: r.Timestamp, Raw: r,
		Receipt: receipt{rec: r, epoch: epoch}}
}

// head returns the partition state for m if m is still its head.
func (s *Source) head(m *worker.Message) (*partition, *kgo.Record, error) {
	rc := m.Receipt.(receipt)
	p := s.parts[rc.rec.Partition]
	if p == nil || p.epoch != rc.epoch || len(p.queue) == 0 || p.queue[0] != rc.rec {
		return nil, rc.rec, fmt.Errorf("%w: partition %d was revoked", worker.ErrLeaseLost, rc.rec.Partition)
	}
	return p, rc.rec, nil
}

// Ack commits the record's offset and moves its partition on.
func (s *Source) Ack(ctx context.Context, m *worker.Message) error { return s.commit(ctx, m) }

func (s *Source) commit(ctx context.Context, m *worker.Message) error {
	s.mu.Lock()
	_, rec, err := s.head(m)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.cl.CommitRecords(ctx, rec); err != nil {
		s.mu.Lock()
		if p, _, herr := s.head(m); herr == nil {
			p.inFlight = false // hand it out again
		}
		s.mu.Unlock()
		return fmt.Errorf("kafka: commit %s: %w", m.ID, err)
	}
	s.mu.Lock()
	if p, _, herr := s.head(m); herr == nil {
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.inFlight, p.attempts, p.readyAt = false, 0, time.Time{}
	}
	s.mu.Unlock()
	return nil
}

// Extend does nothing: a consumer group has no per-record lease.
func (s *Source) Extend(context.Context, *worker.Message) error { return nil }

// Release hands the record out again at once, without counting the
// handling as an attempt.
func (s *Source) Release(_ context.Context, m *worker.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, _, err := s.head(m)
	if err != nil {
		return err
	}
	p.inFlight, p.attempts, p.readyAt = false, p.attempts-1, time.Time{}
	return nil
}

// Fail retries the record after f.Backoff (its partition waits), or, on a
// terminal failure or the last attempt, produces it to the DLQ topic and
// commits it once the produce is acknowledged.
func (s *Source) Fail(ctx context.Context, m *worker.Message, f worker.Failure) (worker.Outcome, error) {
	if !f.Terminal && m.Attempt < s.o.MaxAttempts {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, _, err := s.head(m)
		if err != nil {
			return worker.Outcome{}, err
		}
		at := time.Now().Add(f.Backoff)
		p.inFlight, p.readyAt = false, at
		return worker.Outcome{VisibleAt: at}, nil
	}
	reason := dlq.ReasonMaxAttempts
	if f.Terminal {
		reason = dlq.ReasonTerminal
	}
	rec := m.Receipt.(receipt).rec
	c := dlq.NewContext(m, f, reason, m.ID, rec.Topic, dlq.Redrives(m.Attributes), time.Now())
	out := &kgo.Record{Topic: s.o.DLQTopic, Key: rec.Key, Value: rec.Value}
	for _, h := range rec.Headers {
		if !dlq.IsContextField(h.Key) {
			out.Headers = append(out.Headers, h)
		}
	}
	for k, v := range c.Fields(0) {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	out.Headers = append(out.Headers,
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
		kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		kgo.RecordHeader{Key: HeaderTimestamp, Value: []byte(rec.Timestamp.UTC().Format(time.RFC3339Nano))})
	if err := s.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		s.mu.Lock()
		if p, _, herr := s.head(m); herr == nil {
			p.inFlight, p.attempts = false, p.attempts-1
		}
		s.mu.Unlock()
		return worker.Outcome{}, fmt.Errorf("kafka: dead-letter %s: %w", m.ID, err)
	}
	if err := s.commit(ctx, m); err != nil {
		return worker.Outcome{}, fmt.Errorf("kafka: dead-lettered %s, but the commit failed (it will be dead-lettered again): %w", m.ID, err)
	}
	return worker.Outcome{DeadLettered: true, Target: s.o.DLQTopic, Reported: true}, nil
}
