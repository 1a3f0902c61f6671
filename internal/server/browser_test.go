package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// rawRequest sends one request with exactly the given headers.
func rawRequest(t *testing.T, method, u, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCrossSiteRequestsRefused is the security issue's second finding,
// against the default install (loopback, no credentials): a page the
// operator opens must not be able to purge, delete or read queues, by a
// form POST, a no-cors fetch, an image, or DNS rebinding. The queue and its
// message are unchanged afterwards; SDKs and the dashboard still work.
func TestCrossSiteRequestsRefused(t *testing.T) {
	s := startWith(t, func(*Options) {})
	addr := s.SQSAddr()
	base := "http://" + addr
	ctx := context.Background()
	c := client(addr)
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("victim")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("keep me")}); err != nil {
		t.Fatal(err)
	}
	qurl := url.QueryEscape(*q.QueueUrl)
	evil := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
	oldBrowser := map[string]string{"Origin": "http://evil.example"} // no Sec-Fetch-* headers
	form := "application/x-www-form-urlencoded"
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, a := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		want                     int
	}{
		{"FormPurge", "POST", "/", "Action=PurgeQueue&QueueUrl=" + qurl, with(evil, "Content-Type", form), 403},
		{"FormPurgeOldBrowser", "POST", "/", "Action=PurgeQueue&QueueUrl=" + qurl, with(oldBrowser, "Content-Type", form), 403},
		{"FormDeleteQueuePath", "POST", "/000000000000/victim", "Action=DeleteQueue", with(evil, "Content-Type", form), 403},
		{"NoCorsAdminDelete", "POST", "/sluice/v1/queues/victim/messages:delete", `{"all":true}`, with(evil, "Content-Type", "text/plain"), 403},
		{"NoCorsAdminDeleteOldBrowser", "POST", "/sluice/v1/queues/victim/messages:delete", `{"all":true}`, with(oldBrowser, "Content-Type", "text/plain"), 403},
		{"AdminDeleteTextPlain", "POST", "/sluice/v1/queues/victim/messages:delete", `{"all":true}`, map[string]string{"Content-Type": "text/plain"}, 415},
		{"AdminDeleteNoType", "DELETE", "/sluice/v1/queues/victim/messages/x", "", map[string]string{}, 415},
		{"ImageDeleteQueue", "GET", "/?Action=DeleteQueue&QueueUrl=" + qurl, "", with(evil, "Sec-Fetch-Dest", "image"), 403},
		{"ImageDeleteQueueOldBrowser", "GET", "/?Action=DeleteQueue&QueueUrl=" + qurl, "", map[string]string{}, 400},
		{"LinkPurge", "GET", "/?Action=PurgeQueue&QueueUrl=" + qurl, "", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, 400},
		{"ImageReceive", "GET", "/?Action=ReceiveMessage&QueueUrl=" + qurl, "", map[string]string{}, 400},
		{"RebindRead", "GET", "/sluice/v1/queues/victim/messages", "", map[string]string{"Host": "evil.example:" + port(addr), "Sec-Fetch-Site": "same-origin"}, 421},
		{"RebindSQS", "POST", "/", "Action=ReceiveMessage&QueueUrl=" + qurl, map[string]string{"Host": "evil.example", "Content-Type": form}, 421},
		{"RebindPurgeSameOrigin", "POST", "/sluice/v1/queues/victim/messages:delete", `{"all":true}`,
			map[string]string{"Host": "rebind.evil.example:" + port(addr), "Origin": "http://rebind.evil.example:" + port(addr), "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, 421},
	} {
		t.Run(a.name, func(t *testing.T) {
			st, body := rawRequest(t, a.method, base+a.path, a.body, a.hdr)
			if st != a.want {
				t.Fatalf("%s %s: %d %s, want %d", a.method, a.path, st, body, a.want)
			}
		})
	}
	info, err := s.Engine().GetQueue("victim")
	if err != nil {
		t.Fatalf("queue gone: %v", err)
	}
	if info.Visible != 1 {
		t.Fatalf("queue changed: %+v", info)
	}

	// What must keep working: reads over GET, the dashboard (same origin,
	// JSON), a top-level navigation to the dashboard, SDKs by localhost.
	if st, b := rawRequest(t, "GET", base+"/?Action=GetQueueUrl&QueueName=victim", "", nil); st != 200 {
		t.Fatalf("GetQueueUrl over GET: %d %s", st, b)
	}
	if st, b := rawRequest(t, "GET", base+"/ui/", "", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}); st != 200 {
		t.Fatalf("navigation to the dashboard: %d %s", st, b)
	}
	if st, b := rawRequest(t, "GET", "http://localhost:"+port(addr)+"/health", "", map[string]string{"Host": "anything.example"}); st != 200 {
		t.Fatalf("health: %d %s", st, b)
	}
	dash := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Content-Type": "application/json"}
	if st, b := rawRequest(t, "POST", base+"/sluice/v1/queues/victim/messages:delete", `{"all":true}`, dash); st != 200 || !strings.Contains(b, `"deleted":1`) {
		t.Fatalf("dashboard delete: %d %s", st, b)
	}
	lc := client("localhost:" + port(addr))
	if _, err := lc.ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatalf("SDK via localhost: %v", err)
	}
}

// TestAllowedHosts: a configured name (and its wildcard form) is served.
func TestAllowedHosts(t *testing.T) {
	s := startWith(t, func(o *Options) { o.AllowedHosts = []string{"sluice.test", "*.corp.test"} })
	base := "http://" + s.SQSAddr()
	for host, want := range map[string]int{
		"sluice.test": 200, "SLUICE.TEST.:1": 200, "a.corp.test": 200, "corp.test": 421, "x.localhost": 200,
		"[::1]:1": 200, "10.0.0.7": 200, "other.test": 421,
	} {
		if st, b := rawRequest(t, "GET", base+"/sluice/v1/queues", "", map[string]string{"Host": host}); st != want {
			t.Errorf("Host %s: %d %s, want %d", host, st, b, want)
		}
	}
	o := DefaultOptions()
	o.AllowedHosts = []string{"bad/name"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "allowed_hosts") {
		t.Fatalf("bad allowed_hosts accepted: %v", err)
	}
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// FuzzHostAllows: the Host check never panics, always allows IP literals
// and localhost names, and only allows other names that are listed.
func FuzzHostAllows(f *testing.F) {
	for _, s := range []string{"", "localhost:9324", "127.0.0.1", "[::1]:80", "evil.example", "a.corp.test:1", "SLUICE.TEST.", "[", "x:y:z", "::1"} {
		f.Add(s)
	}
	l := newHostList([]string{"sluice.test", "*.corp.test"})
	f.Fuzz(func(t *testing.T, host string) {
		ok := l.allows(host)
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
		want := host == "" || net.ParseIP(h) != nil || h == "localhost" || strings.HasSuffix(h, ".localhost") ||
			h == "sluice.test" || strings.HasSuffix(h, ".corp.test")
		if ok != want {
			t.Fatalf("allows(%q) = %v, want %v", host, ok, want)
		}
	})
}
