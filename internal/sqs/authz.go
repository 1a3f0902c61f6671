package sqs

import (
	"net/http"
	"strings"

	"github.com/sluicemq/sluice/internal/auth/sigv4"
)

// Authorization: the per-key queue allow-list.
//
// SigV4 (internal/auth/sigv4) only authenticates: it puts the request's
// Principal in the context and knows nothing of SQS actions. The allow-list
// is checked here, after decoding, on the very names the action is about to
// use: every place a handler turns a request member into a queue name
// (queueName for QueueUrl and the queue path, arnQueue for move task ARNs,
// a move task handle's source, a RedrivePolicy's dead-letter target,
// CreateQueue's and GetQueueUrl's QueueName) calls authorize. There is no
// second parser that could read a different copy of a member than the one
// executed: a duplicated or differently-cased member is whatever the one
// decoder makes of it, for the check and for the action alike. (RouteOf,
// route.go, reads the same members through the same decoders to find where
// a request goes, and authorizes nothing: the handler that serves the
// request does.)
//
// Refusals are 403 AccessDenied (SQS's modelled AccessDeniedException).
// StartMessageMoveTask without a DestinationArn moves messages back to their
// original sources, whatever those are, so it is refused for a restricted
// key. ListQueues names no queue and is allowed.

var kindAccessDenied = &errorKind{"AccessDenied", "AccessDeniedException", "", 403}

func errAccessDenied(resource string) *apiError {
	return newErr(kindAccessDenied, "Access to the resource %s is denied.", clipText(resource))
}

// authorize reports whether the request's principal may address queue
// name. A request without a principal (no SigV4 configured) may address
// every queue.
func (c *call) authorize(name string) *apiError {
	p, ok := sigv4.PrincipalFromContext(c.ctx)
	if !ok || p.Allows(name) {
		return nil
	}
	return errAccessDenied(name)
}

// checkAccount refuses a key bound to another account: Sluice serves one
// account (Options.AccountID), so such a key may use nothing here, not
// even ListQueues.
func (c *call) checkAccount() *apiError {
	p, ok := sigv4.PrincipalFromContext(c.ctx)
	if !ok || p.Account == "" || p.Account == c.h.account {
		return nil
	}
	return errAccessDenied("account " + c.h.account)
}

// signed reports whether SigV4 authenticated the request.
func (c *call) signed() bool {
	_, ok := sigv4.PrincipalFromContext(c.ctx)
	return ok
}

// restricted reports whether the principal is limited to some queues.
func (c *call) restricted() bool {
	p, ok := sigv4.PrincipalFromContext(c.ctx)
	return ok && p.Restricted()
}

// clipText bounds client-supplied text echoed in an error message.
func clipText(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// WriteAuthError renders a refusal from SigV4 (code, JSON __type, status,
// message) in the request's protocol, with the same shapes and headers as
// every other SQS error. Pass it as sigv4.Options.ErrorWriter.
func (h *Handler) WriteAuthError(w http.ResponseWriter, r *http.Request, e sigv4.Error) {
	c := &call{h: h, ctx: r.Context(), reqID: newRequestID(), req: r, proto: protoQuery, jsonOut: acceptsJSON(r)}
	if isJSONRequest(r) {
		c.proto, c.jsonOut = protoJSON, true
	}
	w.Header()["X-Amzn-Requestid"] = []string{c.reqID}
	ns, shape, _ := strings.Cut(e.JSONType, "#")
	c.writeError(w, &apiError{kind: &errorKind{code: e.Code, shape: shape, ns: ns, status: e.Status}, msg: e.Message})
}
