package gcppubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicemq/sluice/worker/dlq"
)

// holdFor is the ack deadline the DLQ sets on what it pulled (Pub/Sub's
// maximum).
const holdFor = 600

// DLQ is a dead-letter subscription as a dlq.Store. Pub/Sub has no
// non-destructive read: the DLQ pulls messages (unary Pull) and holds
// them with a 600 s ack deadline while it is open, so List is a peek
// only until Close, which sets the deadline of everything not redriven
// to 0 and so returns it to the subscription at once. Each peek counts a
// delivery on the DLQ subscription, which has no dead-letter policy of
// its own. A redrive longer than 10 minutes can see held entries
// delivered again.
type DLQ struct {
	c     *pubsub.Client
	sub   string // full name
	pub   *pubsub.Publisher
	quiet time.Duration

	mu      sync.Mutex
	buf     []*pubsubpb.ReceivedMessage
	settled map[string]bool // by ack id
}

// NewDLQ reads dead-letter subscription sub (an id). Redrive publishes
// to topic target (required: the source topic reaches every
// subscription, so give a consumer a redrive topic of its own when
// several share one). A List that finds nothing new waits quiet for
// more (at least 1 s: a shorter unary Pull may return before the server
// has looked for messages). Close it when done.
func NewDLQ(c *pubsub.Client, sub, target string, quiet time.Duration) (*DLQ, error) {
	if c == nil || sub == "" || target == "" {
		return nil, errors.New("gcppubsub: a client, the DLQ subscription and a redrive target topic are required")
	}
	quiet = max(quiet, time.Second)
	return &DLQ{c: c, sub: "projects/" + c.Project() + "/subscriptions/" + sub, pub: c.Publisher(target), quiet: quiet,
		settled: map[string]bool{}}, nil
}

// Close hands back everything not redriven (ack deadline 0).
func (d *DLQ) Close() {
	d.mu.Lock()
	var ids []string
	for _, m := range d.buf {
		if !d.settled[m.AckId] {
			ids = append(ids, m.AckId)
		}
	}
	d.buf = nil
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		_ = d.c.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: d.sub,
			AckIds: ids[:n], AckDeadlineSeconds: 0})
		ids = ids[n:]
	}
	d.pub.Stop()
}

// List returns pulled messages after cursor (an index), pulling more
// (waiting up to the quiet time) when there are none.
func (d *DLQ) List(ctx context.Context, cursor string, max int) ([]dlq.Entry, string, error) {
	from := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 {
			return nil, cursor, fmt.Errorf("gcppubsub: bad cursor %q", cursor)
		}
		from = n
	}
	d.mu.Lock()
	have := len(d.buf)
	d.mu.Unlock()
	if have <= from {
		if err := d.pull(ctx, max); err != nil {
			return nil, cursor, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.buf) <= from {
		return nil, strconv.Itoa(from), nil
	}
	end := min(len(d.buf), from+max)
	out := make([]dlq.Entry, 0, end-from)
	for _, m := range d.buf[from:end] {
		out = append(out, entry(m.Message))
	}
	return out, strconv.Itoa(end), nil
}

// pull pulls up to max messages, waiting up to the quiet time, and holds
// them for holdFor seconds.
func (d *DLQ) pull(ctx context.Context, max int) error {
	pctx, cancel := context.WithTimeout(ctx, d.quiet)
	defer cancel()
	resp, err := d.c.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: d.sub, MaxMessages: int32(min(max, 1000))})
	if err != nil {
		if pctx.Err() != nil && ctx.Err() == nil || status.Code(err) == codes.DeadlineExceeded {
			return nil // nothing arrived
		}
		return err
	}
	if len(resp.ReceivedMessages) == 0 {
		return nil
	}
	ids := make([]string, 0, len(resp.ReceivedMessages))
	for _, m := range resp.ReceivedMessages {
		ids = append(ids, m.AckId)
	}
	if err := d.c.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: d.sub,
		AckIds: ids, AckDeadlineSeconds: holdFor}); err != nil {
		return err
	}
	d.mu.Lock()
	d.buf = append(d.buf, resp.ReceivedMessages...)
	d.mu.Unlock()
	return nil
}

func entry(m *pubsubpb.PubsubMessage) dlq.Entry {
	e := dlq.Entry{ID: m.MessageId, Key: m.OrderingKey, Body: m.Data, Attributes: map[string]string{}}
	for k, v := range m.Attributes {
		if !dlq.IsContextField(k) {
			e.Attributes[k] = v
		}
	}
	e.Context, e.Valid = dlq.ParseContext(m.Attributes)
	return e
}

// Redrive publishes the copy (context stripped, redrive count + 1), waits
// for the publish, then acks the dead letter.
func (d *DLQ) Redrive(ctx context.Context, e dlq.Entry) error {
	d.mu.Lock()
	ackID := ""
	for _, m := range d.buf {
		if m.Message.MessageId == e.ID && !d.settled[m.AckId] {
			ackID = m.AckId
		}
	}
	d.mu.Unlock()
	if ackID == "" {
		return fmt.Errorf("gcppubsub: entry %s is not held by this DLQ (list it first)", e.ID)
	}
	out := &pubsub.Message{Data: e.Body, Attributes: dlq.RedriveFields(e.Attributes, e.Context)}
	if _, err := d.pub.Publish(ctx, out).Get(ctx); err != nil {
		return err
	}
	if err := d.c.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: d.sub, AckIds: []string{ackID}}); err != nil {
		return fmt.Errorf("gcppubsub: redriven, but the DLQ ack failed (it may be redriven again): %w", err)
	}
	d.mu.Lock()
	d.settled[ackID] = true
	d.mu.Unlock()
	return nil
}

var _ dlq.Store = (*DLQ)(nil)
