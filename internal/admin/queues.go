package admin

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

// listQueues serves GET /sluice/v1/queues: every queue, sorted by name
// (with Options.OtherQueues, those of the other shards too).
func (h *Handler) listQueues(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.Query()) > 0 {
		return badRequest("GET /queues takes no query parameters")
	}
	out, err := h.localQueues()
	if err != nil {
		return err
	}
	if h.other != nil {
		more, err := h.other(r.Context())
		if err != nil {
			return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable", "the queues of another shard could not be listed (" + err.Error() + "); retry"}
		}
		out.Queues = append(out.Queues, more...)
		slices.SortFunc(out.Queues, func(a, b api.Queue) int { return strings.Compare(a.Name, b.Name) })
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ServeLocalQueues answers GET /sluice/v1/queues for this handler's engine
// alone, without Options.OtherQueues: what a cluster's shard 0 reads from
// the other shards' leaders.
func (h *Handler) ServeLocalQueues(w http.ResponseWriter, r *http.Request) {
	h.wrap(func(w http.ResponseWriter, _ *http.Request) error {
		out, err := h.localQueues()
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}).ServeHTTP(w, r)
}

// localQueues lists this handler's engine's queues, sorted by name.
func (h *Handler) localQueues() (api.QueueList, error) {
	out := api.QueueList{Queues: []api.Queue{}}
	for _, name := range h.eng.ListQueues("") {
		q, err := h.queue(name, false)
		if errors.Is(err, engine.ErrQueueNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return api.QueueList{}, err
		}
		out.Queues = append(out.Queues, q)
	}
	return out, nil
}

// getQueue serves GET /sluice/v1/queues/{name}: the summary plus the full
// configuration, tags and timestamps.
func (h *Handler) getQueue(w http.ResponseWriter, r *http.Request) error {
	q, err := h.queue(r.PathValue("name"), true)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, q)
	return nil
}

func (h *Handler) queue(name string, detail bool) (api.Queue, error) {
	info, err := h.eng.GetQueue(name)
	if err != nil {
		return api.Queue{}, err
	}
	all := h.eng.DeadLetterQueues()
	sources := all[name]
	if sources == nil {
		sources = []string{}
	}
	c := &info.Config
	q := api.Queue{
		Name:              info.Name,
		FIFO:              c.FIFO,
		Visible:           info.Visible,
		InFlight:          info.InFlight,
		Delayed:           info.Delayed,
		Waiting:           info.Waiting,
		IsDeadLetterQueue: len(sources) > 0,
		Sources:           sources,
		Counters: api.Counters{
			Sent: info.Sent, Received: info.Received, Redelivered: info.Redelivered,
			Deleted: info.Deleted, DeadLettered: info.DeadLettered, Expired: info.Expired,
		},
		RetryPolicy: retryPolicyJSON(c.Retry),
		Paused:      c.Paused,
	}
	if !info.OldestSentAt.IsZero() {
		q.OldestAgeSeconds = max(0, h.clock.Now().Sub(info.OldestSentAt).Seconds())
	}
	if dl := c.DeadLetter; dl != nil {
		q.DeadLetterQueue, q.MaxReceiveCount = dl.Target, dl.MaxReceiveCount
		if dl.Routed {
			// An AMQP dead-letter exchange: name the first queue it
			// reaches.
			for dlq, srcs := range all {
				if slices.Contains(srcs, name) && (q.DeadLetterQueue == "" || dlq < q.DeadLetterQueue) {
					q.DeadLetterQueue = dlq
				}
			}
		}
	}
	if !detail {
		return q, nil
	}
	cfg := &api.QueueConfig{
		FIFO:                c.FIFO,
		ContentBasedDedup:   c.ContentBasedDedup,
		FifoThroughputLimit: c.FifoThroughputLimit,
		DelaySeconds:        seconds(c.Delay),
		MaxMessageSize:      c.MaxMessageSize,
		RetentionSeconds:    seconds(c.Retention),
		ReceiveWaitSeconds:  seconds(c.ReceiveWait),
		VisibilitySeconds:   seconds(c.Visibility),
		Retry:               retryPolicyJSON(c.Retry),
		Extra:               c.Extra,
	}
	if c.FIFO {
		cfg.DedupScope = "queue"
		if c.DedupScope == engine.DedupScopeMessageGroup {
			cfg.DedupScope = "messageGroup"
		}
	}
	if dl := c.DeadLetter; dl != nil {
		cfg.DeadLetter = &api.DeadLetterPolicy{Target: dl.Target, MaxReceiveCount: dl.MaxReceiveCount}
	}
	if ra := c.RedriveAllow; ra != nil {
		cfg.RedriveAllow = &api.RedriveAllowPolicy{Permission: ra.Permission, SourceQueues: ra.SourceQueues}
	}
	q.Config = cfg
	q.Tags = info.Tags
	q.CreatedAt, q.ModifiedAt = timePtr(info.CreatedAt), timePtr(info.ModifiedAt)
	return q, nil
}

// pauseQueue serves POST /sluice/v1/queues/{name}/pause: delivery from the
// queue is held (receives and AMQP consumers get nothing) while its
// messages stay visible; it answers the queue. Durable, and kept across
// restarts, until POST …/resume.
func (h *Handler) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	return h.setPaused(w, r, true)
}

// resumeQueue serves POST /sluice/v1/queues/{name}/resume.
func (h *Handler) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	return h.setPaused(w, r, false)
}

func (h *Handler) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	name := r.PathValue("name")
	if err := h.eng.SetPaused(name, paused); err != nil {
		return err
	}
	h.log.Info("admin: queue delivery paused or resumed", "queue", name, "paused", paused)
	q, err := h.queue(name, false)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, q)
	return nil
}
