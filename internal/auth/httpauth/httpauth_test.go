package httpauth

import (
	"bytes"
	"encoding/json"
	"github.com/sluicemq/sluice/internal/testlog"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

const (
	token    = "tok-0123456789abcdef-SECRET"
	password = "correct horse battery staple"
)

// testHash is a cheap hash (tests need not pay 600,000 iterations).
func testHash(t *testing.T, pw string) string {
	t.Helper()
	h, err := hashPassword(pw, minIterations)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type seen struct {
	mu    sync.Mutex
	user  string
	query string
}

func newServer(t *testing.T, opts Options) (*httptest.Server, *testlog.Buffer, *seen) {
	t.Helper()
	logs := &testlog.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := &seen{}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := UserFromContext(r.Context())
		s.mu.Lock()
		s.user, s.query = u, r.URL.RawQuery
		s.mu.Unlock()
		w.Write([]byte("ok"))
	})
	srv := httptest.NewServer(Middleware(next, opts))
	t.Cleanup(srv.Close)
	return srv, logs, s
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func get(t *testing.T, u string, set func(*http.Request)) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if set != nil {
		set(req)
	}
	return do(t, req)
}

func want401(t *testing.T, resp *http.Response) {
	t.Helper()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", resp.StatusCode)
	}
	if got := resp.Header.Values("WWW-Authenticate"); len(got) == 0 || !strings.HasPrefix(got[0], `Basic realm="Sluice"`) {
		t.Errorf("WWW-Authenticate %q", got)
	}
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != "Unauthorized" || body.Error.Message == "" {
		t.Errorf("body %+v: %v", body, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestPassThroughWithoutCredentials(t *testing.T) {
	srv, _, _ := newServer(t, Options{})
	if resp := get(t, srv.URL, nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestTokenAndBasic(t *testing.T) {
	srv, logs, s := newServer(t, Options{Tokens: []string{"another-token-0000", token}, Users: map[string]string{"ops": testHash(t, password)}})
	bearer := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+v) }
	}
	basic := func(u, p string) func(*http.Request) {
		return func(r *http.Request) { r.SetBasicAuth(u, p) }
	}
	want401(t, get(t, srv.URL, nil))
	want401(t, get(t, srv.URL, bearer(token+"x")))
	want401(t, get(t, srv.URL, bearer("")))
	want401(t, get(t, srv.URL, basic("ops", password+"!")))
	want401(t, get(t, srv.URL, basic("nobody", password)))
	want401(t, get(t, srv.URL, func(r *http.Request) { r.Header.Set("Authorization", "Digest "+token) }))
	for name, set := range map[string]func(*http.Request){
		"Bearer":          bearer(token),
		"BearerLowerCase": func(r *http.Request) { r.Header.Set("Authorization", "bearer "+token) },
		"Basic":           basic("ops", password),
		"BasicAgain":      basic("ops", password), // from the verified cache
		"BasicWithToken":  basic("anyone", token),
	} {
		if resp := get(t, srv.URL, set); resp.StatusCode != 200 {
			t.Errorf("%s: status %d", name, resp.StatusCode)
		}
	}
	s.mu.Lock()
	if s.user != "token" && s.user != "ops" {
		t.Errorf("user %q", s.user)
	}
	s.mu.Unlock()
	// A wrong password after a right one is still wrong (the cache holds
	// only the password that verified).
	want401(t, get(t, srv.URL, basic("ops", "guess")))
	l := logs.String()
	if !strings.Contains(l, "invalid credentials") || !strings.Contains(l, "no credentials") {
		t.Errorf("refusals not logged:\n%s", l)
	}
	for _, secret := range []string{token, password, "guess", "SECRET", "horse", "Basic ", "Bearer "} {
		if strings.Contains(l, secret) {
			t.Errorf("log holds %q:\n%s", secret, l)
		}
	}
}

func TestCookieAndQueryToken(t *testing.T) {
	srv, logs, s := newServer(t, Options{Tokens: []string{token}})
	// Cookie.
	resp := get(t, srv.URL, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: CookieName, Value: token}) })
	if resp.StatusCode != 200 {
		t.Fatalf("cookie: %d", resp.StatusCode)
	}
	want401(t, get(t, srv.URL, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: CookieName, Value: "nope"}) }))
	// ?token= on a GET (EventSource): accepted, sets the cookie, and the
	// next handler does not see it.
	resp = get(t, srv.URL+"/sluice/v1/dashboard/events?a=1&"+QueryParam+"="+url.QueryEscape(token), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("query: %d", resp.StatusCode)
	}
	var c *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == CookieName {
			c = ck
		}
	}
	if c == nil || c.Value != token || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("cookie %+v", c)
	}
	s.mu.Lock()
	if s.query != "a=1" {
		t.Errorf("next handler saw query %q", s.query)
	}
	s.mu.Unlock()
	want401(t, get(t, srv.URL+"/?"+QueryParam+"=wrong", nil))
	// Not on a POST.
	req, _ := http.NewRequest("POST", srv.URL+"/?"+QueryParam+"="+token, nil)
	want401(t, do(t, req))
	if strings.Contains(logs.String(), token) {
		t.Errorf("log holds the token:\n%s", logs.String())
	}
}

func TestCrossOrigin(t *testing.T) {
	srv, _, _ := newServer(t, Options{Tokens: []string{token}, Users: map[string]string{"ops": testHash(t, password)}})
	post := func(set func(*http.Request), origin string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/sluice/v1/queues/q/redrive", strings.NewReader("{}"))
		set(req)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		return do(t, req).StatusCode
	}
	cookie := func(r *http.Request) { r.AddCookie(&http.Cookie{Name: CookieName, Value: token}) }
	basic := func(r *http.Request) { r.SetBasicAuth("ops", password) }
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	for name, c := range map[string]struct {
		set    func(*http.Request)
		origin string
		want   int
	}{
		"CookieCrossOrigin": {cookie, "https://evil.example", 403},
		"BasicCrossOrigin":  {basic, "https://evil.example", 403},
		"BearerCrossOrigin": {bearer, "https://evil.example", 200},
		"CookieSameOrigin":  {cookie, srv.URL, 200},
		"BasicNoOrigin":     {basic, "", 200},
	} {
		if got := post(c.set, c.origin); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
}

func TestPasswordHash(t *testing.T) {
	h, err := HashPassword(password)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "pbkdf2-sha256$600000$") || strings.Count(h, "$") != 3 {
		t.Fatalf("hash %q", h)
	}
	if !VerifyPassword(h, password) || VerifyPassword(h, password+" ") || VerifyPassword("garbage", password) {
		t.Fatal("verify")
	}
	h2, _ := HashPassword(password)
	if h == h2 {
		t.Fatal("no salt")
	}
	if _, err := HashPassword(""); err == nil {
		t.Fatal("empty password hashed")
	}
	var out bytes.Buffer
	if err := HashPasswordCommand(strings.NewReader(password+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	if !VerifyPassword(strings.TrimSpace(out.String()), password) {
		t.Fatalf("command output %q", out.String())
	}
	if err := HashPasswordCommand(strings.NewReader(""), io.Discard); err == nil {
		t.Fatal("empty input accepted")
	}
}

func TestValidate(t *testing.T) {
	good := testHash(t, password)
	if err := (Options{Tokens: []string{token}, Users: map[string]string{"ops": good}}).Validate(); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Options{
		"ShortToken":  {Tokens: []string{"tiny"}},
		"SpaceToken":  {Tokens: []string{"0123456789abcdef 0123"}},
		"PlainPass":   {Users: map[string]string{"ops": "hunter2hunter2"}},
		"ColonUser":   {Users: map[string]string{"a:b": good}},
		"LowIter":     {Users: map[string]string{"ops": "pbkdf2-sha256$10$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5"}},
		"BadBase64":   {Users: map[string]string{"ops": "pbkdf2-sha256$600000$!!$!!"}},
		"OtherScheme": {Users: map[string]string{"ops": "$2a$10$abcdefghijklmnopqrstuv"}},
	} {
		err := o.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, v := range o.Users {
			if strings.Contains(err.Error(), v) {
				t.Errorf("%s: error quotes the hash: %v", name, err)
			}
		}
		for _, v := range o.Tokens {
			if strings.Contains(err.Error(), v) {
				t.Errorf("%s: error quotes the token: %v", name, err)
			}
		}
	}
}
