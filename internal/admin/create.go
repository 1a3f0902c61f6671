package admin

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/engine"
)

// Defaults of a queue created through the admin API.
const (
	DefaultMaxReceiveCount = 5
	DLQRetention           = 14 * 24 * time.Hour
)

// dlqName is the name of name's own dead-letter queue.
func dlqName(name string, fifo bool) string {
	if fifo {
		return strings.TrimSuffix(name, ".fifo") + "-dlq.fifo"
	}
	return name + "-dlq"
}

// dlqChoice is which dead-letter queue a new queue gets.
type dlqChoice int

const (
	dlqOwn   dlqChoice = iota // its own, created with it: dlqName(name)
	dlqNone                   // none (a warning says so)
	dlqNamed                  // an existing queue
)

// queueCreation is a queue to create, as either create route asked for it:
// PUT /sluice/v1/queues/{name} (createQueue) and POST /sluice/v1/queues
// (newQueue, the dashboard's form) both decode their body into one and
// call createQueues, so the two routes cannot drift apart.
type queueCreation struct {
	name              string
	fifo              bool
	visibilitySeconds int // 0: the default (30 s)
	dlq               dlqChoice
	dlqTarget         string // dlqNamed: the existing dead-letter queue
	maxReceiveCount   int    // 0: DefaultMaxReceiveCount
	owner             string
	tags              map[string]string
}

// createQueues creates c's queue and, for dlqOwn, its dead-letter queue
// first (so the queue's policy can name it). It checks everything before
// creating anything: an invalid name or setting is 400 InvalidRequest, a
// named dead-letter queue that does not exist 400
// DeadLetterQueueNotFound, a name in use (the queue's or its own DLQ's)
// 409 QueueAlreadyExists. The dead-letter checks that are not green are
// logged and returned (DLQ-151).
func (h *Handler) createQueues(c queueCreation) (api.CreateQueueResponse, error) {
	var out api.CreateQueueResponse
	switch {
	case !engine.ValidQueueName(c.name):
		return out, badRequest("queue name %q: 1 to %d letters, digits, hyphens and underscores, the .fifo suffix of a FIFO queue included", c.name, engine.MaxQueueNameLength)
	case c.fifo != strings.HasSuffix(c.name, ".fifo"):
		return out, badRequest("a FIFO queue's name ends in .fifo, and only a FIFO queue's does")
	case c.maxReceiveCount < 0 || c.maxReceiveCount > 1000:
		return out, badRequest("maxReceiveCount must be between 1 and 1000 (absent: %d)", DefaultMaxReceiveCount)
	case c.visibilitySeconds < 0 || c.visibilitySeconds > 43200:
		return out, badRequest("visibilityTimeoutSeconds must be between 0 and 43200")
	}
	target := c.dlqTarget
	switch c.dlq {
	case dlqOwn:
		target = dlqName(c.name, c.fifo)
		if !engine.ValidQueueName(target) {
			return out, badRequest("queue name %q is too long for its own dead-letter queue %q (at most %d characters): shorten it or choose a dead-letter queue", c.name, target, engine.MaxQueueNameLength)
		}
	case dlqNamed:
		if _, err := h.eng.Config(target); err != nil {
			return out, &apiError{http.StatusBadRequest, "DeadLetterQueueNotFound", "the dead-letter queue " + target + " does not exist"}
		}
	}
	exists := func(n string) error {
		return &apiError{http.StatusConflict, "QueueAlreadyExists", "queue " + n + " already exists"}
	}
	for _, n := range []string{c.name, target} {
		if _, err := h.eng.Config(n); err == nil && (n == c.name || c.dlq == dlqOwn) {
			return out, exists(n)
		}
	}
	tags := map[string]string{}
	for k, v := range c.tags {
		tags[k] = v
	}
	if c.owner != "" {
		tags[advisor.OwnerTag] = c.owner
	}
	cfg := engine.DefaultQueueConfig()
	cfg.FIFO, cfg.ContentBasedDedup = c.fifo, c.fifo
	if c.visibilitySeconds > 0 {
		cfg.Visibility = time.Duration(c.visibilitySeconds) * time.Second
	}
	if c.dlq == dlqOwn {
		dcfg := engine.DefaultQueueConfig()
		dcfg.FIFO, dcfg.ContentBasedDedup = c.fifo, c.fifo
		dcfg.Retention = DLQRetention
		if _, created, err := h.eng.CreateQueue(target, dcfg, tags); err != nil {
			return out, err
		} else if !created {
			return out, exists(target) // created meanwhile by someone else
		}
	}
	if c.dlq != dlqNone {
		n := c.maxReceiveCount
		if n == 0 {
			n = DefaultMaxReceiveCount
		}
		cfg.DeadLetter = &engine.DeadLetterPolicy{Target: target, MaxReceiveCount: n}
	}
	if _, created, err := h.eng.CreateQueue(c.name, cfg, tags); err != nil {
		return out, err
	} else if !created {
		return out, exists(c.name)
	}
	h.log.Info("admin: queue created", "queue", c.name, "dlq", target)
	q, err := h.queue(c.name, true)
	if err != nil {
		return out, err
	}
	out.Queue = q
	if c.dlq == dlqOwn {
		d, err := h.queue(target, false)
		if err != nil {
			return out, err
		}
		out.DeadLetterQueue = &d
	}
	warnings := advisor.CreationWarnings(h.eng, c.name)
	if c.dlq == dlqNone {
		warnings = append(warnings, advisor.Finding{Queue: c.name, Check: advisor.CheckDLQ, Verdict: advisor.Yellow,
			Reason: "created without a dead-letter queue: a poison message would be redelivered until retention drops it"})
	}
	out.Warnings = findingsJSON(warnings)
	for _, f := range out.Warnings {
		h.log.Warn("queue configuration warning", "queue", c.name, "subject", f.Queue, "check", f.Check, "reason", f.Reason)
	}
	return out, nil
}

// createQueue serves PUT /sluice/v1/queues/{name} (sluice queues create):
// it creates a queue and, unless asked not to, its own dead-letter queue
// (see createQueues), then answers 201 with both and the warnings.
func (h *Handler) createQueue(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateQueueRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	c := queueCreation{name: r.PathValue("name"), fifo: req.FIFO, visibilitySeconds: req.VisibilityTimeoutSeconds,
		maxReceiveCount: req.MaxReceiveCount, owner: req.Owner, tags: req.Tags}
	if req.DeadLetterQueue != nil && !*req.DeadLetterQueue {
		c.dlq = dlqNone
	}
	out, err := h.createQueues(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// findingsJSON renders advisor findings; never nil, so that "warnings" is
// always a list.
func findingsJSON(fs []advisor.Finding) []api.Finding {
	out := make([]api.Finding, 0, len(fs))
	for _, f := range fs {
		out = append(out, api.Finding{Queue: f.Queue, Check: f.Check, Verdict: string(f.Verdict), Reason: f.Reason, Fix: f.Fix})
	}
	return out
}
