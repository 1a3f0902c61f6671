// Package httpauth protects Sluice's operator surfaces (the admin API
// under /sluice/v1/, the dashboard under /ui/, /metrics) with bearer
// tokens and HTTP basic authentication.
//
// A request is let through when any of these holds:
//
//   - Authorization: Bearer <token> names a configured token;
//   - Authorization: Basic names a configured user and password, or
//     carries a configured token as its password (any user name), so a
//     browser's basic-auth prompt and tools that only speak basic auth
//     (curl -u, Prometheus basic_auth) work with tokens too;
//   - without an Authorization header: the cookie sluice_token holds a
//     token, or, on GET and HEAD only, the query parameter token does. The
//     query form exists for EventSource, which cannot set headers; it sets
//     the cookie (HttpOnly, SameSite=Strict) so the page's later requests
//     need no token in the URL, and it is removed from the URL the next
//     handler sees.
//
// Credentials a browser attaches by itself (cookie, basic) are not
// accepted for a cross-origin state-changing request
// (http.CrossOriginProtection); a bearer header is.
//
// Everything else is answered 401 with WWW-Authenticate: Basic (so a
// browser prompts) and the admin API's error body
// {"error":{"code":"Unauthorized","message":…}}. Comparisons are constant
// time; passwords are stored as PBKDF2 hashes (password.go). With no
// tokens and no users configured the middleware passes every request
// through.
package httpauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
)

// CookieName is the cookie a token may be sent in.
const CookieName = "sluice_token"

// QueryParam is the query parameter a token may be sent in (GET, HEAD).
const QueryParam = "token"

// Options configure Middleware.
type Options struct {
	// Tokens are bearer tokens. Use long random strings
	// (openssl rand -hex 32); the shortest accepted is 16 characters.
	Tokens []string
	// Users maps a basic-auth user name to a HashPassword hash.
	Users map[string]string
	// Realm is shown in the browser's prompt; default "Sluice".
	Realm  string
	Logger *slog.Logger // nil: discard
}

// MinTokenLength is the shortest token Validate accepts.
const MinTokenLength = 16

// Enabled reports whether any credential is configured (otherwise the
// middleware passes everything through).
func (o Options) Enabled() bool { return len(o.Tokens) > 0 || len(o.Users) > 0 }

// Validate reports the first unusable credential. Its errors name users
// and token positions, never a token, password or hash.
func (o Options) Validate() error {
	for i, t := range o.Tokens {
		if len(t) < MinTokenLength {
			return fmt.Errorf("token #%d is shorter than %d characters", i+1, MinTokenLength)
		}
		if strings.ContainsAny(t, " \t\r\n;,\"") {
			return fmt.Errorf("token #%d contains white space or one of ;,\" (it must fit in a header and a cookie)", i+1)
		}
	}
	for u, h := range o.Users {
		if u == "" || strings.Contains(u, ":") {
			return fmt.Errorf("user %q: a user name must be non-empty and contain no ':'", u)
		}
		if _, err := parseHash(h); err != nil {
			return fmt.Errorf("user %q: password hash: %w", u, err)
		}
	}
	return nil
}

type userKey struct{}

// UserFromContext returns who Middleware let the request through as: the
// basic-auth user name, or "token" for a token. It is false when the
// middleware was not enabled.
func UserFromContext(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

type guard struct {
	next   http.Handler
	tokens [][sha256.Size]byte // SHA-256 of each token: compared without leaking length
	users  map[string]*passwordHash
	dummy  *passwordHash // verified for unknown users, so timing does not reveal who exists
	realm  string
	log    *slog.Logger
	cop    *http.CrossOriginProtection

	// sem bounds concurrent PBKDF2 verifications, so a flood of bad
	// basic credentials costs at most that many cores.
	sem chan struct{}

	// verified remembers, per user, a keyed digest of the password that
	// last verified, so a browser session pays PBKDF2 once. The key is
	// random per process, so the digests are useless outside it.
	cacheKey [32]byte
	mu       sync.Mutex
	verified map[string][sha256.Size]byte
}

// Middleware returns next behind token and basic authentication (see the
// package comment). Entries Validate would refuse are ignored and logged.
func Middleware(next http.Handler, opts Options) http.Handler {
	if !opts.Enabled() {
		return next
	}
	g := &guard{
		next:     next,
		users:    make(map[string]*passwordHash, len(opts.Users)),
		realm:    strings.NewReplacer(`"`, "", `\`, "").Replace(opts.Realm),
		log:      opts.Logger,
		cop:      http.NewCrossOriginProtection(),
		sem:      make(chan struct{}, 2),
		verified: make(map[string][sha256.Size]byte),
	}
	if g.realm == "" {
		g.realm = "Sluice"
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	_, _ = rand.Read(g.cacheKey[:])
	for i, t := range opts.Tokens {
		if t == "" {
			g.log.Error("http auth: empty token ignored", "index", i+1)
			continue
		}
		g.tokens = append(g.tokens, sha256.Sum256([]byte(t)))
	}
	for u, h := range opts.Users {
		ph, err := parseHash(h)
		if err != nil {
			g.log.Error("http auth: user ignored", "user", u, "err", err)
			continue
		}
		g.users[u] = ph
	}
	if len(g.users) > 0 {
		// The dummy costs what the dearest real hash costs.
		iter := 0
		for _, h := range g.users {
			iter = max(iter, h.iter)
		}
		d, _ := hashPassword("dummy password", iter)
		g.dummy, _ = parseHash(d)
	}
	return g
}

// how says which credential let a request in.
type how uint8

const (
	viaNone how = iota
	viaBearer
	viaBasic
	viaCookie
	viaQuery
)

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, via, presented := g.check(r)
	if via == viaNone {
		g.deny(w, r, presented)
		return
	}
	if via != viaBearer {
		// Credentials the browser attaches on its own: refuse them on
		// a cross-origin POST, PUT, DELETE, ….
		if err := g.cop.Check(r); err != nil {
			g.log.Info("http auth: cross-origin request refused", "method", r.Method, "path", r.URL.Path, "remote", remoteIP(r))
			writeJSONError(w, http.StatusForbidden, "Forbidden", "Cross-origin requests must authenticate with an Authorization: Bearer header.")
			return
		}
	}
	if via == viaQuery {
		http.SetCookie(w, &http.Cookie{
			Name: CookieName, Value: r.URL.Query().Get(QueryParam), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r),
		})
		r = withoutToken(r)
	}
	g.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
}

// check finds the credential. presented says whether the request carried
// any (for the message and the log).
func (g *guard) check(r *http.Request) (user string, via how, presented bool) {
	if authz := r.Header.Get("Authorization"); authz != "" {
		scheme, rest, _ := strings.Cut(authz, " ")
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			if g.matchToken(strings.TrimSpace(rest)) {
				return "token", viaBearer, true
			}
		case strings.EqualFold(scheme, "Basic"):
			if u, p, ok := r.BasicAuth(); ok {
				if g.matchToken(p) {
					return "token", viaBasic, true
				}
				if g.matchUser(u, p) {
					return u, viaBasic, true
				}
			}
		}
		return "", viaNone, true
	}
	if c, err := r.Cookie(CookieName); err == nil {
		if g.matchToken(c.Value) {
			return "token", viaCookie, true
		}
		presented = true
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.Contains(r.URL.RawQuery, QueryParam+"=") {
		if t := r.URL.Query().Get(QueryParam); t != "" {
			if g.matchToken(t) {
				return "token", viaQuery, true
			}
			presented = true
		}
	}
	return "", viaNone, presented
}

// matchToken compares t with every token, in constant time and without an
// early exit.
func (g *guard) matchToken(t string) bool {
	if t == "" || len(g.tokens) == 0 {
		return false
	}
	d := sha256.Sum256([]byte(t))
	match := 0
	for i := range g.tokens {
		match |= subtle.ConstantTimeCompare(d[:], g.tokens[i][:])
	}
	return match == 1
}

// matchUser verifies a basic-auth user and password.
func (g *guard) matchUser(user, password string) bool {
	h, ok := g.users[user]
	if !ok {
		g.slowVerify(g.dummy, password)
		return false
	}
	mac := hmac.New(sha256.New, g.cacheKey[:])
	mac.Write([]byte(password))
	var d [sha256.Size]byte
	mac.Sum(d[:0])
	g.mu.Lock()
	cached, hit := g.verified[user]
	g.mu.Unlock()
	if hit && subtle.ConstantTimeCompare(cached[:], d[:]) == 1 {
		return true
	}
	if !g.slowVerify(h, password) {
		return false
	}
	g.mu.Lock()
	g.verified[user] = d
	g.mu.Unlock()
	return true
}

func (g *guard) slowVerify(h *passwordHash, password string) bool {
	if h == nil {
		return false
	}
	g.sem <- struct{}{}
	defer func() { <-g.sem }()
	return h.verify(password)
}

// deny answers 401 and logs why, without the credential.
func (g *guard) deny(w http.ResponseWriter, r *http.Request, presented bool) {
	msg := "Authentication required: send Authorization: Bearer <token>, or basic credentials."
	reason := "no credentials"
	if presented {
		msg, reason = "The credentials are not valid.", "invalid credentials"
	}
	g.log.Info("http auth: request refused", "reason", reason, "method", r.Method, "path", r.URL.Path, "remote", remoteIP(r))
	w.Header().Add("WWW-Authenticate", `Basic realm="`+g.realm+`", charset="UTF-8"`)
	w.Header().Add("WWW-Authenticate", `Bearer realm="`+g.realm+`"`)
	writeJSONError(w, http.StatusUnauthorized, "Unauthorized", msg)
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// withoutToken is r with the token parameter removed from its URL, so
// neither the next handler nor its logs see it.
func withoutToken(r *http.Request) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	q := u.Query()
	q.Del(QueryParam)
	u.RawQuery = q.Encode()
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	return r2
}

func isHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
