package sigv4

import (
	"encoding/json"
	"net/http"
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

// Error is a refusal as the client sees it, for Options.ErrorWriter: the
// code (Query <Code> and the x-amzn-query-error header, where both
// aws-sdk-go-v2 and botocore read ErrorCode), the JSON __type, the HTTP
// status and the message.
type Error struct {
	Code, JSONType string
	Status         int
	Message        string
}

func (e *authError) public() Error {
	return Error{Code: e.code, JSONType: e.jsonType, Status: e.status, Message: e.msg}
}

// writeError renders a refusal with the ErrorWriter, or, without one, as
// a bare AWS JSON error.
func (v *verifier) writeError(w http.ResponseWriter, r *http.Request, e *authError) {
	if v.errorWriter != nil {
		v.errorWriter(w, r, e.public())
		return
	}
	body, _ := json.Marshal(map[string]string{"__type": e.jsonType, "message": e.msg})
	w.Header().Set("X-Amzn-Query-Error", e.code+";Sender")
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(e.status)
	w.Write(body)
}
