// Package sqs is Sluice's Amazon SQS front-end: an http.Handler that speaks
// both SQS wire protocols, AWS JSON 1.0 and Query (form + XML), on top of the
// protocol-neutral engine, so that unmodified AWS SDKs work against Sluice by
// changing only the endpoint.
//
// The package decodes requests into protocol-neutral shapes (input.go,
// query.go), validates them against the limits of the SQS reference
// (validate.go, attributes.go), calls the engine, and renders the result or
// the error in the request's protocol (output.go, json.go, errors.go).
// Engine errors are translated once, in mapEngineErr.
//
// # Caveats
//
//   - Requests are authenticated only when internal/auth/sigv4 wraps the
//     handler; this package then authorizes them against the key's queue allow-list
//     (authz.go). Otherwise SigV4 signatures are accepted unchecked.
//   - Permissions (AddPermission, Policy) are stored and returned but not
//     enforced.
//
// Sluice extensions, all opt-in (sluice_attrs.go): Sluice* system attributes
// on receive, returned only when named, and the SluiceRetryPolicy queue
// attribute.
//
// See docs/sqs-compat.md for the full list.
package sqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/httpbody"
)

// Options configure a Handler.
type Options struct {
	AccountID string       // account id in queue URLs and ARNs; default "000000000000"
	Region    string       // region in ARNs; default "us-east-1"
	Logger    *slog.Logger // nil: discard
	Clock     clock.Clock  // nil: clock.Real
	// BodyBudget bounds the bytes of request bodies buffered across all
	// requests in flight (shared with SigV4); nil: no shared bound (each
	// body is still capped at 5 MiB and grown only as bytes arrive).
	BodyBudget *httpbody.Budget
	// OnRequest, if set, is called after each request is answered with
	// the action (one of the API's action names, or "invalid" when the
	// request named none or an unknown one, so the values are bounded)
	// and the HTTP status. It runs on the request's goroutine: it must be
	// fast (a counter's Inc).
	OnRequest func(action string, status int)

	// SendFlowBacklog turns on send back-pressure (flow.go): a send to a
	// queue with active receivers and more than this many visible
	// messages waits up to SendFlowMaxWait (default 200 ms, at most 1 s)
	// for the receivers to shrink the backlog before it is stored. 0:
	// off (the server's default is DefaultSendFlowBacklog).
	SendFlowBacklog int
	SendFlowMaxWait time.Duration
}

// Handler serves the SQS API. It is safe for concurrent use and holds no
// state of its own beyond its options and counters: queues and messages
// live in the engine.
type Handler struct {
	eng     Engine
	account string
	region  string
	log     *slog.Logger
	clock   clock.Clock
	budget  *httpbody.Budget

	onRequest func(action string, status int)
	flow      sendFlow

	bufs sync.Pool // *[]byte response buffers (writeOutput)
}

// New returns a Handler serving eng.
func New(eng Engine, opts Options) *Handler {
	h := &Handler{eng: eng, account: opts.AccountID, region: opts.Region, log: opts.Logger, clock: opts.Clock, budget: opts.BodyBudget, onRequest: opts.OnRequest}
	if h.account == "" {
		h.account = "000000000000"
	}
	if h.region == "" {
		h.region = "us-east-1"
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	if opts.SendFlowBacklog > 0 {
		h.flow.backlog = opts.SendFlowBacklog
		h.flow.maxWait = min(opts.SendFlowMaxWait, MaxSendFlowMaxWait)
		if h.flow.maxWait <= 0 {
			h.flow.maxWait = DefaultSendFlowMaxWait
		}
	}
	return h
}

// maxRequestBody caps a request body. The largest legal request is a 1 MiB
// batch; URL-encoding can triple it (%XX per byte) and JSON can double it,
// so 5 MiB leaves room for any legal request and stops anything larger
// before it is buffered.
const maxRequestBody = 5 << 20

type protocol uint8

const (
	protoJSON protocol = iota + 1
	protoQuery
)

// call is one request being served.
type call struct {
	h       *Handler
	ctx     context.Context
	proto   protocol
	jsonOut bool // render the response as JSON (JSON protocol, or Query with Accept: application/json)
	action  string
	reqID   string
	req     *http.Request // for baseURL, which few actions need
	hdr     [3]string     // response header values: request id, type, length

	// The queue named by the request path (/<account>/<name>), if any.
	pathAccount, pathQueue string

	body []byte // JSON request body
	form form   // Query fields

	sender string // SenderId for sent messages

	releaseBody func() // gives the body's bytes back to the shared budget
}

// ServeHTTP detects the protocol, decodes the request, runs the action and
// writes the response. It never answers bad input with a 5xx or plain text.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{h: h, ctx: r.Context(), reqID: newRequestID(), req: r}
	// The canonical form of x-amzn-RequestId, set directly (Header.Set
	// would allocate to canonicalise it), with its value in c.hdr.
	c.hdr[0] = c.reqID
	w.Header()["X-Amzn-Requestid"] = c.hdr[0:1:1]
	c.pathAccount, c.pathQueue = splitQueuePath(r.URL.Path)
	c.sender = senderID(r, h.account)

	out, err := c.serve(w, r)
	defer c.releaseBody()
	if err != nil {
		c.writeError(w, err)
	} else {
		c.writeOutput(w, out)
	}
	if f := h.onRequest; f != nil {
		action, status := c.action, http.StatusOK
		if err != nil {
			status = err.kind.status
			if _, _, known := lookupAction(action); !known || err.kind == kindInvalidAction {
				action = "invalid"
			}
		} else if action == "" {
			action = "invalid"
		}
		f(action, status)
	}
}

func (c *call) serve(w http.ResponseWriter, r *http.Request) (output, *apiError) {
	c.releaseBody = func() {}
	body, aerr := c.readBody(w, r)
	if aerr != nil {
		c.proto = protoQuery
		if isJSONRequest(r) {
			c.proto, c.jsonOut = protoJSON, true
		}
		return nil, aerr
	}

	if aerr := c.parse(r, body); aerr != nil {
		return nil, aerr
	}
	return c.dispatch()
}

// parse identifies the protocol and the action of a request whose body has
// been read, and keeps its fields for decode: the JSON body, or the Query
// form (the URL query merged with a form body). c.pathQueue must be set.
// serve and RouteOf both read requests through it.
func (c *call) parse(r *http.Request, body []byte) *apiError {
	if isJSONRequest(r) {
		c.proto, c.jsonOut, c.body = protoJSON, true, body
		target := r.Header.Get("X-Amz-Target")
		action, ok := strings.CutPrefix(target, "AmazonSQS.")
		if !ok || action == "" {
			return newErr(kindInvalidAction, "The action %s is not valid for this endpoint.", target)
		}
		c.action = action
		return nil
	}

	c.proto = protoQuery
	c.jsonOut = acceptsJSON(r)
	c.form = form{}
	if aerr := parseForm(c.form, r.URL.RawQuery); aerr != nil {
		return aerr
	}
	if r.Method == http.MethodPost && isFormBody(r) {
		if aerr := parseForm(c.form, string(body)); aerr != nil {
			return aerr
		}
	}
	c.action = c.form.get("Action")
	if c.action == "" {
		if c.pathQueue != "" {
			return newErr(kindUnknownOperation, "An unknown operation was requested.")
		}
		return newErr(kindMissingAction, "The request must contain the parameter Action.")
	}
	return nil
}

// readBody returns the request body: the one SigV4 already read and
// hashed, or else read here under the shared budget (never sized from
// Content-Length). The result is never modified or reused after decoding:
// decoded strings point into it.
func (c *call) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if body, ok := httpbody.FromContext(r.Context()); ok {
		return body, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, release, err := c.h.budget.Read(r.Context(), http.MaxBytesReader(w, r.Body, maxRequestBody), maxRequestBody)
	if err == nil {
		c.releaseBody = release
		return body, nil
	}
	// Declared only on the error path: errors.As takes its address, which
	// would move it to the heap on every request.
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, httpbody.ErrTooLarge) || errors.As(err, &tooBig):
		return nil, newErr(kindTooLarge, "Request body is larger than %d bytes.", maxRequestBody)
	case errors.Is(err, httpbody.ErrBusy):
		return nil, errText(kindServiceUnavailable, "The server is busy reading other requests. Please retry.")
	}
	return nil, newErr(kindMalformedQuery, "The request body could not be read.")
}

// isJSONRequest: AWS JSON 1.x is recognised by an X-Amz-Target header with
// any application/x-amz-json-1.x content type (on any path).
func isJSONRequest(r *http.Request) bool {
	if r.Header.Get("X-Amz-Target") == "" {
		return false
	}
	ct := r.Header.Get("Content-Type")
	if ct == "application/x-amz-json-1.0" {
		return true // what SDKs send; ParseMediaType allocates
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return strings.HasPrefix(mt, "application/x-amz-json-1.") || mt == "application/json"
}

func isFormBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return true // botocore and curl sometimes omit it; the body is still a form
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/x-www-form-urlencoded"
}

func acceptsJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		if mt == "application/json" {
			return true
		}
	}
	return false
}

// actionFunc runs one action.
type actionFunc func(c *call) (output, *apiError)

// lookupAction maps an action name to its implementation. queueAction says
// whether the action addresses one queue (and so may be sent to a queue path).
func lookupAction(name string) (fn actionFunc, queueAction bool, ok bool) {
	switch name {
	case "SendMessage":
		return (*call).sendMessage, true, true
	case "SendMessageBatch":
		return (*call).sendMessageBatch, true, true
	case "ReceiveMessage":
		return (*call).receiveMessage, true, true
	case "DeleteMessage":
		return (*call).deleteMessage, true, true
	case "DeleteMessageBatch":
		return (*call).deleteMessageBatch, true, true
	case "ChangeMessageVisibility":
		return (*call).changeMessageVisibility, true, true
	case "ChangeMessageVisibilityBatch":
		return (*call).changeMessageVisibilityBatch, true, true
	case "CreateQueue":
		return (*call).createQueue, false, true
	case "DeleteQueue":
		return (*call).deleteQueue, true, true
	case "GetQueueUrl":
		return (*call).getQueueURL, false, true
	case "GetQueueAttributes":
		return (*call).getQueueAttributes, true, true
	case "SetQueueAttributes":
		return (*call).setQueueAttributes, true, true
	case "ListQueues":
		return (*call).listQueues, false, true
	case "PurgeQueue":
		return (*call).purgeQueue, true, true
	case "ListDeadLetterSourceQueues":
		return (*call).listDeadLetterSourceQueues, true, true
	case "TagQueue":
		return (*call).tagQueue, true, true
	case "UntagQueue":
		return (*call).untagQueue, true, true
	case "ListQueueTags":
		return (*call).listQueueTags, true, true
	case "AddPermission":
		return (*call).addPermission, true, true
	case "RemovePermission":
		return (*call).removePermission, true, true
	case "StartMessageMoveTask":
		return (*call).startMessageMoveTask, false, true
	case "CancelMessageMoveTask":
		return (*call).cancelMessageMoveTask, false, true
	case "ListMessageMoveTasks":
		return (*call).listMessageMoveTasks, false, true
	}
	return nil, false, false
}

func (c *call) dispatch() (output, *apiError) {
	if err := c.checkAccount(); err != nil {
		return nil, err
	}
	fn, queueAction, ok := lookupAction(c.action)
	if !ok {
		return nil, newErr(kindInvalidAction, "The action %s is not valid for this endpoint.", c.action)
	}
	if c.offQueuePath(queueAction) {
		return nil, newErr(kindInvalidAction, "The action %s is not valid for this endpoint.", c.action)
	}
	if c.req != nil && (c.req.Method == http.MethodGet || c.req.Method == http.MethodHead) && !readOnlyAction(c.action) && !c.signed() {
		// A browser sends GETs from any page (<img src>, links) without
		// asking; an action that changes state must come as a POST,
		// which every SDK sends, unless it is SigV4-signed (a presigned
		// URL is itself a credential: a page holding one could use it
		// anyway).
		return nil, newErr(kindUnsupportedOperation, "The action %s changes state and must be sent with POST.", c.action)
	}
	return fn(c)
}

// offQueuePath reports whether the action may not be sent where it was: a
// Query request to a queue path must be a queue action (queueAction, from
// lookupAction). GetQueueUrl is the one non-queue action AWS serves on a
// queue path, for any queue name (AWS-recorded:
// test_get_queue_url_work_for_different_queue).
func (c *call) offQueuePath(queueAction bool) bool {
	return c.proto == protoQuery && c.pathQueue != "" && !queueAction && c.action != "GetQueueUrl"
}

// readOnlyAction reports whether an action only reads (and so may be sent
// as a GET). ReceiveMessage is not: it hides and counts messages.
func readOnlyAction(name string) bool {
	switch name {
	case "GetQueueUrl", "GetQueueAttributes", "ListQueues", "ListQueueTags",
		"ListDeadLetterSourceQueues", "ListMessageMoveTasks":
		return true
	}
	return false
}

// decode fills in from the request in its protocol.
func (c *call) decode(in queryDecoder) *apiError {
	if c.proto == protoQuery {
		return in.fromQuery(c.form)
	}
	return decodeJSON(c.body, in)
}

// queueName resolves the queue a request addresses: its QueueUrl member
// or, when that is absent, the request path. The URL is parsed leniently
// (scheme and host are ignored; the last path segment is the name), but an
// account segment must be ours.
func (c *call) queueName(queueURL string) (string, *apiError) {
	if queueURL == "" {
		if c.pathQueue == "" {
			return "", errMissing("QueueUrl")
		}
		if c.pathAccount != c.h.account {
			return "", errQueueDoesNotExist()
		}
		return c.pathQueue, c.authorize(c.pathQueue)
	}
	acct, name := splitQueueURL(queueURL)
	if name == "" {
		return "", errQueueDoesNotExist()
	}
	if acct != "" && acct != c.h.account {
		return "", errQueueDoesNotExist()
	}
	if !engine.ValidQueueName(name) {
		return "", errQueueDoesNotExist()
	}
	return name, c.authorize(name)
}

// splitQueueURL reads a QueueUrl leniently: scheme and host are ignored,
// and the last two non-empty path segments are the queue's name and (if
// there is one) its account. Neither is checked.
func splitQueueURL(queueURL string) (account, name string) {
	p := queueURL
	if i := strings.Index(p, "://"); i >= 0 {
		p = p[i+3:]
		if j := strings.IndexByte(p, '/'); j >= 0 {
			p = p[j:]
		} else {
			p = ""
		}
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	name, rest := lastSegment(p)
	account, _ = lastSegment(rest)
	return account, name
}

// lastSegment returns the last non-empty "/"-separated segment of p and
// what precedes it.
func lastSegment(p string) (seg, rest string) {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	return p[i+1:], p[:max(i, 0)]
}

// splitQueuePath recognises a queue path "/<account>/<name>".
func splitQueuePath(p string) (account, name string) {
	p = strings.Trim(p, "/")
	account, name, ok := strings.Cut(p, "/")
	if !ok || account == "" || name == "" || strings.Contains(name, "/") {
		return "", ""
	}
	return account, name
}

// baseURL is scheme://host of the queue URLs for this request: the Host
// header, and https when the request came over TLS ([tls]) or a proxy says
// so with X-Forwarded-Proto.
func baseURL(r *http.Request) string {
	scheme := "http"
	if proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ","); r.TLS != nil || strings.EqualFold(strings.TrimSpace(proto), "https") {
		scheme = "https"
	}
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	return scheme + "://" + host
}

func (c *call) queueURL(name string) string {
	base := ""
	if c.req != nil {
		base = baseURL(c.req)
	}
	return base + "/" + c.h.account + "/" + name
}

// queueARN is arn:aws:sqs:<region>:<account>:<name>.
func (h *Handler) queueARN(name string) string {
	return "arn:aws:sqs:" + h.region + ":" + h.account + ":" + name
}

// senderID is the SenderId recorded on sent messages: the access key id of
// the SigV4 credential when there is one (signatures are not verified), or
// else the account id.
func senderID(r *http.Request, account string) string {
	auth := r.Header.Get("Authorization")
	if _, cred, ok := strings.Cut(auth, "Credential="); ok {
		if akid, _, ok := strings.Cut(cred, "/"); ok && akid != "" && validSenderID(akid) {
			return akid
		}
	}
	if r.URL.RawQuery == "" {
		return account
	}
	if cred := r.URL.Query().Get("X-Amz-Credential"); cred != "" {
		if akid, _, ok := strings.Cut(cred, "/"); ok && akid != "" && validSenderID(akid) {
			return akid
		}
	}
	return account
}

func validSenderID(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9') {
			return false
		}
	}
	return true
}

// newRequestID is a random (version 4) UUID, built in one allocation.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
