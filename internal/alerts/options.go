package alerts

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Options configure the built-in rules and the webhooks. Start from
// DefaultOptions and check the result with Validate: New does not fill in
// zero values, because for most thresholds zero means "rule off".
type Options struct {
	// Interval is how often the rules are evaluated.
	Interval time.Duration

	// dlq_growth (severity page) fires when more than DLQGrowthCount
	// messages were dead-lettered into one queue within DLQGrowthWindow.
	// Arrivals are counted in whole minutes, so the window actually looked
	// at is up to one minute longer than configured. DLQGrowthCount 0 pages
	// on any dead letter; DLQGrowthWindow 0 turns the rule off.
	DLQGrowthCount  int
	DLQGrowthWindow time.Duration

	// dlq_depth fires at warning when a dead-letter queue holds at least
	// DLQDepthWarn messages (visible, in flight and delayed), and at
	// critical at DLQDepthCritical. 0 turns a severity off.
	DLQDepthWarn, DLQDepthCritical int

	// queue_depth is dlq_depth for the other queues, counting visible
	// messages only (the backlog). Off by default.
	QueueDepthWarn, QueueDepthCritical int

	// oldest_message_age fires when the oldest message of a queue (any
	// queue, dead-letter queues included) was sent at least this long ago.
	// Off by default; 5m is a typical warning for a queue that should
	// drain continuously.
	OldestAgeWarn, OldestAgeCritical time.Duration

	// not_consumed (severity warning) fires for a queue that is neither a
	// dead-letter queue nor paused while it has visible messages, no
	// receive is waiting on it, and no receive has asked it for messages
	// for NotConsumedAfter: the consumer outage. 0 (the default) turns it
	// off; 10m suits a queue whose consumers poll continuously.
	NotConsumedAfter time.Duration

	// Webhooks receive a JSON POST (a Notification) for every transition
	// to firing and to resolved. Each has its own bounded queue of
	// WebhookQueueSize notifications; when it is full the oldest is
	// dropped. A delivery is attempted up to WebhookMaxAttempts times, each
	// bounded by WebhookTimeout, with exponential backoff and full jitter
	// between attempts: uniform(0, min(WebhookBackoffCap,
	// WebhookBackoffBase·2^(n-1))). A 4xx answer other than 408 and 429 is
	// not retried.
	Webhooks           []string
	WebhookTimeout     time.Duration
	WebhookMaxAttempts int
	WebhookBackoffBase time.Duration
	WebhookBackoffCap  time.Duration
	WebhookQueueSize   int

	// WebhookDrainTimeout bounds, in real time, how long Run spends at
	// shutdown on one last attempt for each webhook's undelivered
	// notifications; what is left is dropped with a log line. 0 drops them
	// at once.
	WebhookDrainTimeout time.Duration
}

// DefaultOptions returns the presets of dlq-practice §8 (DLQ-71): page on
// more than 10 new dead letters in 15 minutes; DLQ depth warning at 50 and
// critical at 200; queue depth, message age and not_consumed off; no
// webhooks.
func DefaultOptions() Options {
	return Options{
		Interval:           15 * time.Second,
		DLQGrowthCount:     10,
		DLQGrowthWindow:    15 * time.Minute,
		DLQDepthWarn:       50,
		DLQDepthCritical:   200,
		WebhookTimeout:     10 * time.Second,
		WebhookMaxAttempts: 8,
		WebhookBackoffBase: time.Second,
		WebhookBackoffCap:  time.Minute,
		WebhookQueueSize:   256,

		WebhookDrainTimeout: 2 * time.Second,
	}
}

// MaxGrowthWindow bounds DLQGrowthWindow (and so the per-queue buckets the
// growth rule keeps: one per minute).
const MaxGrowthWindow = 24 * time.Hour

// Validate reports every problem in o, or nil.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("alerts: "+format, args...))
	}
	if o.Interval <= 0 {
		bad("interval must be positive, got %v", o.Interval)
	}
	if o.DLQGrowthCount < 0 {
		bad("dlq growth count must not be negative, got %d", o.DLQGrowthCount)
	}
	if o.DLQGrowthWindow != 0 && (o.DLQGrowthWindow < time.Minute || o.DLQGrowthWindow > MaxGrowthWindow) {
		bad("dlq growth window must be 0 (off) or between 1m and %v, got %v", MaxGrowthWindow, o.DLQGrowthWindow)
	}
	pair := func(name string, warn, crit int64, unit func(int64) any) {
		if warn < 0 || crit < 0 {
			bad("%s thresholds must not be negative, got warning %v and critical %v", name, unit(warn), unit(crit))
		} else if warn > 0 && crit > 0 && warn > crit {
			bad("%s warning threshold %v is above the critical one %v", name, unit(warn), unit(crit))
		}
	}
	count := func(v int64) any { return v }
	pair("dlq depth", int64(o.DLQDepthWarn), int64(o.DLQDepthCritical), count)
	pair("queue depth", int64(o.QueueDepthWarn), int64(o.QueueDepthCritical), count)
	pair("oldest message age", int64(o.OldestAgeWarn), int64(o.OldestAgeCritical), func(v int64) any { return time.Duration(v) })
	if o.NotConsumedAfter < 0 {
		bad("not consumed after must not be negative, got %v", o.NotConsumedAfter)
	}
	for i, w := range o.Webhooks {
		// The URL is not repeated in the error: webhook URLs often carry
		// a secret token.
		u, err := url.Parse(w)
		switch {
		case err != nil:
			bad("webhooks[%d] is not a URL", i)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("webhooks[%d] must be an http or https URL", i)
		case u.Host == "":
			bad("webhooks[%d] has no host", i)
		}
	}
	if len(o.Webhooks) > 0 {
		if o.WebhookTimeout <= 0 {
			bad("webhook timeout must be positive, got %v", o.WebhookTimeout)
		}
		if o.WebhookMaxAttempts < 1 {
			bad("webhook max attempts must be at least 1, got %d", o.WebhookMaxAttempts)
		}
		if o.WebhookBackoffBase <= 0 || o.WebhookBackoffCap < o.WebhookBackoffBase {
			bad("webhook backoff needs 0 < base <= cap, got base %v and cap %v", o.WebhookBackoffBase, o.WebhookBackoffCap)
		}
		if o.WebhookDrainTimeout < 0 {
			bad("webhook drain timeout must not be negative, got %v", o.WebhookDrainTimeout)
		}
		if o.WebhookQueueSize < 1 {
			bad("webhook queue size must be at least 1, got %d", o.WebhookQueueSize)
		}
	}
	return errors.Join(errs...)
}
