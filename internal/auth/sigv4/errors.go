package sigv4

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"mime"
	"net/http"
	"strings"
)

// authError is a request the middleware refuses. code is the Query code
// (Query <Code> and the x-amzn-query-error header, which is where both
// aws-sdk-go-v2 and botocore take ErrorCode from); jsonType is the JSON
// __type. msg goes to the client; reason only to the log, and neither ever
// holds a secret, a signature or an Authorization header.
type authError struct {
	code     string
	jsonType string
	status   int
	msg      string
	reason   string
}

func (e *authError) Error() string { return e.code + ": " + e.msg }

// Coral is the namespace AWS uses for errors raised before a request
// reaches the SQS model (authentication, throttling, size limits).
const coral = "com.amazon.coral.service#"

func newAuthError(code, msg, reason string) *authError {
	return &authError{code: code, jsonType: coral + code + "Exception", status: http.StatusForbidden, msg: msg, reason: reason}
}

// The error texts AWS sends.
const (
	msgMissingToken   = "Request is missing Authentication Token"
	msgInvalidToken   = "The security token included in the request is invalid."
	msgSignatureWrong = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)

func errMissingToken(reason string) *authError {
	return newAuthError("MissingAuthenticationToken", msgMissingToken, reason)
}

func errIncomplete(msg string) *authError {
	return newAuthError("IncompleteSignature", msg, msg)
}

func errInvalidToken() *authError {
	return newAuthError("InvalidClientTokenId", msgInvalidToken, "unknown access key id")
}

func errSignature(reason string) *authError {
	return newAuthError("SignatureDoesNotMatch", msgSignatureWrong, reason)
}

// errSignatureMsg is SignatureDoesNotMatch with a specific text (AWS words
// some mismatches, such as a scope date that is not the request date,
// explicitly).
func errSignatureMsg(msg string) *authError {
	return newAuthError("SignatureDoesNotMatch", msg, msg)
}

func errExpired(msg string) *authError {
	return newAuthError("RequestExpired", msg, msg)
}

// errBusy: the shared body budget stayed spent; 503 so SDKs retry.
func errBusy() *authError {
	return &authError{code: "ServiceUnavailable", jsonType: coral + "ServiceUnavailable", status: http.StatusServiceUnavailable,
		msg: "The server is busy reading other requests. Please retry.", reason: "body budget exhausted"}
}

func errBodyTooLarge(limit int64) *authError {
	return &authError{code: "RequestEntityTooLarge", jsonType: coral + "RequestEntityTooLarge", status: http.StatusRequestEntityTooLarge,
		msg: "Request body is larger than " + itoa(limit) + " bytes.", reason: "body over the cap"}
}

func errBodyUnreadable() *authError {
	return &authError{code: "MalformedQueryString", jsonType: coral + "MalformedQueryString", status: http.StatusBadRequest,
		msg: "The request body could not be read.", reason: "body read failed"}
}

// clip bounds client-supplied text echoed in an error message.
func clip(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// writeError answers in the request's protocol, in the shapes the SQS
// handler uses (docs: SQS reference §6): AWS JSON 1.0 for a JSON request,
// the Query error rendered as JSON for a Query request that accepts JSON,
// and the Query <ErrorResponse> XML otherwise. Every shape carries the
// x-amzn-query-error header and an x-amzn-RequestId.
func writeError(w http.ResponseWriter, r *http.Request, e *authError) {
	reqID := newRequestID()
	h := w.Header()
	h.Set("X-Amzn-Requestid", reqID)
	h.Set("X-Amzn-Query-Error", e.code+";Sender")
	switch {
	case isJSONRequest(r):
		body, _ := json.Marshal(map[string]string{"__type": e.jsonType, "message": e.msg})
		h.Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(e.status)
		w.Write(body)
	case acceptsJSON(r):
		body, _ := json.Marshal(map[string]any{"ErrorResponse": map[string]any{
			"Error":     map[string]string{"Type": "Sender", "Code": e.code, "Message": e.msg},
			"RequestId": reqID,
		}})
		h.Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		w.Write(body)
	default:
		var b strings.Builder
		b.WriteString(`<?xml version="1.0"?><ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><Error><Type>Sender</Type><Code>`)
		xmlText(&b, e.code)
		b.WriteString(`</Code><Message>`)
		xmlText(&b, e.msg)
		b.WriteString(`</Message><Detail/></Error><RequestId>`)
		xmlText(&b, reqID)
		b.WriteString(`</RequestId></ErrorResponse>`)
		h.Set("Content-Type", "text/xml")
		w.WriteHeader(e.status)
		w.Write([]byte(b.String()))
	}
}

func xmlText(b *strings.Builder, s string) {
	_ = xml.EscapeText(b, []byte(s))
}

// isJSONRequest mirrors the SQS handler's detection: an X-Amz-Target
// header with an application/x-amz-json-1.x (or application/json) body.
func isJSONRequest(r *http.Request) bool {
	if r.Header.Get("X-Amz-Target") == "" {
		return false
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return strings.HasPrefix(mt, "application/x-amz-json-1.") || mt == "application/json"
}

func acceptsJSON(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		if mt == "application/json" {
			return true
		}
	}
	return false
}

// newRequestID is a random (version 4) UUID.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
