package gcppubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/sluicemq/sluice/worker/dlq"
)

// DLQ is a dead-letter subscription as a dlq.Store. Pub/Sub has no
// non-destructive read: the DLQ pulls messages and holds them leased
// (extended by the client) while it is open, so List is a peek only
// until Close, which nacks every message not redriven and so returns it
// to the subscription. A nack is a delivery attempt on the DLQ
// subscription, which has no dead-letter policy of its own.
type DLQ struct {
	c      *pubsub.Client
	pub    *pubsub.Publisher
	quiet  time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	buf     []*pubsub.Message
	settled map[string]bool
	arrived chan struct{} // closed and replaced when a message arrives
}

// NewDLQ starts pulling dead-letter subscription sub. Redrive publishes
// to topic target (required: the source topic reaches every
// subscription, so give a consumer a redrive topic of its own when
// several share one). A List that finds nothing new waits quiet for
// more (0: 1 s). Close it when done.
func NewDLQ(c *pubsub.Client, sub, target string, quiet time.Duration) (*DLQ, error) {
	if c == nil || sub == "" || target == "" {
		return nil, errors.New("gcppubsub: a client, the DLQ subscription and a redrive target topic are required")
	}
	if quiet <= 0 {
		quiet = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &DLQ{c: c, pub: c.Publisher(target), quiet: quiet, cancel: cancel, done: make(chan struct{}),
		settled: map[string]bool{}, arrived: make(chan struct{})}
	s := c.Subscriber(sub)
	s.ReceiveSettings.MaxOutstandingMessages = 10000
	s.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{Timeout: 10 * time.Second, Behavior: pubsub.ShutdownBehaviorNackImmediately}
	go func() {
		defer close(d.done)
		_ = s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			d.mu.Lock()
			d.buf = append(d.buf, m)
			close(d.arrived)
			d.arrived = make(chan struct{})
			d.mu.Unlock()
		})
	}()
	return d, nil
}

// Close nacks what was not redriven and stops pulling.
func (d *DLQ) Close() {
	d.cancel()
	d.mu.Lock()
	for _, m := range d.buf {
		if !d.settled[m.ID] {
			m.Nack()
		}
	}
	d.mu.Unlock()
	<-d.done
	d.pub.Stop()
}

// List returns the pulled messages after cursor (an index), waiting up to
// the quiet time when there are none yet.
func (d *DLQ) List(ctx context.Context, cursor string, max int) ([]dlq.Entry, string, error) {
	from := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 {
			return nil, cursor, fmt.Errorf("gcppubsub: bad cursor %q", cursor)
		}
		from = n
	}
	t := time.NewTimer(d.quiet)
	defer t.Stop()
	for {
		d.mu.Lock()
		if len(d.buf) > from {
			end := min(len(d.buf), from+max)
			out := make([]dlq.Entry, 0, end-from)
			for _, m := range d.buf[from:end] {
				out = append(out, entry(m))
			}
			d.mu.Unlock()
			return out, strconv.Itoa(end), nil
		}
		arrived := d.arrived
		d.mu.Unlock()
		select {
		case <-arrived:
		case <-t.C:
			return nil, strconv.Itoa(from), nil
		case <-ctx.Done():
			return nil, cursor, ctx.Err()
		}
	}
}

func entry(m *pubsub.Message) dlq.Entry {
	e := dlq.Entry{ID: m.ID, Key: m.OrderingKey, Body: m.Data, Attributes: map[string]string{}}
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
	var held *pubsub.Message
	for _, m := range d.buf {
		if m.ID == e.ID && !d.settled[m.ID] {
			held = m
		}
	}
	d.mu.Unlock()
	if held == nil {
		return fmt.Errorf("gcppubsub: entry %s is not held by this DLQ (list it first)", e.ID)
	}
	out := &pubsub.Message{Data: e.Body, Attributes: dlq.RedriveFields(e.Attributes, e.Context)}
	if _, err := d.pub.Publish(ctx, out).Get(ctx); err != nil {
		return err
	}
	if _, err := held.AckWithResult().Get(ctx); err != nil {
		return fmt.Errorf("gcppubsub: redriven, but the DLQ ack failed (it may be redriven again): %w", err)
	}
	d.mu.Lock()
	d.settled[e.ID] = true
	d.mu.Unlock()
	return nil
}

var _ dlq.Store = (*DLQ)(nil)
