package admin

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/engine"
)

// CreateQueueRequest is the body of PUT /sluice/v1/queues/{name}. Every
// field is optional.
type CreateQueueRequest struct {
	FIFO bool `json:"fifo,omitempty"`
	// VisibilityTimeoutSeconds: 0 or absent is 30.
	VisibilityTimeoutSeconds int `json:"visibilityTimeoutSeconds,omitempty"`
	// DeadLetterQueue: absent or true creates the queue's own DLQ,
	// "<name>-dlq" ("<base>-dlq.fifo" for FIFO), with a 14-day retention
	// and the queue's owner (DLQ-62, DLQ-80); false opts out (a warning
	// says so).
	DeadLetterQueue *bool `json:"deadLetterQueue,omitempty"`
	// MaxReceiveCount: 0 or absent is 5 (DLQ-02).
	MaxReceiveCount int `json:"maxReceiveCount,omitempty"`
	// Owner is the team that triages the DLQ: the "owner" tag of both.
	Owner string            `json:"owner,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
}

// CreateQueueResponse is the answer: the queue, its DLQ (absent when
// opted out) and the configuration checks that are not green (DLQ-151).
type CreateQueueResponse struct {
	Queue           Queue             `json:"queue"`
	DeadLetterQueue *Queue            `json:"deadLetterQueue,omitempty"`
	Warnings        []advisor.Finding `json:"warnings"`
}

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

// createQueue serves PUT /sluice/v1/queues/{name}: it creates a queue and,
// unless asked not to, its dead-letter queue, then answers 201 with both
// and the warnings. A name in use answers 409 QueueAlreadyExists and
// creates nothing.
func (h *Handler) createQueue(w http.ResponseWriter, r *http.Request) error {
	var req CreateQueueRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	name := r.PathValue("name")
	if req.FIFO != strings.HasSuffix(name, ".fifo") {
		return badRequest("a FIFO queue's name ends in .fifo, and only a FIFO queue's does")
	}
	if req.MaxReceiveCount < 0 || req.MaxReceiveCount > 1000 {
		return badRequest("maxReceiveCount must be between 1 and 1000 (absent: %d)", DefaultMaxReceiveCount)
	}
	withDLQ := req.DeadLetterQueue == nil || *req.DeadLetterQueue
	dlq := dlqName(name, req.FIFO)
	for _, n := range []string{name, dlq} {
		if _, err := h.eng.Config(n); err == nil && (n == name || withDLQ) {
			return &apiError{http.StatusConflict, "QueueAlreadyExists", "queue " + n + " already exists"}
		}
	}
	tags := map[string]string{}
	for k, v := range req.Tags {
		tags[k] = v
	}
	if req.Owner != "" {
		tags[advisor.OwnerTag] = req.Owner
	}
	cfg := engine.DefaultQueueConfig()
	cfg.FIFO, cfg.ContentBasedDedup = req.FIFO, req.FIFO
	if req.VisibilityTimeoutSeconds > 0 {
		cfg.Visibility = time.Duration(req.VisibilityTimeoutSeconds) * time.Second
	}
	var out CreateQueueResponse
	if withDLQ {
		dcfg := engine.DefaultQueueConfig()
		dcfg.FIFO, dcfg.ContentBasedDedup = req.FIFO, req.FIFO
		dcfg.Retention = DLQRetention
		if _, _, err := h.eng.CreateQueue(dlq, dcfg, tags); err != nil {
			return err
		}
		n := req.MaxReceiveCount
		if n == 0 {
			n = DefaultMaxReceiveCount
		}
		cfg.DeadLetter = &engine.DeadLetterPolicy{Target: dlq, MaxReceiveCount: n}
	}
	if _, _, err := h.eng.CreateQueue(name, cfg, tags); err != nil {
		return err
	}
	h.log.Info("admin: queue created", "queue", name, "dlq", withDLQ)
	q, err := h.queue(name, false)
	if err != nil {
		return err
	}
	out.Queue = q
	if withDLQ {
		d, err := h.queue(dlq, false)
		if err != nil {
			return err
		}
		out.DeadLetterQueue = &d
	}
	out.Warnings = advisor.CreationWarnings(h.eng, name)
	if !withDLQ {
		out.Warnings = append(out.Warnings, advisor.Finding{Queue: name, Check: advisor.CheckDLQ, Verdict: advisor.Yellow,
			Reason: "created without a dead-letter queue: a poison message would be redelivered until retention drops it"})
	}
	if out.Warnings == nil {
		out.Warnings = []advisor.Finding{}
	}
	for _, f := range out.Warnings {
		h.log.Warn("queue configuration warning", "queue", name, "subject", f.Queue, "check", f.Check, "reason", f.Reason)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
