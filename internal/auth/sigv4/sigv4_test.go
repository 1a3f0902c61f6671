package sigv4_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sluicemq/sluice/internal/auth/sigv4"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/testlog"
)

const (
	akid    = "AKIDSLUICETEST"
	secret  = "s3cr3t/Key+ThatMustNeverBeLogged"
	region  = "us-east-1"
	account = "000000000000"
)

type env struct {
	t    *testing.T
	srv  *httptest.Server
	logs *testlog.Buffer
	ctx  context.Context
	// seen is the principal the wrapped handler last saw.
	mu   sync.Mutex
	seen *sigv4.Principal
}

// newEnv serves next behind the middleware with opts (credentials,
// logger and clock filled in when unset).
func newEnv(t *testing.T, next http.Handler, opts sigv4.Options) *env {
	t.Helper()
	e := &env{t: t, logs: &testlog.Buffer{}}
	if opts.Credentials == nil {
		opts.Credentials = []sigv4.Credentials{{AccessKeyID: akid, SecretAccessKey: secret, Account: account}}
	}
	if opts.Region == "" {
		opts.Region = region
	}
	opts.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.ErrorWriter == nil {
		// As the server wires it: refusals rendered by the SQS handler.
		opts.ErrorWriter = sluicesqs.New(nil, sluicesqs.Options{}).WriteAuthError
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := sigv4.PrincipalFromContext(r.Context()); ok {
			e.mu.Lock()
			e.seen = &p
			e.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
	e.srv = httptest.NewServer(sigv4.Middleware(record, opts))
	t.Cleanup(e.srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e.ctx = ctx
	return e
}

func (e *env) principal() *sigv4.Principal {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen
}

func (e *env) client(id, key string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       region,
		BaseEndpoint: aws.String(e.srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: id, SecretAccessKey: key}, nil
		}),
		Retryer: aws.NopRetryer{},
	})
}

// trivial answers every request with an empty JSON object (a valid
// ListQueues result) and echoes the body length it received.
func trivial() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Body-Length", strconv.Itoa(len(b)))
		w.Write([]byte("{}"))
	})
}

// realBroker is the SQS handler over an in-memory engine.
func realBroker(t *testing.T) http.Handler {
	t.Helper()
	eng, err := engine.Open(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return sluicesqs.New(eng, sluicesqs.Options{AccountID: account, Region: region})
}

// wantCode checks an SDK error's code (ErrorCode, from x-amzn-query-error)
// and HTTP status.
func wantCode(t *testing.T, err error, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("not an API error: %v", err)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("ErrorCode %q (%v), want %q", ae.ErrorCode(), err, code)
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("status: %v, want %d", err, status)
	}
}

func TestSDKTrivialHandler(t *testing.T) {
	e := newEnv(t, trivial(), sigv4.Options{})
	if _, err := e.client(akid, secret).ListQueues(e.ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatal(err)
	}
	p := e.principal()
	if p == nil || p.AccessKeyID != akid || p.Account != account || p.Restricted() {
		t.Fatalf("principal %+v", p)
	}
}

func TestSDKRealHandler(t *testing.T) {
	e := newEnv(t, realBroker(t), sigv4.Options{})
	// This test makes several calls on one keep-alive connection to an
	// in-process server that answers within microseconds. About once in
	// a few hundred runs the SDK's HTTP transport then fails a response
	// it is reading with "use of closed network connection": its write
	// loop, still finishing the request (the body's close), reports an
	// error after the server has already answered, and closes the
	// connection under the reader (seen with net/http's own transport
	// too; nothing in the server's bytes differs). The SDK's standard
	// retryer retries exactly that error, as production clients would;
	// the queue's visibility timeout is 0 so that a retried receive still
	// finds the message.
	cli := sqs.New(sqs.Options{
		Region:       region,
		BaseEndpoint: aws.String(e.srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret}, nil
		}),
	})
	q, err := cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"VisibilityTimeout": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("payload ✓ ", 2000) // a body large enough to be read in pieces
	if _, err := cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)}); err != nil {
		t.Fatal(err)
	}
	out, err := cli.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"SenderId"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || *out.Messages[0].Body != body {
		t.Fatalf("received %+v", out.Messages)
	}
	if got := out.Messages[0].Attributes["SenderId"]; got != akid {
		t.Errorf("SenderId %q", got)
	}
	if _, err := cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	// SQS errors still come from the handler, unchanged.
	_, err = cli.GetQueueUrl(e.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
	var dne *types.QueueDoesNotExist
	if !errors.As(err, &dne) {
		t.Fatalf("GetQueueUrl missing: %v", err)
	}
}

func TestSDKRejections(t *testing.T) {
	e := newEnv(t, realBroker(t), sigv4.Options{})
	t.Run("WrongSecret", func(t *testing.T) {
		_, err := e.client(akid, "not-the-secret").ListQueues(e.ctx, &sqs.ListQueuesInput{})
		wantCode(t, err, "SignatureDoesNotMatch", 403)
		if !strings.Contains(err.Error(), "The request signature we calculated does not match the signature you provided") {
			t.Errorf("message: %v", err)
		}
	})
	t.Run("UnknownKey", func(t *testing.T) {
		_, err := e.client("AKIDUNKNOWN", secret).ListQueues(e.ctx, &sqs.ListQueuesInput{})
		wantCode(t, err, "InvalidClientTokenId", 403)
		if !strings.Contains(err.Error(), "The security token included in the request is invalid.") {
			t.Errorf("message: %v", err)
		}
	})
	t.Run("WrongRegion", func(t *testing.T) {
		cli := sqs.New(sqs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(e.srv.URL), Retryer: aws.NopRetryer{},
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret}, nil
			})})
		_, err := cli.ListQueues(e.ctx, &sqs.ListQueuesInput{})
		wantCode(t, err, "IncompleteSignature", 403)
	})
}

func TestSDKClockSkew(t *testing.T) {
	for _, off := range []time.Duration{20 * time.Minute, -20 * time.Minute} {
		clk := clock.NewFake(time.Now().Add(off))
		e := newEnv(t, trivial(), sigv4.Options{Clock: clk})
		_, err := e.client(akid, secret).ListQueues(e.ctx, &sqs.ListQueuesInput{})
		wantCode(t, err, "RequestExpired", 403)
	}
	// Within the window (and a custom window) it passes.
	clk := clock.NewFake(time.Now().Add(10 * time.Minute))
	e := newEnv(t, trivial(), sigv4.Options{Clock: clk})
	if _, err := e.client(akid, secret).ListQueues(e.ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, trivial(), sigv4.Options{Clock: clk, MaxSkew: 5 * time.Minute})
	_, err := e.client(akid, secret).ListQueues(e.ctx, &sqs.ListQueuesInput{})
	wantCode(t, err, "RequestExpired", 403)
}

// errorResponse is the Query error document.
type errorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Error   struct {
		Type, Code, Message string
	}
	RequestID string `xml:"RequestId"`
}

// queryError decodes a Query error and checks the status and header.
func queryError(t *testing.T, resp *http.Response, code string) errorResponse {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, body %s", resp.StatusCode, b)
	}
	if h := resp.Header.Get("X-Amzn-Query-Error"); h != code+";Sender" {
		t.Errorf("x-amzn-query-error %q", h)
	}
	var er errorResponse
	if err := xml.Unmarshal(b, &er); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if er.Error.Code != code || er.Error.Type != "Sender" || er.RequestID == "" || er.Error.Message == "" {
		t.Fatalf("error %+v", er)
	}
	return er
}

func TestUnsignedRequests(t *testing.T) {
	e := newEnv(t, realBroker(t), sigv4.Options{})
	resp, err := http.Post(e.srv.URL+"/", "application/x-www-form-urlencoded", strings.NewReader("Action=ListQueues&Version=2012-11-05"))
	if err != nil {
		t.Fatal(err)
	}
	er := queryError(t, resp, "MissingAuthenticationToken")
	if er.Error.Message != "Request is missing Authentication Token" {
		t.Errorf("message %q", er.Error.Message)
	}

	// The JSON protocol gets the JSON shape.
	req, _ := http.NewRequest("POST", e.srv.URL+"/", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Amzn-Query-Error") != "MissingAuthenticationToken;Sender" ||
		resp.Header.Get("Content-Type") != "application/x-amz-json-1.0" ||
		string(b) != `{"__type":"com.amazon.coral.service#MissingAuthenticationTokenException","message":"Request is missing Authentication Token"}` {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// signedQuery builds a Query POST signed by the SDK's v4 signer.
func signedQuery(t *testing.T, target, form string, id, key string, at time.Time) *http.Request {
	t.Helper()
	req, _ := http.NewRequest("POST", target, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sum := sha256.Sum256([]byte(form))
	err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: id, SecretAccessKey: key},
		req, hex.EncodeToString(sum[:]), "sqs", region, at)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestMangledAuthorization(t *testing.T) {
	e := newEnv(t, trivial(), sigv4.Options{})
	good := signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now())
	auth := good.Header.Get("Authorization")
	cases := map[string]func(string) string{
		"OtherAlgorithm": func(a string) string { return strings.Replace(a, "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512", 1) },
		"SigV2":          func(string) string { return "AWS " + akid + ":c2lnbmF0dXJl" },
		"NoCredential":   func(a string) string { return strings.Replace(a, "Credential=", "Credentail=", 1) },
		"NoSignedHeaders": func(a string) string {
			return a[:strings.Index(a, " SignedHeaders")] + " Signature=" + a[strings.Index(a, "Signature=")+10:]
		},
		"NoSignature":      func(a string) string { return a[:strings.Index(a, ", Signature=")] },
		"EmptySignature":   func(a string) string { return a[:strings.Index(a, "Signature=")+10] },
		"ShortScope":       func(a string) string { return strings.Replace(a, "/sqs/aws4_request", "/sqs", 1) },
		"WrongService":     func(a string) string { return strings.Replace(a, "/sqs/", "/sns/", 1) },
		"WrongTerminator":  func(a string) string { return strings.Replace(a, "aws4_request", "aws4_reques", 1) },
		"BadScopeDate":     func(a string) string { return strings.Replace(a, akid+"/", akid+"/2026XX", 1) },
		"HostNotSigned":    func(a string) string { return strings.Replace(a, "host;", "", 1) },
		"UpperCaseHeaders": func(a string) string { return strings.Replace(a, "SignedHeaders=", "SignedHeaders=Content-Type;", 1) },
		"Junk":             func(string) string { return "AWS4-HMAC-SHA256 garbage" },
		"Repeated":         func(a string) string { return a + ", Signature=00" },
	}
	for name, mangle := range cases {
		t.Run(name, func(t *testing.T) {
			req := signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now())
			req.Header.Set("Authorization", mangle(auth))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			er := queryError(t, resp, "IncompleteSignature")
			t.Log(er.Error.Message)
		})
	}
	t.Run("NoDate", func(t *testing.T) {
		req := signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now())
		req.Header.Del("X-Amz-Date")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		queryError(t, resp, "IncompleteSignature")
	})
	t.Run("BadSignatureHex", func(t *testing.T) {
		req := signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now())
		a := req.Header.Get("Authorization")
		req.Header.Set("Authorization", a[:strings.Index(a, "Signature=")+10]+"zz")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		queryError(t, resp, "SignatureDoesNotMatch")
	})
}

func TestQueryPOSTSigned(t *testing.T) {
	e := newEnv(t, realBroker(t), sigv4.Options{})
	do := func(req *http.Request) (int, string) {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, b := do(signedQuery(t, e.srv.URL+"/", "Action=CreateQueue&QueueName=q1&Version=2012-11-05", akid, secret, time.Now()))
	if st != 200 || !strings.Contains(b, "<QueueUrl>") {
		t.Fatalf("CreateQueue: %d %s", st, b)
	}
	// To the queue path, with a body that needs encoding.
	form := "Action=SendMessage&MessageBody=" + url.QueryEscape("hello world & ünïcode +/=") + "&Version=2012-11-05"
	st, b = do(signedQuery(t, e.srv.URL+"/"+account+"/q1", form, akid, secret, time.Now()))
	if st != 200 || !strings.Contains(b, "<MessageId>") {
		t.Fatalf("SendMessage: %d %s", st, b)
	}
	// Changing the body after signing breaks the signature.
	req := signedQuery(t, e.srv.URL+"/", "Action=DeleteQueue&QueueUrl=q2", akid, secret, time.Now())
	req.Body = io.NopCloser(strings.NewReader("Action=DeleteQueue&QueueUrl=q1"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	queryError(t, resp, "SignatureDoesNotMatch")
	// So does a header the client signed.
	req = signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=latin1")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	queryError(t, resp, "SignatureDoesNotMatch")
	// A payload hash header that lies about the body.
	req = signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now())
	req.Header.Set("X-Amz-Content-Sha256", strings.Repeat("0", 64))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	queryError(t, resp, "SignatureDoesNotMatch")
	// Accept: application/json gets the Query error as JSON.
	req = signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, "wrong", time.Now())
	req.Header.Set("Accept", "application/json")
	st, b = do(req)
	if st != 403 || !strings.Contains(b, `"Code":"SignatureDoesNotMatch"`) {
		t.Fatalf("%d %s", st, b)
	}
}

func TestPresignedQueryGET(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Second)
	clk := clock.NewFake(start)
	e := newEnv(t, realBroker(t), sigv4.Options{Clock: clk})
	presign := func(rawQuery string, expires int) string {
		t.Helper()
		u := e.srv.URL + "/?" + rawQuery
		if expires > 0 {
			u += "&X-Amz-Expires=" + strconv.Itoa(expires)
		}
		req, _ := http.NewRequest("GET", u, nil)
		signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret},
			req, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sqs", region, start)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	u := presign("Action=CreateQueue&QueueName=pre&Version=2012-11-05&Attribute.1.Name=DelaySeconds&Attribute.1.Value=0", 300)
	resp := get(u)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "/"+account+"/pre</QueueUrl>") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// Tampering with a signed parameter.
	queryError(t, get(strings.Replace(u, "QueueName=pre", "QueueName=prf", 1)), "SignatureDoesNotMatch")
	// Adding one.
	queryError(t, get(u+"&Attribute.2.Name=x"), "SignatureDoesNotMatch")
	// Expiry: still valid at 299 s, refused after 300 s.
	lq := presign("Action=ListQueues&Version=2012-11-05", 300)
	clk.Advance(299 * time.Second)
	if resp := get(lq); resp.StatusCode != 200 {
		t.Fatalf("before expiry: %d", resp.StatusCode)
	}
	clk.Advance(2 * time.Second)
	queryError(t, get(lq), "RequestExpired")
	// A presigned URL with no X-Amz-Expires lives MaxSkew.
	noExp := presign("Action=ListQueues&Version=2012-11-05", 0)
	clk.Advance(15 * time.Minute)
	queryError(t, get(noExp), "RequestExpired")
	// Incomplete presigned parameters, and an out-of-range expiry.
	queryError(t, get(strings.Replace(noExp, "X-Amz-SignedHeaders=", "X-Amz-SignedHeaderz=", 1)), "IncompleteSignature")
	queryError(t, get(presign("Action=ListQueues", 700000)), "IncompleteSignature")
	// Both an Authorization header and presigned parameters.
	req, _ := http.NewRequest("GET", lq, nil)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	queryError(t, resp, "IncompleteSignature")
}

// TestEscapingMatchesSDK signs awkward paths and query strings with the
// SDK's signer and checks the middleware agrees.
func TestEscapingMatchesSDK(t *testing.T) {
	e := newEnv(t, trivial(), sigv4.Options{})
	for _, target := range []string{
		"/",
		"/" + account + "/a%20b",
		"/" + account + "/%C3%A9t%C3%A9",
		"/x/~y/-_.",
		"/?Action=ListQueues&QueueNamePrefix=" + url.QueryEscape("a b+c/d~e*f'g"),
		"/?b=2&a=1&a=0&empty=&flag",
		"/?k=%E2%9C%93&Z=upper",
	} {
		req := signedQuery(t, e.srv.URL+target, "Action=ListQueues&Version=2012-11-05", akid, secret, time.Now())
		req.Header.Add("X-Custom", "  spaced    out  value ")
		req.Header.Add("X-Custom", "second")
		// Re-sign now that the custom header is there.
		req.Header.Del("Authorization")
		sum := sha256.Sum256([]byte("Action=ListQueues&Version=2012-11-05"))
		if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret},
			req, hex.EncodeToString(sum[:]), "sqs", region, time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", target, resp.StatusCode, b)
		} else if resp.Header.Get("X-Body-Length") != "36" {
			t.Errorf("%s: body not passed on: %s", target, resp.Header.Get("X-Body-Length"))
		}
	}
}

func TestNoCredentialsRefusesAll(t *testing.T) {
	e := newEnv(t, trivial(), sigv4.Options{Credentials: []sigv4.Credentials{}})
	_, err := e.client(akid, secret).ListQueues(e.ctx, &sqs.ListQueuesInput{})
	wantCode(t, err, "InvalidClientTokenId", 403)
}

func TestValidate(t *testing.T) {
	for _, c := range [][]sigv4.Credentials{
		{{AccessKeyID: "", SecretAccessKey: "x"}},
		{{AccessKeyID: "A", SecretAccessKey: ""}},
		{{AccessKeyID: "A/B", SecretAccessKey: "x"}},
		{{AccessKeyID: "A", SecretAccessKey: "x"}, {AccessKeyID: "A", SecretAccessKey: "y"}},
		{{AccessKeyID: "A", SecretAccessKey: "x", Queues: []string{""}}},
	} {
		err := sigv4.Options{Credentials: c}.Validate()
		if err == nil {
			t.Errorf("%+v: no error", c)
		} else if strings.Contains(err.Error(), "x") && strings.Contains(err.Error(), "secret access key of") {
			t.Errorf("error names a secret: %v", err)
		}
	}
}

// TestLogsHoldNoSecrets drives every kind of failure and checks the log
// has a line for each and holds neither the secret nor any signature.
func TestLogsHoldNoSecrets(t *testing.T) {
	e := newEnv(t, trivial(), sigv4.Options{})
	_, _ = e.client(akid, secret+"x").ListQueues(e.ctx, &sqs.ListQueuesInput{})
	_, _ = e.client("AKIDOTHER", secret).ListQueues(e.ctx, &sqs.ListQueuesInput{})
	req := signedQuery(t, e.srv.URL+"/", "Action=ListQueues", akid, secret, time.Now().Add(-time.Hour))
	sigHeader := req.Header.Get("Authorization")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logs := e.logs.String()
	for _, code := range []string{"SignatureDoesNotMatch", "InvalidClientTokenId", "RequestExpired"} {
		if !strings.Contains(logs, code) {
			t.Errorf("no log line for %s:\n%s", code, logs)
		}
	}
	sig := sigHeader[strings.Index(sigHeader, "Signature=")+10:]
	for _, s := range []string{secret, "s3cr3t", sig, "Signature=", "Authorization"} {
		if strings.Contains(logs, s) {
			t.Errorf("log contains %q:\n%s", s, logs)
		}
	}
}
