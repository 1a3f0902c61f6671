// Package gcppubsub is the worker SDK's Google Cloud Pub/Sub transport
// (the official cloud.google.com/go/pubsub/v2 client): a worker.Source
// over a subscription, with Pub/Sub's native dead-letter and retry
// policies configured by the SDK and the failure context Pub/Sub's own
// dead-lettering does not carry.
//
//   - Configure sets the subscription's dead_letter_policy (max delivery
//     attempts: MaxAttempts+1, at least 5, the service's minimum) and
//     retry_policy (min/max backoff). The native policy is the backstop
//     for workers that die repeatedly; the SDK dead-letters first.
//   - The attempt count is the message's DeliveryAttempt, which Pub/Sub
//     provides when a dead-letter policy is set.
//   - A transient failure is a Nack: Pub/Sub has no per-message delay, so
//     the subscription's retry policy spaces the redeliveries.
//   - A terminal failure, or a transient one on the last attempt, is
//     published to the dead-letter topic with the sluice-* context as
//     attributes (the trace shortened to 1,000 bytes: Pub/Sub allows 1,024
//     per value), and acked only after the publish is confirmed: a crash
//     in between leaves a duplicate with the same sluice-src.
//   - Leases are extended by the client library itself.
package gcppubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
)

// TraceLimit is how much of a trace goes in an attribute.
const TraceLimit = 1000

// SubscriptionConfig is what Configure sets on a subscription.
type SubscriptionConfig struct {
	Topic        string // the topic id the subscription reads
	Subscription string // subscription id
	DLQTopic     string // dead-letter topic id; created when missing
	// DLQSubscription is created on DLQTopic when missing: without a
	// subscription, dead letters published there are lost. The console
	// reads it. "": DLQTopic + "-sub".
	DLQSubscription string
	// MaxAttempts is the SDK's limit; the native max_delivery_attempts is
	// MaxAttempts+1, at least 5. 0: 5.
	MaxAttempts int
	// MinBackoff and MaxBackoff are the retry policy. 0: 10 s and 600 s
	// (Pub/Sub's defaults).
	MinBackoff, MaxBackoff time.Duration
}

// Configure creates the dead-letter topic when missing and creates the
// subscription with the dead-letter and retry policies, or updates an
// existing one to them. (On Google Cloud, the Pub/Sub service agent needs
// the publisher role on the dead-letter topic and the subscriber role on
// the subscription, or nothing is forwarded natively.)
func Configure(ctx context.Context, c *pubsub.Client, sc SubscriptionConfig) error {
	if sc.Topic == "" || sc.Subscription == "" || sc.DLQTopic == "" {
		return errors.New("gcppubsub: Topic, Subscription and DLQTopic are required")
	}
	if sc.MaxAttempts == 0 {
		sc.MaxAttempts = 5
	}
	if sc.MinBackoff == 0 {
		sc.MinBackoff = 10 * time.Second
	}
	if sc.MaxBackoff == 0 {
		sc.MaxBackoff = 600 * time.Second
	}
	if sc.DLQSubscription == "" {
		sc.DLQSubscription = sc.DLQTopic + "-sub"
	}
	p := "projects/" + c.Project()
	dlqName := p + "/topics/" + sc.DLQTopic
	if _, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: dlqName}); err != nil {
		if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: dlqName}); err != nil {
			return fmt.Errorf("gcppubsub: create dead-letter topic: %w", err)
		}
	}
	dlqSub := p + "/subscriptions/" + sc.DLQSubscription
	if _, err := c.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: dlqSub}); err != nil {
		if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: dlqSub, Topic: dlqName}); err != nil {
			return fmt.Errorf("gcppubsub: create dead-letter subscription: %w", err)
		}
	}
	sub := &pubsubpb.Subscription{
		Name:  p + "/subscriptions/" + sc.Subscription,
		Topic: p + "/topics/" + sc.Topic,
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dlqName,
			MaxDeliveryAttempts: int32(max(5, sc.MaxAttempts+1))},
		RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(sc.MinBackoff), MaximumBackoff: durationpb.New(sc.MaxBackoff)},
	}
	if _, err := c.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub.Name}); err != nil {
		if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil {
			return fmt.Errorf("gcppubsub: create subscription: %w", err)
		}
		return nil
	}
	_, err := c.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{Subscription: sub,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"dead_letter_policy", "retry_policy"}}})
	if err != nil {
		return fmt.Errorf("gcppubsub: update subscription: %w", err)
	}
	return nil
}

// Options configure a Source.
type Options struct {
	Subscription string // required: subscription id
	DLQTopic     string // required: dead-letter topic id
	// MaxAttempts is how many deliveries a message gets before the SDK
	// dead-letters it (keep it equal to SubscriptionConfig.MaxAttempts).
	// 0: 5.
	MaxAttempts int
	// MaxOutstanding is how many messages the client holds leased,
	// waiting for or in a handler. Keep it near the worker's Concurrency.
	// 0: 10.
	MaxOutstanding int
	// Logger receives the source's logs. nil: discard.
	Logger *slog.Logger
}

// Source consumes one subscription. It runs the client's streaming pull
// in the background from NewSource until Close.
type Source struct {
	c      *pubsub.Client
	o      Options
	log    *slog.Logger
	pub    *pubsub.Publisher
	msgs   chan *pubsub.Message
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error // the background Receive's error
}

var _ worker.Source = (*Source)(nil)

// NewSource starts receiving from the subscription.
func NewSource(c *pubsub.Client, o Options) (*Source, error) {
	if c == nil || o.Subscription == "" || o.DLQTopic == "" {
		return nil, errors.New("gcppubsub: a client, Subscription and DLQTopic are required")
	}
	if o.MaxAttempts < 0 || o.MaxOutstanding < 0 {
		return nil, errors.New("gcppubsub: MaxAttempts and MaxOutstanding must not be negative")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.MaxOutstanding == 0 {
		o.MaxOutstanding = 10
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Source{c: c, o: o, log: o.Logger, pub: c.Publisher(o.DLQTopic), msgs: make(chan *pubsub.Message),
		cancel: cancel, done: make(chan struct{})}
	sub := c.Subscriber(o.Subscription)
	sub.ReceiveSettings.MaxOutstandingMessages = o.MaxOutstanding
	// Close returns at once: what is still outstanding (received, not
	// settled) is nacked, so it is redelivered rather than waited for.
	sub.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{Timeout: 10 * time.Second, Behavior: pubsub.ShutdownBehaviorNackImmediately}
	go func() {
		defer close(s.done)
		err := sub.Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
			select {
			case s.msgs <- m:
			case <-ctx.Done():
				m.Nack()
			}
		})
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// Close stops receiving; messages received but not handed out are
// nacked. Call it after the worker's Run returns.
func (s *Source) Close() {
	s.cancel()
	<-s.done
	s.pub.Stop()
}

// Receive waits up to a second for a message, then takes what else is
// ready, up to max.
func (s *Source) Receive(ctx context.Context, max int) ([]*worker.Message, error) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	var out []*worker.Message
	select {
	case m := <-s.msgs:
		out = s.take(ctx, out, m)
	case <-t.C:
	case <-ctx.Done():
		return nil, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, fmt.Errorf("%w: gcppubsub: receive ended: %v", worker.ErrTerminal, s.err)
	}
	for len(out) < max {
		select {
		case m := <-s.msgs:
			out = s.take(ctx, out, m)
		default:
			return out, nil
		}
	}
	return out, nil
}

func (s *Source) take(ctx context.Context, out []*worker.Message, pm *pubsub.Message) []*worker.Message {
	attempt := 1
	if pm.DeliveryAttempt != nil {
		attempt = *pm.DeliveryAttempt
	}
	attrs := map[string]string{}
	for k, v := range pm.Attributes {
		attrs[k] = v
	}
	m := &worker.Message{ID: pm.ID, OriginalID: attrs[dlq.FieldOriginID], Body: pm.Data, Attributes: attrs,
		Attempt: attempt, SentAt: pm.PublishTime, Raw: pm, Receipt: pm}
	if attempt > s.o.MaxAttempts {
		f := worker.Failure{ErrorClass: "sluice.DeliveryLimit", ConsumerID: s.o.Subscription,
			ErrorMessage: fmt.Sprintf("delivered %d times, more than MaxAttempts %d, without a settled failure", attempt, s.o.MaxAttempts)}
		if _, err := s.deadLetter(ctx, m, f, dlq.ReasonOverLimit); err != nil {
			s.log.Warn("could not dead-letter a message delivered past its limit", "msg_id", m.ID, "err", err)
			pm.Nack()
		}
		return out
	}
	return append(out, m)
}

func msgOf(m *worker.Message) *pubsub.Message { return m.Receipt.(*pubsub.Message) }

// Ack acks the message and waits for the result.
func (s *Source) Ack(ctx context.Context, m *worker.Message) error {
	_, err := msgOf(m).AckWithResult().Get(ctx)
	return err
}

// Extend does nothing: the client library extends leases itself.
func (s *Source) Extend(context.Context, *worker.Message) error { return nil }

// Release nacks the message: it is redelivered (counting an attempt).
func (s *Source) Release(_ context.Context, m *worker.Message) error {
	msgOf(m).Nack()
	return nil
}

// Fail dead-letters the message on a terminal failure or its last
// attempt; otherwise it nacks it, and the retry policy spaces the
// redelivery (f.Backoff cannot be applied per message).
func (s *Source) Fail(ctx context.Context, m *worker.Message, f worker.Failure) (worker.Outcome, error) {
	if f.Terminal {
		return s.deadLetter(ctx, m, f, dlq.ReasonTerminal)
	}
	if m.Attempt >= s.o.MaxAttempts {
		return s.deadLetter(ctx, m, f, dlq.ReasonMaxAttempts)
	}
	msgOf(m).Nack()
	return worker.Outcome{}, nil
}

func (s *Source) deadLetter(ctx context.Context, m *worker.Message, f worker.Failure, reason string) (worker.Outcome, error) {
	pm := msgOf(m)
	c := dlq.NewContext(m, f, reason, s.o.Subscription+"/"+m.ID, s.o.Subscription, dlq.Redrives(m.Attributes), time.Now())
	attrs := map[string]string{}
	for k, v := range pm.Attributes {
		if !dlq.IsContextField(k) {
			attrs[k] = v
		}
	}
	for k, v := range c.Fields(TraceLimit) {
		attrs[k] = v
	}
	if _, err := s.pub.Publish(ctx, &pubsub.Message{Data: pm.Data, Attributes: attrs}).Get(ctx); err != nil {
		pm.Nack()
		return worker.Outcome{}, fmt.Errorf("gcppubsub: dead-letter %s: %w", m.ID, err)
	}
	if _, err := pm.AckWithResult().Get(ctx); err != nil {
		return worker.Outcome{}, fmt.Errorf("gcppubsub: dead-lettered %s, but the ack failed (it may be dead-lettered again): %w", m.ID, err)
	}
	return worker.Outcome{DeadLettered: true, Target: s.o.DLQTopic, Reported: true}, nil
}
