package admin

import (
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Everyday queue management for the dashboard: create and delete a queue,
// purge it, send a message. They do what the SQS actions of the same names
// do, with the admin API's JSON and errors; the dashboard puts a
// confirmation naming the consequence in front of each.

// NewQueueRequest is the body of POST /sluice/v1/queues, the dashboard's
// form: the dead-letter queue, if any, is one that exists. PUT
// /sluice/v1/queues/{name} (create.go) makes a queue with its own DLQ.
type NewQueueRequest struct {
	Name string `json:"name"`
	// FIFO requires a name ending in .fifo, as SQS.
	FIFO bool `json:"fifo,omitempty"`
	// DeadLetterQueue and MaxReceiveCount set a dead-letter policy; the
	// dead-letter queue must exist and be of the same type.
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount,omitempty"`
	// VisibilityTimeoutSeconds: 0 keeps the default (30 s).
	VisibilityTimeoutSeconds int `json:"visibilityTimeoutSeconds,omitempty"`
}

// SendRequest is the body of POST /sluice/v1/queues/{name}/messages.
type SendRequest struct {
	Body string `json:"body"`
	// Attributes are String message attributes, name → value.
	Attributes      map[string]string `json:"attributes,omitempty"`
	GroupID         string            `json:"groupId,omitempty"`
	DeduplicationID string            `json:"deduplicationId,omitempty"`
}

// SendResult is the answer of a send.
type SendResult struct {
	MessageID      string `json:"messageId"`
	SequenceNumber string `json:"sequenceNumber,omitempty"`
}

// PurgeResult is the answer of a purge.
type PurgeResult struct {
	Purged int `json:"purged"`
}

// queueNameRE is the SQS rule: 1–80 letters, digits, - and _, plus .fifo.
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// newQueue serves POST /sluice/v1/queues: 201 and the queue, or 409
// QueueExists when a queue of that name exists.
func (h *Handler) newQueue(w http.ResponseWriter, r *http.Request) error {
	var req NewQueueRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	base, isFIFOName := strings.CutSuffix(req.Name, ".fifo")
	switch {
	case !queueNameRE.MatchString(base):
		return badRequest("queue name %q: 1 to 80 letters, digits, hyphens and underscores (plus .fifo for a FIFO queue)", req.Name)
	case req.FIFO != isFIFOName:
		return badRequest("a FIFO queue's name ends in .fifo, and only a FIFO queue's does")
	case (req.DeadLetterQueue == "") != (req.MaxReceiveCount == 0):
		return badRequest("deadLetterQueue and maxReceiveCount go together")
	case req.MaxReceiveCount < 0 || req.MaxReceiveCount > 1000:
		return badRequest("maxReceiveCount must be between 1 and 1000")
	case req.VisibilityTimeoutSeconds < 0 || req.VisibilityTimeoutSeconds > 43200:
		return badRequest("visibilityTimeoutSeconds must be between 0 and 43200")
	}
	if _, err := h.eng.GetQueue(req.Name); err == nil {
		return &apiError{http.StatusConflict, "QueueExists", "a queue named " + req.Name + " already exists"}
	}
	cfg := engine.DefaultQueueConfig()
	cfg.FIFO = req.FIFO
	if req.VisibilityTimeoutSeconds > 0 {
		cfg.Visibility = time.Duration(req.VisibilityTimeoutSeconds) * time.Second
	}
	if req.DeadLetterQueue != "" {
		if _, err := h.eng.GetQueue(req.DeadLetterQueue); err != nil {
			return &apiError{http.StatusBadRequest, "DeadLetterQueueNotFound", "the dead-letter queue " + req.DeadLetterQueue + " does not exist"}
		}
		cfg.DeadLetter = &engine.DeadLetterPolicy{Target: req.DeadLetterQueue, MaxReceiveCount: req.MaxReceiveCount}
	}
	if _, _, err := h.eng.CreateQueue(req.Name, cfg, nil); err != nil {
		return err
	}
	q, err := h.queue(req.Name, true)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, q)
	return nil
}

// deleteQueue serves DELETE /sluice/v1/queues/{name}: the queue and its
// messages are gone (204).
func (h *Handler) deleteQueue(w http.ResponseWriter, r *http.Request) error {
	if err := h.eng.DeleteQueue(r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// purgeQueue serves POST /sluice/v1/queues/{name}/purge: every message is
// deleted, as SQS PurgeQueue (at most once a minute per queue: 409
// PurgeInProgress). The answer counts the messages there were.
func (h *Handler) purgeQueue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	info, err := h.eng.GetQueue(name)
	if err != nil {
		return err
	}
	if err := h.eng.PurgeQueue(name); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, PurgeResult{Purged: info.Visible + info.InFlight + info.Delayed})
	return nil
}

// sendMessage serves POST /sluice/v1/queues/{name}/messages: one message,
// as SQS SendMessage.
func (h *Handler) sendMessage(w http.ResponseWriter, r *http.Request) error {
	var req SendRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Body == "" {
		return badRequest("the message body must not be empty")
	}
	m := engine.Message{Body: []byte(req.Body), GroupID: req.GroupID, DedupID: req.DeduplicationID, SenderID: "sluice-dashboard"}
	for _, k := range sortedKeys(req.Attributes) {
		if k == "" {
			return badRequest("an attribute needs a name")
		}
		m.Attributes = append(m.Attributes, engine.Attribute{Name: k, DataType: "String", StringValue: req.Attributes[k]})
	}
	res, err := h.eng.Send(r.PathValue("name"), []engine.Message{m})
	if err != nil {
		return err
	}
	if res[0].Err != nil {
		return res[0].Err
	}
	writeJSON(w, http.StatusCreated, SendResult{MessageID: res[0].MessageID, SequenceNumber: res[0].SequenceNumber})
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
