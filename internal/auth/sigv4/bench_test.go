package sigv4_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/sluicemq/sluice/internal/auth/sigv4"
)

// BenchmarkVerify is the cost of verifying a signed 1 KiB SendMessage.
func BenchmarkVerify(b *testing.B) {
	body := `{"QueueUrl":"http://127.0.0.1/000000000000/orders","MessageBody":"` + strings.Repeat("x", 1024) + `"}`
	req := httptest.NewRequest("POST", "http://127.0.0.1:9324/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS.SendMessage")
	sum := sha256.Sum256([]byte(body))
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret}, req, hex.EncodeToString(sum[:]), "sqs", region, time.Now()); err != nil {
		b.Fatal(err)
	}
	h := sigv4.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }),
		sigv4.Options{Region: region, Credentials: []sigv4.Credentials{{AccessKeyID: akid, SecretAccessKey: secret}}})
	b.ReportAllocs()
	for b.Loop() {
		r := req.Clone(context.Background())
		r.Body = io.NopCloser(strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}
