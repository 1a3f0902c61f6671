package admin

import (
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/auth/sigv4"
	"github.com/sluicemq/sluice/internal/engine"
)

// reportFailure serves POST /sluice/v1/failures, the failure-report
// extension: a consumer that holds a lease (an SQS receipt handle) says
// that processing failed, why, and whether retrying can help. The engine
// records the context on the message and either dead-letters it (terminal,
// or its receive count has reached maxReceiveCount) or schedules its next
// delivery. See engine.ReportFailure for the exact rules.
func (h *Handler) reportFailure(w http.ResponseWriter, r *http.Request) error {
	var req api.FailureReport
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	queue, f, err := decodeFailure(&req)
	if err != nil {
		return err
	}
	// A worker's SigV4 key (the server routes signed reports through
	// SigV4) may report on the queues it may use, nothing else.
	if p, ok := sigv4.PrincipalFromContext(r.Context()); ok && !p.Allows(queue) {
		return &apiError{http.StatusForbidden, "AccessDenied", "this key may not use queue " + queue}
	}
	out, err := h.eng.ReportFailure(queue, req.ReceiptHandle, f)
	if err != nil {
		return err
	}
	res := api.FailureOutcome{DeadLettered: out.DeadLettered, Target: out.Target}
	if !out.DeadLettered {
		res.VisibleAt = timePtr(out.VisibleAt)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// decodeFailure validates a report and returns the queue name and the
// engine's Failure.
func decodeFailure(req *api.FailureReport) (string, engine.Failure, error) {
	queue := req.Queue
	if req.QueueURL != "" {
		name, err := queueFromURL(req.QueueURL)
		if err != nil {
			return "", engine.Failure{}, err
		}
		if queue != "" && queue != name {
			return "", engine.Failure{}, badRequest("queue %q and queueUrl %q name different queues", queue, req.QueueURL)
		}
		queue = name
	}
	if queue == "" {
		return "", engine.Failure{}, badRequest("queueUrl or queue is required")
	}
	if req.ReceiptHandle == "" {
		return "", engine.Failure{}, badRequest("receiptHandle is required")
	}
	f := engine.Failure{
		ErrorClass:      req.ErrorClass,
		Message:         req.ErrorMessage,
		Trace:           req.Trace,
		ConsumerID:      req.ConsumerID,
		ConsumerVersion: req.ConsumerVersion,
		Terminal:        req.Terminal,
	}
	if s := req.RetryAfterSeconds; s != nil {
		if math.IsNaN(*s) || *s < 0 || *s > engine.MaxVisibility.Seconds() {
			return "", engine.Failure{}, &apiError{http.StatusBadRequest, "InvalidRetryAfter", "retryAfterSeconds must be between 0 and 43200"}
		}
		if req.Terminal {
			return "", engine.Failure{}, badRequest("retryAfterSeconds makes no sense with terminal: true")
		}
		f.RetryAfter, f.RetryAfterSet = time.Duration(*s*float64(time.Second)), true
	}
	return queue, f, nil
}

// queueFromURL returns the queue name of an SQS queue URL: its last path
// segment (http://host:9324/000000000000/orders → orders).
func queueFromURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", badRequest("queueUrl is not a URL: %q", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	name := p[strings.LastIndexByte(p, '/')+1:]
	if name == "" {
		return "", badRequest("queueUrl %q has no queue name as its last path segment", raw)
	}
	return name, nil
}
