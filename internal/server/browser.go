package server

import (
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/sluicemq/sluice/api"
)

// Browser defences for the HTTP listener, needed even on the default
// loopback install without credentials: a web page the operator opens runs
// in a browser that can reach 127.0.0.1.
//
//   - DNS rebinding: a page on attacker.example re-resolves its own name to
//     127.0.0.1 and then reads the admin API as same-origin. Its requests
//     carry "Host: attacker.example", so only Host values Sluice knows are
//     served: IP literals (a rebinding needs a name), localhost and
//     *.localhost, and the names in allowed_hosts. Anything else is 421
//     Misdirected Request. /health is exempt (it says only ok or failed).
//   - Cross-site requests: a request a browser marks Sec-Fetch-Site:
//     cross-site is refused (403) unless it is a top-level navigation (a
//     link to the dashboard), and every state-changing request (any method
//     but GET, HEAD, OPTIONS) must pass http.CrossOriginProtection, which
//     compares Sec-Fetch-Site, or else Origin, with the request's own host.
//   - Forms and no-cors fetches: a state-changing admin request must say
//     Content-Type: application/json (application/x-ndjson for an import),
//     which a page on another origin cannot send without a CORS preflight
//     that Sluice never grants; else 415.
//
// SQS actions that change state are refused on GET by the SQS handler
// itself, so an <img src="/?Action=DeleteQueue…"> does nothing.
//
// AWS SDKs and the CLI send none of the Sec-Fetch-* or Origin headers and
// address the broker by an IP, localhost or a configured name, so they pass
// unchanged.
type browserGuard struct {
	next  http.Handler
	hosts hostList
	cop   *http.CrossOriginProtection
}

// BrowserGuard wraps next in the same defences as the server's own HTTP
// listener (DNS rebinding, cross-site requests), for HTTP surfaces served
// beside it: a cluster node's own endpoints on its public listener.
func BrowserGuard(next http.Handler, allowedHosts []string) http.Handler {
	return newBrowserGuard(next, allowedHosts)
}

func newBrowserGuard(next http.Handler, allowed []string) *browserGuard {
	return &browserGuard{next: next, hosts: newHostList(allowed), cop: http.NewCrossOriginProtection()}
}

func (g *browserGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/health" && !g.hosts.allows(r.Host) {
		refuse(w, http.StatusMisdirectedRequest, "MisdirectedRequest",
			"Host "+quoteClip(r.Host)+" is not served here; add the name to allowed_hosts")
		return
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" && !isNavigation(r) {
		refuse(w, http.StatusForbidden, "CrossSiteRequest", "cross-site browser requests are refused")
		return
	}
	if err := g.cop.Check(r); err != nil {
		refuse(w, http.StatusForbidden, "CrossOriginRequest", "cross-origin state-changing requests are refused")
		return
	}
	if !safeMethod(r.Method) && strings.HasPrefix(r.URL.Path, api.Prefix) && !jsonContent(r) {
		refuse(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType",
			"a "+r.Method+" to the admin API needs Content-Type: application/json")
		return
	}
	g.next.ServeHTTP(w, r)
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// isNavigation: a top-level GET navigation (following a link), which cannot
// read the answer on behalf of another site.
func isNavigation(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
}

func jsonContent(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || mt == "application/x-ndjson")
}

// refuse answers with the admin API's error shape, which the dashboard and
// the CLI show; SDKs show the status.
func refuse(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}

func quoteClip(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// hostList is the Host allow-list. "*" allows every host.
type hostList struct {
	any      bool
	exact    map[string]bool
	suffixes []string // ".example.com" from "*.example.com"
}

func newHostList(names []string) hostList {
	l := hostList{exact: map[string]bool{"localhost": true}, suffixes: []string{".localhost"}}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		switch {
		case n == "*":
			l.any = true
		case strings.HasPrefix(n, "*."):
			l.suffixes = append(l.suffixes, n[1:])
		default:
			l.exact[n] = true
		}
	}
	return l
}

// allows reports whether a request's Host may be served: an IP literal,
// or a listed name (the port does not matter). An empty Host (HTTP/1.0)
// comes from no browser and is allowed.
func (l hostList) allows(hostport string) bool {
	if l.any || hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if net.ParseIP(host) != nil || l.exact[host] {
		return true
	}
	for _, s := range l.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// validHostPattern checks one allowed_hosts entry.
func validHostPattern(n string) bool {
	if n == "*" {
		return true
	}
	n = strings.TrimPrefix(n, "*.")
	return n != "" && !strings.ContainsAny(n, " /:*[]@")
}
