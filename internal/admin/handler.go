// Package admin is Sluice's admin HTTP API: JSON endpoints under
// /sluice/v1/ to inspect queues, browse, delete, export and import
// dead-lettered messages, run redrives (move tasks), and the failure-report
// extension through which consumers attach context (error class, message,
// trace, consumer version) to a failed delivery.
//
// The package translates HTTP to the engine's dead-letter API
// (internal/engine/dlq_api.go) and maps engine errors once, in mapError. It
// never touches storage. docs/admin-api.md documents every endpoint with
// examples; the JSON shapes are the exported types of wire.go.
//
// # Caveats
//
//   - Requests are not authenticated. The server refuses non-loopback
//     listeners unless told otherwise; the admin API shares that listener.
//   - /sluice/v1/alerts belongs to another handler; the server's mux gives
//     that longer pattern precedence.
package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// Request body limits. An import carries a whole exported dead-letter queue
// (bodies up to 1 MiB each, plus JSON escaping); every other body is a
// small JSON object.
const (
	MaxImportBody  = 64 << 20
	MaxRequestBody = 1 << 20
)

// Options configure a Handler.
type Options struct {
	Logger *slog.Logger // nil: discard
	Clock  clock.Clock  // nil: clock.Real; used for ages and relative times
	// OnRequest, if set, is called after each routed request with its
	// route pattern ("POST /sluice/v1/queues/{name}/redrive", a bounded
	// set) and the HTTP status, for metrics. It must be fast.
	OnRequest func(route string, status int)
	// OtherQueues, when set, returns the queues that live outside this
	// handler's engine (a cluster's other shards, each read from its own
	// leader), for GET /sluice/v1/queues. An error answers that listing
	// 503 ServiceUnavailable: a list without a shard's queues would look
	// complete.
	OtherQueues func(ctx context.Context) ([]api.Queue, error)
	// OtherTasks is OtherQueues for GET /sluice/v1/tasks without a source:
	// the move tasks that live outside this handler's engine.
	OtherTasks func(ctx context.Context) ([]api.Task, error)
	// CheckEnvelope checks the envelope of an imported message (the
	// protocol metadata an AMQP publish stores with it) and returns why
	// it cannot be delivered as it is. nil: an import with an envelope is
	// refused.
	CheckEnvelope func(envelope []byte) error
}

// Handler serves the admin API. It is safe for concurrent use and keeps no
// state of its own: everything lives in the engine.
type Handler struct {
	eng        *engine.Engine
	other      func(ctx context.Context) ([]api.Queue, error)
	otherTasks func(ctx context.Context) ([]api.Task, error)
	checkEnv   func([]byte) error
	log        *slog.Logger
	clock      clock.Clock
	mux        *http.ServeMux
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler serving eng, to be mounted at api.Prefix:
// mux.Handle(api.Prefix, h).
func New(eng *engine.Engine, opts Options) *Handler {
	h := &Handler{eng: eng, other: opts.OtherQueues, otherTasks: opts.OtherTasks, checkEnv: opts.CheckEnvelope, log: opts.Logger, clock: opts.Clock, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	routes := []struct {
		pattern string
		fn      func(http.ResponseWriter, *http.Request) error
	}{
		{"GET /sluice/v1/queues", h.listQueues},
		{"GET /sluice/v1/queues/{name}", h.getQueue},
		{"PUT /sluice/v1/queues/{name}", h.createQueue},
		{"GET /sluice/v1/queues/{name}/messages", h.browse},
		{"GET /sluice/v1/queues/{name}/messages/{id}", h.getMessage},
		{"DELETE /sluice/v1/queues/{name}/messages/{id}", h.deleteMessage},
		{"POST /sluice/v1/queues/{name}/messages:delete", h.deleteMessages},
		{"GET /sluice/v1/queues/{name}/export", h.export},
		{"POST /sluice/v1/queues/{name}/import", h.importMessages},
		{"POST /sluice/v1/queues/{name}/redrive", h.redrive},
		{"POST /sluice/v1/queues/{name}/pause", h.pauseQueue},
		{"POST /sluice/v1/queues/{name}/resume", h.resumeQueue},
		{"POST /sluice/v1/queues", h.newQueue},
		{"DELETE /sluice/v1/queues/{name}", h.deleteQueue},
		{"POST /sluice/v1/queues/{name}/purge", h.purgeQueue},
		{"POST /sluice/v1/queues/{name}/messages", h.sendMessage},
		{"GET /sluice/v1/tasks", h.listTasks},
		{"GET /sluice/v1/tasks/{id}", h.getTask},
		{"POST /sluice/v1/tasks/{id}/cancel", h.cancelTask},
		{"POST /sluice/v1/tasks/{id}/resume", h.resumeTask},
		{"POST /sluice/v1/tasks/{id}/pause", h.pauseTask},
		{"POST /sluice/v1/failures", h.reportFailure},
	}
	for _, rt := range routes {
		hd := h.wrap(rt.fn)
		if f := opts.OnRequest; f != nil {
			hd = counted(rt.pattern, hd, f)
		}
		h.mux.Handle(rt.pattern, hd)
	}
	return h
}

// ServeHTTP routes the request. Unknown paths answer 404 and known paths
// with another method 405, both with the JSON error body.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern != "" {
		h.mux.ServeHTTP(w, r)
		return
	}
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := h.mux.Handler(probe); p != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, &apiError{http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method + " is not allowed on " + r.URL.Path})
		return
	}
	writeError(w, &apiError{http.StatusNotFound, "NotFound", "no admin endpoint at " + r.URL.Path})
}

// counted reports each request's status to f under route.
func counted(route string, next http.Handler, f func(string, int)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		f(route, sw.status)
	})
}

// statusWriter remembers the status written through it. Unwrap lets
// http.ResponseController (streaming exports) reach the real writer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// wrap turns a handler that returns an error into an http.Handler that
// renders the error once.
func (h *Handler) wrap(fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			ae := h.mapError(err)
			if ae.status >= 500 {
				h.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, ae)
		}
	})
}

// apiError is an error with its HTTP status and code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "InvalidRequest", fmt.Sprintf(format, args...)}
}

// mapError is the one place engine errors become HTTP statuses.
func (h *Handler) mapError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	var ce *engine.ConfigError
	var tooLarge *engine.MessageTooLargeError
	switch {
	case errors.As(err, &mbe):
		return &apiError{http.StatusRequestEntityTooLarge, "RequestTooLarge", fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
	case errors.Is(err, engine.ErrQueueNotFound):
		return &apiError{http.StatusNotFound, "QueueNotFound", "the queue does not exist"}
	case errors.Is(err, engine.ErrTaskNotFound):
		return &apiError{http.StatusNotFound, "TaskNotFound", "the task does not exist"}
	case errors.Is(err, engine.ErrDestinationNotFound):
		return &apiError{http.StatusBadRequest, "DestinationNotFound", "the destination queue does not exist"}
	case errors.Is(err, engine.ErrNotDeadLetterQueue):
		return &apiError{http.StatusBadRequest, "NotDeadLetterQueue", "the queue is not any queue's dead-letter queue"}
	case errors.Is(err, engine.ErrTaskRunning):
		return &apiError{http.StatusConflict, "TaskRunning", "the queue already has an active task (running, cancelling or paused)"}
	case errors.Is(err, engine.ErrTaskNotRunning):
		return &apiError{http.StatusConflict, "InvalidTaskState", "the task is not in a state that allows this"}
	case errors.Is(err, engine.ErrNoDeadLetterQueue):
		return &apiError{http.StatusConflict, "NoDeadLetterQueue", "terminal failure on a queue without a dead-letter queue; the message was left as it was"}
	case errors.Is(err, engine.ErrReceiptHandleInvalid):
		return &apiError{http.StatusBadRequest, "ReceiptHandleInvalid", "the receipt handle is malformed or belongs to another queue"}
	case errors.Is(err, engine.ErrMessageNotAvailable):
		return &apiError{http.StatusConflict, "MessageNotAvailable", "the message was deleted or received again since this receipt handle was issued"}
	case errors.Is(err, engine.ErrMessageNotInflight):
		return &apiError{http.StatusConflict, "MessageNotInflight", "the message is not in flight"}
	case errors.Is(err, engine.ErrVisibilityLimit):
		return &apiError{http.StatusBadRequest, "InvalidRetryAfter", "retryAfterSeconds must be between 0 and 43200"}
	case errors.Is(err, engine.ErrDiskFull):
		return &apiError{http.StatusServiceUnavailable, "DiskFull", "the broker's disk is nearly full; new messages are refused until space returns"}
	case errors.Is(err, engine.ErrQueueFull):
		return &apiError{http.StatusConflict, "QueueFull", "the queue is at its length limit and rejects new messages"}
	case errors.Is(err, engine.ErrPurgeInProgress):
		return &apiError{http.StatusConflict, "PurgeInProgress", "the queue was purged less than a minute ago; try again later"}
	case errors.Is(err, engine.ErrQueueDeletedRecently):
		return &apiError{http.StatusConflict, "QueueDeletedRecently", "a queue of this name was deleted less than a minute ago; try again later"}
	case errors.Is(err, engine.ErrQueueElsewhere):
		return &apiError{http.StatusConflict, "QueueElsewhere", "a queue of this name lives on another shard of this cluster"}
	case errors.Is(err, engine.ErrMissingDedupID):
		return &apiError{http.StatusBadRequest, "MissingDeduplicationId", "this FIFO queue has no content-based deduplication: give a deduplicationId"}
	case errors.As(err, &tooLarge):
		return &apiError{http.StatusBadRequest, "MessageTooLarge", fmt.Sprintf("the message is %d bytes; the queue's limit is %d", tooLarge.Size, tooLarge.Limit)}
	case errors.Is(err, engine.ErrMissingGroupID):
		return &apiError{http.StatusBadRequest, "MissingGroupId", "a FIFO queue needs a groupId on every message"}
	case errors.As(err, &ce):
		return &apiError{http.StatusBadRequest, "InvalidParameter", ce.Setting + ": " + ce.Reason}
	case errors.Is(err, engine.ErrUnavailable):
		return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable", "a part of the cluster this request needs did not answer in time; nothing was changed; retry"}
	case errors.Is(err, engine.ErrStorage):
		return &apiError{http.StatusServiceUnavailable, "StorageFailed", "the store failed; the broker accepts no changes"}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{http.StatusServiceUnavailable, "ShuttingDown", "the broker is shutting down"}
	}
	return &apiError{http.StatusInternalServerError, "InternalError", "internal error"}
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, api.ErrorBody{Error: api.ErrorDetail{Code: e.code, Message: e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the status is sent: a client gone by now cannot be told
}

// decodeBody reads one JSON object of at most MaxRequestBody bytes into v.
// Unknown fields are refused: a misspelt filter field must not widen a
// delete or a redrive.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return badRequest("the request needs a JSON body")
		}
		return badRequest("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("invalid JSON body: trailing data")
	}
	return nil
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
