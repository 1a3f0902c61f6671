// Package sigv4 authenticates requests to Sluice's SQS API with AWS
// Signature Version 4, the scheme every AWS SDK signs SQS requests with.
//
// Middleware wraps the SQS handler. It verifies both forms the SDKs
// produce: the Authorization header
//
//	Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/sqs/aws4_request,
//	    SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=<hex>
//
// with X-Amz-Date (or Date), and presigned URLs (X-Amz-Algorithm,
// X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders,
// X-Amz-Signature in the query string). The canonical request is built as
// aws-sdk-go-v2 and botocore build it for a non-S3 service (canonical.go).
// The body is read (up to MaxBody, under the shared BodyBudget, never sized
// from Content-Length) to hash it, and handed on in the request context
// (httpbody.FromContext) so the SQS handler does not read it again.
//
// The middleware only authenticates. A request that fails is answered 403
// in the request's protocol with one of the codes AWS uses:
// MissingAuthenticationToken, IncompleteSignature, InvalidClientTokenId,
// SignatureDoesNotMatch, RequestExpired. A request that passes reaches the
// next handler with its Principal in the context (PrincipalFromContext);
// the SQS handler authorizes it (the Principal's queue allow-list) on the
// request it decoded, so there is one SQS parser, not two.
//
// Not verified: IAM policies and SQS queue policies (AddPermission), and
// session tokens (X-Amz-Security-Token is signed like any header but not
// checked against anything; only long-term keys are configured). See
// docs/security.md.
package sigv4

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/httpbody"
)

// Credentials is one access key Sluice accepts.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	// Account, when set, binds the key to that account: the SQS handler
	// refuses every request of a key bound to an account other than the
	// server's (account_id) with AccessDenied.
	Account string
	// Queues, when not empty, limits the key to these queue names. An
	// entry ending in "*" matches every name with that prefix ("orders-*");
	// "*" alone matches everything.
	Queues []string
}

// Options configure Middleware.
type Options struct {
	// Region the credential scope must name. Empty accepts any region
	// (the signature is still checked against the region the client
	// used).
	Region      string
	Credentials []Credentials
	// MaxSkew is how far X-Amz-Date may be from the clock, either way.
	// Zero means 15 minutes, as AWS.
	MaxSkew time.Duration
	// MaxBody caps the body read to hash it. Zero means 5 MiB, the SQS
	// handler's own cap.
	MaxBody int64
	// BodyBudget bounds the bytes of bodies buffered across all requests
	// in flight (shared with the SQS handler); nil: no shared bound.
	BodyBudget *httpbody.Budget
	// ErrorWriter renders a refusal in the request's protocol (the SQS
	// handler's WriteAuthError, so SQS errors have one renderer). nil: a
	// bare AWS JSON error body.
	ErrorWriter func(w http.ResponseWriter, r *http.Request, e Error)
	Clock       clock.Clock  // nil: clock.Real
	Logger      *slog.Logger // nil: discard
}

// Defaults.
const (
	DefaultMaxSkew = 15 * time.Minute
	DefaultMaxBody = 5 << 20
	// maxPresignExpiry is the longest X-Amz-Expires AWS accepts (7 days).
	maxPresignExpiry = 7 * 24 * 3600
)

// Validate reports the first problem with the credentials: an empty key
// id or secret, a key id a Credential scope cannot carry, or a key id
// given twice. Run it when loading configuration; Middleware skips (and
// logs) entries Validate would refuse.
func (o Options) Validate() error {
	seen := make(map[string]bool, len(o.Credentials))
	for i, c := range o.Credentials {
		if err := c.validate(); err != nil {
			return fmt.Errorf("sqs credentials #%d: %w", i+1, err)
		}
		if seen[c.AccessKeyID] {
			return fmt.Errorf("sqs credentials #%d: access key id %s is given twice", i+1, c.AccessKeyID)
		}
		seen[c.AccessKeyID] = true
	}
	if o.MaxSkew < 0 || o.MaxBody < 0 {
		return errors.New("sqs auth: max skew and max body must not be negative")
	}
	return nil
}

func (c Credentials) validate() error {
	switch {
	case c.AccessKeyID == "":
		return errors.New("access key id is empty")
	case c.SecretAccessKey == "":
		return fmt.Errorf("secret access key of %s is empty", c.AccessKeyID)
	case strings.ContainsAny(c.AccessKeyID, "/,= \t\r\n"):
		return fmt.Errorf("access key id %q contains a character a SigV4 credential cannot carry", c.AccessKeyID)
	}
	for _, q := range c.Queues {
		if q == "" {
			return fmt.Errorf("queues of %s: empty entry", c.AccessKeyID)
		}
	}
	return nil
}

// Principal is the identity a request was authenticated as.
type Principal struct {
	AccessKeyID string
	Account     string
	queues      []string // allow-list; nil means every queue
}

// Restricted reports whether the principal is limited to some queues.
func (p Principal) Restricted() bool { return p.queues != nil }

// Allows reports whether the principal may address queue name.
func (p Principal) Allows(name string) bool {
	if p.queues == nil {
		return true
	}
	for _, q := range p.queues {
		if q == name {
			return true
		}
		if prefix, ok := strings.CutSuffix(q, "*"); ok && strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

type principalKey struct{}

// PrincipalFromContext returns the principal Middleware authenticated the
// request as.
func PrincipalFromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	if !ok {
		return Principal{}, false
	}
	return *p, true
}

// key is one configured credential.
type key struct {
	secret    string
	principal *Principal
	// derived caches the signing key of the last scope used (it
	// changes once a day per region), saving four HMACs per request.
	derived atomic.Pointer[derivedKey]
}

type derivedKey struct {
	date, region, service string
	key                   []byte
}

// signingKey returns the key for the scope, derived once per scope.
func (k *key) signingKey(date, region, service string) []byte {
	if d := k.derived.Load(); d != nil && d.date == date && d.region == region && d.service == service {
		return d.key
	}
	d := &derivedKey{date: date, region: region, service: service, key: signingKey(k.secret, date, region, service)}
	k.derived.Store(d)
	return d.key
}

type verifier struct {
	next        http.Handler
	region      string
	keys        map[string]*key
	maxSkew     time.Duration
	maxBody     int64
	budget      *httpbody.Budget
	clock       clock.Clock
	errorWriter func(w http.ResponseWriter, r *http.Request, e Error)
	log         *slog.Logger
}

// Middleware returns next behind SigV4 verification. With no credentials
// configured every request is refused (InvalidClientTokenId): leave the
// middleware out to run without authentication.
func Middleware(next http.Handler, opts Options) http.Handler {
	v := &verifier{
		next:        next,
		region:      opts.Region,
		keys:        make(map[string]*key, len(opts.Credentials)),
		maxSkew:     opts.MaxSkew,
		maxBody:     opts.MaxBody,
		budget:      opts.BodyBudget,
		errorWriter: opts.ErrorWriter,
		clock:       opts.Clock,
		log:         opts.Logger,
	}
	if v.maxSkew <= 0 {
		v.maxSkew = DefaultMaxSkew
	}
	if v.maxBody <= 0 {
		v.maxBody = DefaultMaxBody
	}
	if v.clock == nil {
		v.clock = clock.Real{}
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	for i, c := range opts.Credentials {
		if err := c.validate(); err != nil {
			v.log.Error("sqs auth: credential ignored", "index", i+1, "err", err)
			continue
		}
		if _, dup := v.keys[c.AccessKeyID]; dup {
			v.log.Error("sqs auth: duplicate credential ignored", "index", i+1, "access_key", c.AccessKeyID)
			continue
		}
		p := &Principal{AccessKeyID: c.AccessKeyID, Account: c.Account}
		if len(c.Queues) > 0 {
			p.queues = append([]string(nil), c.Queues...)
		}
		v.keys[c.AccessKeyID] = &key{secret: c.SecretAccessKey, principal: p}
	}
	return v
}

func (v *verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, akid, body, release, err := v.authenticate(r)
	if err != nil {
		v.reject(w, r, akid, err)
		return
	}
	defer release()
	r = httpbody.WithBody(r, body)
	v.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
}

// reject logs and answers a refused request. The log line names the
// access key id (not a secret) and the reason, never the signature, the
// Authorization header, the query string (a presigned URL is itself a
// credential) or the secret.
func (v *verifier) reject(w http.ResponseWriter, r *http.Request, akid string, e *authError) {
	remote, _, _ := net.SplitHostPort(r.RemoteAddr)
	v.log.Info("sqs request rejected", "code", e.code, "reason", e.reason,
		"access_key", clip(akid), "method", r.Method, "path", clip(r.URL.Path), "remote", remote)
	v.writeError(w, r, e)
}

// sig is a parsed signature, from either form.
type sig struct {
	presigned     bool
	akid          string
	scopeDate     string
	region        string
	service       string
	signedList    string   // SignedHeaders as given
	signedHeaders []string // the same, split
	signature     string
	timestamp     string // request time in the string-to-sign format
	t             time.Time
	expires       int64 // presigned X-Amz-Expires in seconds; 0 if absent
}

func (s *sig) scope() string {
	return s.scopeDate + "/" + s.region + "/" + s.service + "/aws4_request"
}

// authenticate verifies r and returns its principal, its body and the
// function that gives the body's bytes back to the budget, or the error to
// answer and (for the log) the access key id the request claimed.
func (v *verifier) authenticate(r *http.Request) (*Principal, string, []byte, func(), *authError) {
	p, akid, body, err := v.verify(r)
	if err != nil {
		if body.release != nil {
			body.release()
		}
		return nil, akid, nil, nil, err
	}
	if body.release == nil {
		body.release = func() {}
	}
	return p, akid, body.b, body.release, nil
}

// readBody is a body read under the budget.
type readBody struct {
	b       []byte
	release func() // nil when nothing is held
}

func (v *verifier) verify(r *http.Request) (*Principal, string, readBody, *authError) {
	var body readBody
	params := splitQuery(r.URL.RawQuery)
	authz := r.Header.Values("Authorization")
	presigned := hasPresignParams(params)
	var s *sig
	var err *authError
	switch {
	case len(authz) == 0 && !presigned:
		return nil, "", body, errMissingToken("no Authorization header and no presigned query parameters")
	case len(authz) > 0 && presigned:
		return nil, "", body, errIncomplete("Only one authentication method is allowed: the Authorization header or the X-Amz-* query parameters, not both.")
	case len(authz) > 1:
		return nil, "", body, errIncomplete("Only one Authorization header is allowed.")
	case presigned:
		s, err = parsePresigned(params)
	default:
		s, err = parseAuthorization(authz[0])
		if err == nil {
			err = s.setHeaderDate(r)
		}
	}
	if err != nil {
		akid := ""
		if s != nil {
			akid = s.akid
		}
		return nil, akid, body, err
	}
	if err := v.checkScope(s, r); err != nil {
		return nil, s.akid, body, err
	}
	k, ok := v.keys[s.akid]
	if !ok {
		return nil, s.akid, body, errInvalidToken()
	}
	if err := v.checkTime(s); err != nil {
		return nil, s.akid, body, err
	}
	body, err = v.readBody(r)
	if err != nil {
		return nil, s.akid, body, err
	}
	payload, err := payloadHash(r, body.b)
	if err != nil {
		return nil, s.akid, body, err
	}
	query := canonicalQuery(params, s.presigned)
	skey := k.signingKey(s.scopeDate, s.region, s.service)
	want, werr := hex.DecodeString(s.signature)
	canonical, ambiguous := canonicalRequest(r, query, s.signedHeaders, s.signedList, payload, false)
	if werr == nil && hmac.Equal(want, hmacSHA256(skey, stringToSign(s.timestamp, s.scope(), canonical))) {
		return k.principal, s.akid, body, nil
	}
	if ambiguous && werr == nil {
		// A signed header held tabs or line folding: botocore
		// collapses all white space where aws-sdk-go-v2 collapses spaces.
		canonical, _ = canonicalRequest(r, query, s.signedHeaders, s.signedList, payload, true)
		if hmac.Equal(want, hmacSHA256(skey, stringToSign(s.timestamp, s.scope(), canonical))) {
			return k.principal, s.akid, body, nil
		}
	}
	sum := sha256.Sum256([]byte(canonical))
	return nil, s.akid, body, errSignature("signature mismatch; canonical request sha256 " + hex.EncodeToString(sum[:]))
}

func hasPresignParams(ps []param) bool {
	for _, p := range ps {
		switch p.k {
		case "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature":
			return true
		}
	}
	return false
}

// parseAuthorization parses
// "AWS4-HMAC-SHA256 Credential=<akid>/<scope>, SignedHeaders=<h;h>, Signature=<hex>".
func parseAuthorization(h string) (*sig, *authError) {
	rest, ok := strings.CutPrefix(h, algorithm)
	if !ok || rest == "" || rest[0] != ' ' {
		return nil, errIncomplete("Authorization header requires the AWS4-HMAC-SHA256 algorithm.")
	}
	var cred, signed, signature string
	var seen [3]bool
	for field := range strings.SplitSeq(rest, ",") {
		field = strings.TrimSpace(field)
		name, val, ok := strings.Cut(field, "=")
		if !ok {
			return nil, errIncomplete("Authorization header parameters must be name=value pairs separated by commas.")
		}
		var dst *string
		var i int
		switch name {
		case "Credential":
			dst, i = &cred, 0
		case "SignedHeaders":
			dst, i = &signed, 1
		case "Signature":
			dst, i = &signature, 2
		default:
			return nil, errIncomplete("Authorization header has an unknown parameter " + strconv.Quote(clip(name)) + ".")
		}
		if seen[i] {
			return nil, errIncomplete("Authorization header repeats the parameter " + name + ".")
		}
		seen[i], *dst = true, val
	}
	var missing []string
	for i, name := range []string{"Credential", "SignedHeaders", "Signature"} {
		if !seen[i] || [3]string{cred, signed, signature}[i] == "" {
			missing = append(missing, "Authorization header requires '"+name+"' parameter.")
		}
	}
	if len(missing) > 0 {
		return nil, errIncomplete(strings.Join(missing, " "))
	}
	s := &sig{signature: signature}
	if err := s.setCredential(cred); err != nil {
		return s, err
	}
	if err := s.setSignedHeaders(signed); err != nil {
		return s, err
	}
	return s, nil
}

// parsePresigned reads the X-Amz-* query parameters of a presigned URL.
func parsePresigned(ps []param) (*sig, *authError) {
	get := func(name string) (string, *authError) {
		val, n := "", 0
		for _, p := range ps {
			if p.k == name {
				val, n = p.v, n+1
			}
		}
		if n > 1 {
			return "", errIncomplete("The query parameter " + name + " is repeated.")
		}
		return val, nil
	}
	var vals [6]string
	names := [6]string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Expires"}
	for i, n := range names {
		v, err := get(n)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	for _, v := range vals[:5] {
		if v == "" {
			return nil, errIncomplete("AWS query-string parameters must include 'X-Amz-Algorithm', 'X-Amz-Credential', 'X-Amz-Signature', 'X-Amz-Date', 'X-Amz-SignedHeaders'. Re-examine the query-string parameters.")
		}
	}
	if vals[0] != algorithm {
		return nil, errIncomplete("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\".")
	}
	s := &sig{presigned: true, signature: vals[4]}
	if err := s.setCredential(vals[1]); err != nil {
		return s, err
	}
	if err := s.setSignedHeaders(vals[3]); err != nil {
		return s, err
	}
	t, err := time.Parse(timeFormat, vals[2])
	if err != nil {
		return s, errIncomplete("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\".")
	}
	s.t, s.timestamp = t, vals[2]
	if vals[5] != "" {
		n, err := strconv.ParseInt(vals[5], 10, 64)
		if err != nil || n < 1 || n > maxPresignExpiry {
			return s, errIncomplete("X-Amz-Expires must be a whole number of seconds from 1 to 604800.")
		}
		s.expires = n
	}
	return s, nil
}

const timeFormat = "20060102T150405Z"

// setHeaderDate takes the request time from X-Amz-Date or, as botocore
// signs when the request already has one, from Date.
func (s *sig) setHeaderDate(r *http.Request) *authError {
	if v := r.Header.Get("X-Amz-Date"); v != "" {
		t, err := time.Parse(timeFormat, v)
		if err != nil {
			return errIncomplete("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\".")
		}
		s.t, s.timestamp = t, v
		return nil
	}
	if v := r.Header.Get("Date"); v != "" {
		t, err := http.ParseTime(v)
		if err != nil {
			return errIncomplete("The Date header is not a valid HTTP date.")
		}
		s.t, s.timestamp = t.UTC(), t.UTC().Format(timeFormat)
		return nil
	}
	return errIncomplete("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
}

// setCredential splits "<akid>/<date>/<region>/<service>/aws4_request".
func (s *sig) setCredential(cred string) *authError {
	parts := strings.Split(cred, "/")
	if len(parts) != 5 || parts[0] == "" {
		return errIncomplete("Credential must have the form <access key id>/<date>/<region>/sqs/aws4_request.")
	}
	s.akid, s.scopeDate, s.region, s.service = parts[0], parts[1], parts[2], parts[3]
	if _, err := time.Parse("20060102", s.scopeDate); err != nil || len(s.scopeDate) != 8 {
		return errIncomplete("Credential scope date " + strconv.Quote(clip(s.scopeDate)) + " is not a yyyyMMdd date.")
	}
	if parts[4] != "aws4_request" {
		return errIncomplete("Credential should be scoped with a valid terminator: 'aws4_request', not " + strconv.Quote(clip(parts[4])) + ".")
	}
	return nil
}

// setSignedHeaders checks the list: lower-case names separated by ";",
// including host.
func (s *sig) setSignedHeaders(list string) *authError {
	s.signedList = list
	s.signedHeaders = strings.Split(list, ";")
	host := false
	for _, h := range s.signedHeaders {
		if h == "" || h != strings.ToLower(h) || strings.ContainsAny(h, " \t:,") {
			return errIncomplete("SignedHeaders must be lower-case header names separated by ';'.")
		}
		host = host || h == "host"
	}
	if !host {
		return errIncomplete("'Host' must be a 'SignedHeader' in the AWS Authorization.")
	}
	return nil
}

// checkScope: the service must be sqs, the region ours (if one is set),
// the scope date the request's date, and X-Amz-Target, which picks the
// action, must be signed when sent.
func (v *verifier) checkScope(s *sig, r *http.Request) *authError {
	if s.service != "sqs" {
		return errIncomplete("Credential should be scoped to correct service: 'sqs'.")
	}
	if v.region != "" && s.region != v.region {
		return errIncomplete("Credential should be scoped to a valid region, not " + strconv.Quote(clip(s.region)) + ".")
	}
	if s.scopeDate != s.timestamp[:8] {
		return errSignatureMsg("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '" +
			clip(s.scopeDate) + "' != '" + s.timestamp[:8] + "', from '" + s.timestamp + "'.")
	}
	if r.Header.Get("X-Amz-Target") != "" && !contains(s.signedHeaders, "x-amz-target") {
		return errIncomplete("'X-Amz-Target' must be a 'SignedHeader' when it is sent.")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkTime: a header-signed request must be within MaxSkew of the clock
// either way; a presigned one from its X-Amz-Date (less MaxSkew) until
// X-Amz-Expires later (MaxSkew when it has no X-Amz-Expires).
func (v *verifier) checkTime(s *sig) *authError {
	now := v.clock.Now().UTC()
	if s.t.After(now.Add(v.maxSkew)) {
		return errExpired("Signature not yet current: " + s.timestamp + " is still later than " +
			now.Add(v.maxSkew).Format(timeFormat) + " (" + now.Format(timeFormat) + " + " + skewText(v.maxSkew) + ").")
	}
	if s.presigned {
		life := v.maxSkew
		if s.expires > 0 {
			life = time.Duration(s.expires) * time.Second
		}
		if now.After(s.t.Add(life)) {
			return errExpired("Request has expired.")
		}
		return nil
	}
	if s.t.Before(now.Add(-v.maxSkew)) {
		return errExpired("Signature expired: " + s.timestamp + " is now earlier than " +
			now.Add(-v.maxSkew).Format(timeFormat) + " (" + now.Format(timeFormat) + " - " + skewText(v.maxSkew) + ").")
	}
	return nil
}

func skewText(d time.Duration) string {
	if d%time.Minute == 0 {
		return strconv.FormatInt(int64(d/time.Minute), 10) + " min."
	}
	return d.String()
}

// readBody reads the whole body (up to maxBody) under the budget, growing
// its buffer as bytes arrive: a declared Content-Length is only used to
// refuse an oversized body early, never to size a buffer.
func (v *verifier) readBody(r *http.Request) (readBody, *authError) {
	if r.Body == nil || r.Body == http.NoBody {
		return readBody{}, nil
	}
	if r.ContentLength > v.maxBody {
		return readBody{}, errBodyTooLarge(v.maxBody)
	}
	b, release, err := v.budget.Read(r.Context(), r.Body, v.maxBody)
	_ = r.Body.Close() // read (or refused); net/http closes it again after the handler
	switch {
	case err == nil:
		r.Body = io.NopCloser(bytes.NewReader(b))
		return readBody{b: b, release: release}, nil
	case errors.Is(err, httpbody.ErrTooLarge):
		return readBody{}, errBodyTooLarge(v.maxBody)
	case errors.Is(err, httpbody.ErrBusy):
		return readBody{}, errBusy()
	}
	return readBody{}, errBodyUnreadable()
}

// payloadHash is the last line of the canonical request: the body's
// SHA-256, or the X-Amz-Content-Sha256 header when sent. A header that
// does not match the body is refused, and so is UNSIGNED-PAYLOAD with a
// body: an SQS request's content is its body, which must be signed.
func payloadHash(r *http.Request, body []byte) (string, *authError) {
	sum := emptySHA256
	if len(body) > 0 {
		s := sha256.Sum256(body)
		sum = hex.EncodeToString(s[:])
	}
	h := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case h == "":
		return sum, nil
	case h == "UNSIGNED-PAYLOAD" && len(body) == 0:
		return h, nil
	case h == "UNSIGNED-PAYLOAD":
		return "", errSignatureMsg("UNSIGNED-PAYLOAD is not accepted for a request with a body.")
	case h != sum:
		return "", errSignatureMsg("The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	return h, nil
}
