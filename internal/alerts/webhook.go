package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// Notification is the JSON body POSTed to every webhook when an alert
// starts firing or resolves. EndsAt is present only when resolved.
type Notification struct {
	Rule      string     `json:"rule"`
	Queue     string     `json:"queue"`
	Severity  string     `json:"severity"`
	Status    string     `json:"status"` // "firing" or "resolved"
	Value     float64    `json:"value"`
	Threshold float64    `json:"threshold"`
	StartsAt  time.Time  `json:"startsAt"`
	EndsAt    *time.Time `json:"endsAt,omitempty"`
	Message   string     `json:"message"`
}

func (a *alert) notification() Notification {
	n := Notification{
		Rule: a.Rule, Queue: a.Queue, Severity: a.Severity, Status: a.Status,
		Value: a.Value, Threshold: a.Threshold, StartsAt: a.startsAt, Message: a.Message,
	}
	if a.Status == StatusResolved {
		end := a.Since
		n.EndsAt = &end
	}
	return n
}

// webhook is one webhook's queue and sender. Notifications go out one at a
// time, in order; a notification is retried until delivered or out of
// attempts before the next one is sent.
//
// Logs name a webhook by its index in Options.Webhooks and its host, never
// by its URL, which often carries a secret.
type webhook struct {
	m      *Manager
	idx    int
	url    string
	host   string
	client *http.Client
	queue  chan Notification

	delivered, failed, dropped atomic.Uint64
}

func newWebhook(m *Manager, idx int, raw string) *webhook {
	u, _ := url.Parse(raw) // checked by Validate
	return &webhook{
		m:      m,
		idx:    idx,
		url:    raw,
		host:   u.Host,
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		queue:  make(chan Notification, m.opts.WebhookQueueSize),
	}
}

func (h *webhook) attrs(n Notification, more ...any) []any {
	return append([]any{"webhook", h.idx, "host", h.host, "rule", n.Rule, "queue", n.Queue, "severity", n.Severity, "status", n.Status}, more...)
}

// enqueue hands n to the sender without blocking. When the queue is full
// the oldest notification is dropped, with a log line: the newest state is
// the one worth delivering.
func (h *webhook) enqueue(n Notification) {
	for range 2 {
		select {
		case h.queue <- n:
			return
		default:
		}
		select {
		case old := <-h.queue:
			h.dropped.Add(1)
			h.m.log.Warn("alerts: webhook queue full; dropped the oldest notification", h.attrs(old)...)
		default:
		}
	}
	h.dropped.Add(1)
	h.m.log.Warn("alerts: webhook queue full; dropped a notification", h.attrs(n)...)
}

// run sends queued notifications until ctx ends, then drains.
func (h *webhook) run(ctx context.Context) {
	defer h.client.CloseIdleConnections()
	for {
		select {
		case <-ctx.Done():
			h.drain(nil)
			return
		case n := <-h.queue:
			if !h.deliver(ctx, n) {
				h.drain(&n)
				return
			}
		}
	}
}

// deliver sends n, retrying with backoff on the Manager's clock. It
// returns false when ctx ended before n was settled.
func (h *webhook) deliver(ctx context.Context, n Notification) bool {
	body, err := json.Marshal(n)
	if err != nil { // cannot happen: Notification has no unencodable fields
		h.failed.Add(1)
		h.m.log.Error("alerts: cannot encode notification", h.attrs(n, "err", err)...)
		return true
	}
	max := h.m.opts.WebhookMaxAttempts
	for attempt := 1; ; attempt++ {
		retry, err := h.post(ctx, body)
		if err == nil {
			h.delivered.Add(1)
			h.m.log.Debug("alerts: webhook notified", h.attrs(n, "attempt", attempt)...)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !retry || attempt >= max {
			h.failed.Add(1)
			h.m.log.Error("alerts: webhook delivery failed; giving up", h.attrs(n, "attempts", attempt, "err", err)...)
			return true
		}
		wait := h.backoff(attempt)
		h.m.log.Warn("alerts: webhook delivery failed; will retry", h.attrs(n, "attempt", attempt, "retry_in", wait, "err", err)...)
		t := h.m.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// backoff is the wait after the given failed attempt (1-based): full
// jitter, uniform(0, min(cap, base·2^(attempt-1))).
func (h *webhook) backoff(attempt int) time.Duration {
	base, limit := h.m.opts.WebhookBackoffBase, h.m.opts.WebhookBackoffCap
	ceil := base
	for i := 1; i < attempt && ceil < limit; i++ {
		ceil *= 2
	}
	ceil = min(ceil, limit)
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// post makes one attempt, bounded by WebhookTimeout. retry says whether
// another attempt could succeed: not after a 4xx other than 408 and 429.
func (h *webhook) post(ctx context.Context, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.m.opts.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return false, errors.New("cannot build the request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-alerts")
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL and its secrets
		}
		return true, err
	}
	// Drained only so the connection can be reused; the status decides.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return false, nil
	}
	c := resp.StatusCode
	return c >= 500 || c == http.StatusRequestTimeout || c == http.StatusTooManyRequests, fmt.Errorf("webhook answered %s", resp.Status)
}

// drain runs at shutdown: it makes one attempt for first (a notification
// interrupted mid-delivery) and each queued notification, all within
// WebhookDrainTimeout of real time, and drops the rest with a log line.
func (h *webhook) drain(first *Notification) {
	ctx, cancel := context.WithTimeout(context.Background(), h.m.opts.WebhookDrainTimeout)
	defer cancel()
	var sent, dropped int
	try := func(n Notification) {
		if ctx.Err() == nil {
			if body, err := json.Marshal(n); err == nil {
				if _, err := h.post(ctx, body); err == nil {
					h.delivered.Add(1)
					sent++
					return
				}
			}
		}
		h.dropped.Add(1)
		dropped++
	}
	if first != nil {
		try(*first)
	}
	for {
		select {
		case n := <-h.queue:
			try(n)
			continue
		default:
		}
		break
	}
	switch {
	case dropped > 0:
		h.m.log.Warn("alerts: webhook stopped; dropped undelivered notifications", "webhook", h.idx, "host", h.host, "delivered", sent, "dropped", dropped)
	case sent > 0:
		h.m.log.Info("alerts: webhook stopped; delivered the queued notifications", "webhook", h.idx, "host", h.host, "delivered", sent)
	}
}
