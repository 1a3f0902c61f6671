package admin

import (
	"net/http"
	"sort"

	"github.com/sluicemq/sluice/internal/engine"
)

// Everyday queue management for the dashboard: create and delete a queue,
// purge it, send a message. They do what the SQS actions of the same names
// do, with the admin API's JSON and errors; the dashboard puts a
// confirmation naming the consequence in front of each.

// NewQueueRequest is the body of POST /sluice/v1/queues, the dashboard's
// form. It creates the queue as PUT /sluice/v1/queues/{name} (create.go)
// does, through the same code (createQueues), with the dead-letter queue
// the form chose: none (the default), an existing one (DeadLetterQueue),
// or its own (OwnDeadLetterQueue, as PUT's default).
type NewQueueRequest struct {
	Name string `json:"name"`
	// FIFO requires a name ending in .fifo, as SQS.
	FIFO bool `json:"fifo,omitempty"`
	// DeadLetterQueue and MaxReceiveCount set a dead-letter policy; the
	// dead-letter queue must exist and be of the same type.
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
	// OwnDeadLetterQueue creates the queue's own dead-letter queue,
	// "<name>-dlq" ("<base>-dlq.fifo"), with it; MaxReceiveCount is then
	// optional (absent: 5). Not with DeadLetterQueue.
	OwnDeadLetterQueue bool `json:"ownDeadLetterQueue,omitempty"`
	MaxReceiveCount    int  `json:"maxReceiveCount,omitempty"`
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

// newQueue serves POST /sluice/v1/queues: 201 and the queue (the
// warnings of createQueues are logged), or the errors of createQueues.
func (h *Handler) newQueue(w http.ResponseWriter, r *http.Request) error {
	var req NewQueueRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	c := queueCreation{name: req.Name, fifo: req.FIFO, visibilitySeconds: req.VisibilityTimeoutSeconds,
		maxReceiveCount: req.MaxReceiveCount, dlq: dlqNone}
	switch {
	case req.OwnDeadLetterQueue && req.DeadLetterQueue != "":
		return badRequest("deadLetterQueue names an existing dead-letter queue, ownDeadLetterQueue creates one: not both")
	case req.OwnDeadLetterQueue:
		c.dlq = dlqOwn
	case (req.DeadLetterQueue == "") != (req.MaxReceiveCount == 0):
		return badRequest("deadLetterQueue and maxReceiveCount go together")
	case req.DeadLetterQueue != "":
		c.dlq, c.dlqTarget = dlqNamed, req.DeadLetterQueue
	}
	out, err := h.createQueues(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out.Queue)
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
