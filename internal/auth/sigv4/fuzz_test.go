package sigv4_test

import (
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/auth/sigv4"
	"github.com/sluicemq/sluice/internal/clock"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
)

// FuzzAuthorizationHeader: whatever the Authorization header (and query
// string) holds, the middleware never panics, never lets the request
// through, and answers 403 with a well-formed error in the request's
// protocol.
func FuzzAuthorizationHeader(f *testing.F) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		"",
		"AWS4-HMAC-SHA256 Credential=" + akid + "/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + strings.Repeat("ab", 32),
		"AWS4-HMAC-SHA256 Credential=" + akid + "/20260101/us-east-1/sqs/aws4_request,SignedHeaders=host,Signature=00",
		"AWS4-HMAC-SHA256 Credential=/////, SignedHeaders=;;, Signature=",
		"AWS4-HMAC-SHA256 Credential=a/2026/r/sqs/aws4_request, SignedHeaders=HOST, Signature=zz",
		"AWS4-HMAC-SHA256 ,,,===",
		"AWS4-HMAC-SHA256",
		"AWS AKID:sig",
		"Bearer token",
		"AWS4-HMAC-SHA256 Credential=\x00\xff/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=<&>",
	} {
		f.Add(s, "", false)
		f.Add(s, "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="+akid+"%2F20260101%2Fus-east-1%2Fsqs%2Faws4_request", true)
	}
	h := sigv4.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic("request let through")
	}), sigv4.Options{
		Region:      region,
		Credentials: []sigv4.Credentials{{AccessKeyID: akid, SecretAccessKey: secret, Queues: []string{"q"}}},
		Clock:       clock.NewFake(now),
		ErrorWriter: sluicesqs.New(nil, sluicesqs.Options{}).WriteAuthError,
	})
	codes := map[string]bool{"MissingAuthenticationToken": true, "IncompleteSignature": true, "InvalidClientTokenId": true,
		"SignatureDoesNotMatch": true, "RequestExpired": true}
	f.Fuzz(func(t *testing.T, authz, rawQuery string, jsonProto bool) {
		r := httptest.NewRequest("POST", "/", strings.NewReader(`{"QueueUrl":"q"}`))
		r.URL.RawQuery = rawQuery
		if authz != "" {
			r.Header["Authorization"] = []string{authz}
		}
		r.Header.Set("X-Amz-Date", now.Format("20060102T150405Z"))
		if jsonProto {
			r.Header.Set("Content-Type", "application/x-amz-json-1.0")
			r.Header.Set("X-Amz-Target", "AmazonSQS.SendMessage")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		code, _, _ := strings.Cut(w.Header().Get("X-Amzn-Query-Error"), ";")
		if !codes[code] {
			t.Fatalf("x-amzn-query-error %q", w.Header().Get("X-Amzn-Query-Error"))
		}
		if jsonProto {
			var body struct{ Type, Message string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Message == "" ||
				!strings.HasSuffix(w.Body.String(), "}") || !strings.Contains(w.Body.String(), `"__type":"com.amazon.coral.service#`+code+`Exception"`) {
				t.Fatalf("JSON body %q: %v", w.Body.String(), err)
			}
			return
		}
		var er errorResponse
		if err := xml.Unmarshal(w.Body.Bytes(), &er); err != nil || er.Error.Code != code || er.Error.Message == "" {
			t.Fatalf("XML body %q: %v", w.Body.String(), err)
		}
	})
}
