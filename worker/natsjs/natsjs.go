// Package natsjs is the worker SDK's NATS JetStream transport: a
// worker.Source over a durable pull consumer, with JetStream's own tools
// for each step of the poison-message lifecycle.
//
//   - Explicit acks; the attempt count is the message's NumDelivered,
//     which the server keeps (durably with file storage).
//   - A transient failure is NakWithDelay(the worker's full-jitter
//     backoff); a lease is AckWait, extended with InProgress.
//   - A terminal failure, or a transient one on the last attempt, is
//     published to the DLQ subject (default dlq.<stream>.<consumer>, in a
//     Limits stream the Source creates) with the sluice-* context as
//     headers and Nats-Msg-Id <stream>:<seq>:<consumer>; only after the
//     publish is acknowledged is the message Term'd (TermWithReason). A
//     crash in between redelivers it and the duplicate window absorbs
//     the second copy.
//   - The consumer's MaxDeliver is MaxAttempts+1: a worker that dies on
//     the last attempt leaves one delivery, which the Source dead-letters
//     on receipt (reason delivery_exceeded) instead of handling. Past it,
//     the server stops and emits its MAX_DELIVERIES advisory, and
//     MoveMaxDelivered dead-letters the message from the advisory.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
)

// HeaderSubject is the header that carries a dead letter's original
// subject (a redrive publishes there by default).
const HeaderSubject = "sluice-subject"

// Options configure a Source.
type Options struct {
	Stream   string // required; the stream must exist
	Consumer string // required; durable name, created or updated by NewSource
	// FilterSubjects narrow the consumer (nil: the whole stream).
	FilterSubjects []string
	// MaxAttempts is how many deliveries a message gets before it is
	// dead-lettered; the consumer's MaxDeliver is one more. 0: 5.
	MaxAttempts int
	// AckWait is the lease; the worker extends it at half. 0: 30 s.
	AckWait time.Duration
	// BackOff, when set, is the consumer's redelivery schedule for
	// deliveries whose lease ran out (a worker died or stalled): the
	// lease of delivery n is BackOff[n-1] (the last entry repeats), and
	// the server then ignores AckWait. At most MaxAttempts+1 entries.
	// Failures the worker reports use NakWithDelay with its own backoff
	// either way.
	BackOff []time.Duration
	// FetchWait bounds one pull. 0: 1 s.
	FetchWait time.Duration
	// DLQSubject is where dead letters go. "": dlq.<Stream>.<Consumer>.
	DLQSubject string
	// DLQStream is the stream created (Limits retention, subjects
	// dlq.<Stream>.>) when no stream captures DLQSubject. "":
	// <Stream>_DLQ.
	DLQStream string
	// Logger receives the source's logs. nil: discard.
	Logger *slog.Logger
}

// Source consumes a stream through one durable pull consumer.
type Source struct {
	js   jetstream.JetStream
	cons jetstream.Consumer
	o    Options
	log  *slog.Logger
}

var _ worker.Source = (*Source)(nil)

// NewSource creates or updates the durable consumer (explicit acks,
// AckWait, MaxDeliver MaxAttempts+1) and the DLQ stream, and returns the
// Source.
func NewSource(ctx context.Context, js jetstream.JetStream, o Options) (*Source, error) {
	if js == nil || o.Stream == "" || o.Consumer == "" {
		return nil, errors.New("natsjs: a JetStream context, Stream and Consumer are required")
	}
	if o.MaxAttempts < 0 || o.AckWait < 0 || o.FetchWait < 0 {
		return nil, errors.New("natsjs: MaxAttempts, AckWait and FetchWait must not be negative")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.AckWait == 0 {
		o.AckWait = 30 * time.Second
	}
	if o.FetchWait == 0 {
		o.FetchWait = time.Second
	}
	if o.DLQSubject == "" {
		o.DLQSubject = "dlq." + o.Stream + "." + o.Consumer
	}
	if o.DLQStream == "" {
		o.DLQStream = o.Stream + "_DLQ"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.BackOff) > o.MaxAttempts+1 {
		return nil, fmt.Errorf("natsjs: BackOff has %d entries, more than MaxAttempts+1 (%d)", len(o.BackOff), o.MaxAttempts+1)
	}
	for _, d := range o.BackOff {
		if d <= 0 {
			return nil, errors.New("natsjs: BackOff entries must be positive")
		}
	}
	if _, err := js.StreamNameBySubject(ctx, o.DLQSubject); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: o.DLQStream, Subjects: []string{"dlq." + o.Stream + ".>"},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage})
		if err != nil {
			return nil, fmt.Errorf("natsjs: create DLQ stream: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("natsjs: find DLQ stream: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.Stream, jetstream.ConsumerConfig{Durable: o.Consumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: o.AckWait, MaxDeliver: o.MaxAttempts + 1,
		BackOff: o.BackOff, FilterSubjects: o.FilterSubjects})
	if err != nil {
		return nil, fmt.Errorf("natsjs: create consumer: %w", err)
	}
	return &Source{js: js, cons: cons, o: o, log: o.Logger}, nil
}

// Receive pulls up to max messages (Fetch), waiting up to FetchWait.
func (s *Source) Receive(ctx context.Context, max int) ([]*worker.Message, error) {
	fctx, cancel := context.WithTimeout(ctx, s.o.FetchWait)
	defer cancel()
	b, err := s.cons.Fetch(max, jetstream.FetchContext(fctx))
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w: natsjs: %v", worker.ErrTerminal, err)
		}
		return nil, err
	}
	var out []*worker.Message
	for jm := range b.Messages() {
		md, err := jm.Metadata()
		if err != nil {
			s.log.Warn("message without JetStream metadata; terminated", "subject", jm.Subject(), "err", err)
			_ = jm.Term()
			continue
		}
		m := s.message(jm, md)
		if m.Attempt > s.o.MaxAttempts {
			f := worker.Failure{ErrorClass: "sluice.DeliveryLimit", ConsumerID: s.o.Consumer,
				ErrorMessage: fmt.Sprintf("delivered %d times, more than MaxAttempts %d, without a settled failure", m.Attempt, s.o.MaxAttempts)}
			if _, err := s.deadLetter(ctx, m, f, dlq.ReasonOverLimit); err != nil {
				s.log.Warn("could not dead-letter a message delivered past its limit; the server redelivers it", "msg_id", m.ID, "err", err)
			}
			continue
		}
		out = append(out, m)
	}
	if err := b.Error(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, nats.ErrTimeout) {
		return out, err
	}
	return out, nil
}

func (s *Source) message(jm jetstream.Msg, md *jetstream.MsgMetadata) *worker.Message {
	attrs := map[string]string{}
	for k, v := range jm.Headers() {
		if len(v) > 0 {
			attrs[k] = v[0]
		}
	}
	lease := s.o.AckWait
	if n := len(s.o.BackOff); n > 0 {
		lease = s.o.BackOff[min(int(md.NumDelivered), n)-1]
	}
	return &worker.Message{ID: md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10), OriginalID: attrs[dlq.FieldOriginID],
		Body: jm.Data(), Attributes: attrs, Attempt: int(md.NumDelivered), SentAt: md.Timestamp,
		Lease: lease, Raw: jm, Receipt: jm}
}

func msgOf(m *worker.Message) jetstream.Msg { return m.Receipt.(jetstream.Msg) }

// Ack is a double ack: it returns once the server has the ack.
func (s *Source) Ack(ctx context.Context, m *worker.Message) error { return msgOf(m).DoubleAck(ctx) }

// Extend is InProgress: AckWait starts again.
func (s *Source) Extend(_ context.Context, m *worker.Message) error { return msgOf(m).InProgress() }

// Release is Nak: the message is redelivered at once (counting a
// delivery).
func (s *Source) Release(_ context.Context, m *worker.Message) error { return msgOf(m).Nak() }

// Fail dead-letters the message on a terminal failure or its last
// attempt, and otherwise Naks it with the backoff as delay.
func (s *Source) Fail(ctx context.Context, m *worker.Message, f worker.Failure) (worker.Outcome, error) {
	if f.Terminal {
		return s.deadLetter(ctx, m, f, dlq.ReasonTerminal)
	}
	if m.Attempt >= s.o.MaxAttempts {
		return s.deadLetter(ctx, m, f, dlq.ReasonMaxAttempts)
	}
	if err := msgOf(m).NakWithDelay(f.Backoff); err != nil {
		return worker.Outcome{}, err
	}
	return worker.Outcome{VisibleAt: time.Now().Add(f.Backoff)}, nil
}

// deadLetter publishes the DLQ copy, waits for its ack, then Terms.
func (s *Source) deadLetter(ctx context.Context, m *worker.Message, f worker.Failure, reason string) (worker.Outcome, error) {
	jm := msgOf(m)
	src := m.ID + ":" + s.o.Consumer
	c := dlq.NewContext(m, f, reason, src, s.o.Stream, dlq.Redrives(m.Attributes), time.Now())
	out := nats.NewMsg(s.o.DLQSubject)
	out.Data = m.Body
	for k, v := range jm.Headers() {
		if !dlq.IsContextField(k) && k != nats.MsgIdHdr {
			out.Header[k] = v
		}
	}
	for k, v := range c.Fields(0) {
		out.Header.Set(k, v)
	}
	out.Header.Set(HeaderSubject, jm.Subject())
	if _, err := s.js.PublishMsg(ctx, out, jetstream.WithMsgID(src)); err != nil {
		return worker.Outcome{}, fmt.Errorf("natsjs: dead-letter %s: %w", m.ID, err)
	}
	if err := jm.TermWithReason(reason); err != nil {
		return worker.Outcome{}, fmt.Errorf("natsjs: dead-lettered %s, but Term failed (it is redelivered and deduplicated): %w", m.ID, err)
	}
	return worker.Outcome{DeadLettered: true, Target: s.o.DLQSubject, Reported: true}, nil
}

// DLQ is a dead-letter stream as a dlq.Store.
type DLQ struct {
	js     jetstream.JetStream
	stream string
	target string
}

// NewDLQ returns the Store for the dead-letter stream named stream.
// Redrive publishes to target; "" sends each entry back to its original
// subject (which every consumer of that subject receives: give a consumer
// a redrive subject of its own in FilterSubjects when several share one).
func NewDLQ(js jetstream.JetStream, stream, target string) *DLQ {
	return &DLQ{js: js, stream: stream, target: target}
}

// List reads entries by stream sequence after cursor (GetMsg).
func (d *DLQ) List(ctx context.Context, cursor string, max int) ([]dlq.Entry, string, error) {
	st, err := d.js.Stream(ctx, d.stream)
	if err != nil {
		return nil, cursor, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, cursor, err
	}
	from := uint64(1)
	if cursor != "" {
		c, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return nil, cursor, fmt.Errorf("natsjs: bad cursor %q", cursor)
		}
		from = c + 1
	}
	from = max64(from, info.State.FirstSeq)
	var out []dlq.Entry
	for seq := from; seq <= info.State.LastSeq && len(out) < max; seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			cursor = strconv.FormatUint(seq, 10)
			continue
		}
		if err != nil {
			return out, cursor, err
		}
		fields := map[string]string{}
		e := dlq.Entry{ID: strconv.FormatUint(seq, 10), Body: raw.Data, Attributes: map[string]string{}}
		for k, v := range raw.Header {
			if len(v) == 0 {
				continue
			}
			fields[k] = v[0]
			if !dlq.IsContextField(k) {
				e.Attributes[k] = v[0]
			}
		}
		e.Key = fields[HeaderSubject]
		e.Context, e.Valid = dlq.ParseContext(fields)
		out = append(out, e)
		cursor = e.ID
	}
	return out, cursor, nil
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// Redrive publishes a copy (context stripped, redrive count + 1, a fresh
// Nats-Msg-Id), waits for its ack, then deletes the entry.
func (d *DLQ) Redrive(ctx context.Context, e dlq.Entry) error {
	seq, err := strconv.ParseUint(e.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("natsjs: bad entry id %q", e.ID)
	}
	subj := d.target
	if subj == "" {
		subj = e.Key
	}
	if subj == "" {
		return fmt.Errorf("natsjs: entry %s does not say its subject; set a target", e.ID)
	}
	m := nats.NewMsg(subj)
	m.Data = e.Body
	fields := dlq.RedriveFields(e.Attributes, e.Context)
	for k, v := range fields {
		if k != nats.MsgIdHdr {
			m.Header.Set(k, v)
		}
	}
	if _, err := d.js.PublishMsg(ctx, m, jetstream.WithMsgID("redrive:"+d.stream+":"+e.ID+":"+fields[dlq.FieldRedrives])); err != nil {
		return err
	}
	st, err := d.js.Stream(ctx, d.stream)
	if err != nil {
		return err
	}
	return st.DeleteMsg(ctx, seq)
}

var _ dlq.Store = (*DLQ)(nil)
