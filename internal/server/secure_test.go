package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/brokertest/selfsigned"
)

func startWith(t *testing.T, mod func(*Options)) *Server {
	t.Helper()
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = "127.0.0.1:0"
	mod(&o)
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// amqpChannel dials s's AMQP listener as guest and opens a channel; the
// connection is closed when the test ends.
func amqpChannel(t *testing.T, s *Server) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestAMQPAndSQSShareQueues: a message published over AMQP to a queue
// declared over AMQP is received over SQS from the same server.
func TestAMQPAndSQSShareQueues(t *testing.T) {
	s := startWith(t, func(*Options) {})
	ch := amqpChannel(t, s)
	if _, err := ch.QueueDeclare("shared", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Confirm(false)
	confirm := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := ch.Publish("", "shared", false, false, amqp091.Publishing{Body: []byte("from amqp"), DeliveryMode: 2,
		Headers: amqp091.Table{"tenant": "acme"}}); err != nil {
		t.Fatal(err)
	}
	if c := <-confirm; !c.Ack {
		t.Fatal("publish not confirmed")
	}
	c := client(s.SQSAddr())
	url, err := c.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String("shared")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, WaitTimeSeconds: 5, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "from amqp" {
		t.Fatalf("SQS receive: %+v %v", out, err)
	}
	if v := out.Messages[0].MessageAttributes["tenant"]; v.StringValue == nil || *v.StringValue != "acme" {
		t.Fatalf("header not mapped to an attribute: %+v", out.Messages[0].MessageAttributes)
	}
}

func TestAuthenticationEverywhere(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	s := startWith(t, func(o *Options) {
		o.SQSCredentials = []SQSCredential{{AccessKeyID: "AKIDSLUICE", SecretAccessKey: "right-secret"}}
		o.HTTPAuth.Tokens = []string{token}
		o.AMQPUsers = []AMQPUser{{Name: "app", Password: "app-pass", Permissions: map[string]AMQPPermission{"/": {".*", ".*", ".*"}}}}
	})
	ctx := context.Background()
	signed := func(secret string) *sqs.Client {
		return sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + s.SQSAddr()), Region: "us-east-1",
			Credentials: credentials.NewStaticCredentialsProvider("AKIDSLUICE", secret, ""), RetryMaxAttempts: 1})
	}
	if _, err := signed("right-secret").CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q")}); err != nil {
		t.Fatalf("signed request refused: %v", err)
	}
	_, err := signed("wrong-secret").ListQueues(ctx, &sqs.ListQueuesInput{})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "SignatureDoesNotMatch" {
		t.Fatalf("wrong secret: %v", err)
	}
	get := func(path string, withToken bool) int {
		req, _ := http.NewRequest("GET", "http://"+s.SQSAddr()+path, nil)
		if withToken {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/sluice/v1/queues", "/metrics", "/ui/", "/sluice/v1/alerts", "/sluice/v1/advisor"} {
		if code := get(p, false); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d, want 401", p, code)
		}
		if code := get(p, true); code != http.StatusOK {
			t.Errorf("GET %s with the token = %d, want 200", p, code)
		}
	}
	if code := get("/health", false); code != http.StatusOK {
		t.Errorf("/health = %d, want 200 without credentials", code)
	}
	if _, err := amqp091.Dial("amqp://app:wrong@" + s.AMQPAddr() + "/"); !errors.Is(err, amqp091.ErrCredentials) {
		t.Fatalf("AMQP wrong password: %v", err)
	}
	conn, err := amqp091.Dial("amqp://app:app-pass@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatalf("AMQP right password: %v", err)
	}
	conn.Close()
}

func TestNonLoopbackNeedsCredentials(t *testing.T) {
	o := DefaultOptions()
	o.SQSListen = "0.0.0.0:0"
	o.AMQPListen = ""
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("exposed without credentials: %v", err)
	}
	o.SQSCredentials = []SQSCredential{{AccessKeyID: "AKID", SecretAccessKey: "s"}}
	o.HTTPAuth.Tokens = []string{"0123456789abcdef0123"}
	if err := o.Validate(); err != nil {
		t.Fatalf("exposed with credentials refused: %v", err)
	}
	o.AMQPListen = "0.0.0.0:0"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "amqp_listen") {
		t.Fatalf("AMQP exposed without users: %v", err)
	}
}

func TestTLSOnHTTPAndAMQP(t *testing.T) {
	certPath, keyPath, pool := selfsigned.Cert(t)
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	s := startWith(t, func(o *Options) {
		o.TLS = TLSConfig{Cert: certPath, Key: keyPath}
		o.AMQPListen = ""
		o.AMQPSListen = "127.0.0.1:0"
		o.ReadyFile = readyFile
	})
	// The ready file names the AMQPS listener as such, and no plain one.
	poll.CheckFor(t, 10*time.Second, func() error {
		var ready map[string]any
		data, err := os.ReadFile(readyFile)
		if err != nil || json.Unmarshal(data, &ready) != nil || ready["amqps"] != s.AMQPSAddr() || ready["amqp"] != "" || s.AMQPSAddr() == "" {
			return fmt.Errorf("ready file %s (%v), want amqps %q and amqp \"\"", data, err, s.AMQPSAddr())
		}
		return nil
	})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("https://" + s.SQSAddr()), Region: "us-east-1", HTTPClient: hc,
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("tls")})
	if err != nil {
		t.Fatalf("SQS over HTTPS: %v", err)
	}
	// The queue's URL is the one the client reached it at: https.
	if u := aws.ToString(out.QueueUrl); u != "https://"+s.SQSAddr()+"/000000000000/tls" {
		t.Fatalf("queue URL over HTTPS: %s", u)
	}
	conn, err := amqp091.DialTLS("amqps://guest:guest@"+s.AMQPAddr()+"/", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("AMQPS: %v", err)
	}
	conn.Close()
	// Plain HTTP to the TLS listener is refused.
	if resp, err := http.Get("http://" + s.SQSAddr() + "/health"); err == nil && resp.StatusCode == 200 {
		t.Fatal("plain HTTP answered on the TLS listener")
	}
}

// TestHTTPConnectionCap: at the cap, a connection that has sent nothing
// is closed to make room for a new one; when every connection is busy with
// a request, new ones wait until one ends.
func TestHTTPConnectionCap(t *testing.T) {
	s := startWith(t, func(o *Options) { o.MaxHTTPConnections = 2 })
	addr := s.SQSAddr()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	served := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		return strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200")
	}
	// Two silent connections hold both slots; a third is served anyway.
	dial()
	dial()
	third := dial()
	third.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
	if !served(third, 10*time.Second) {
		t.Fatal("idle connections kept a new client out")
	}
	third.Close()

	// Two connections in the middle of a request (headers half sent) are
	// busy: a third waits until one of them completes its request.
	busy := []net.Conn{dial(), dial()}
	for _, c := range busy {
		c.Write([]byte("GET /health HTTP/1.1\r\n"))
	}
	fourth := dial()
	fourth.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
	if served(fourth, 300*time.Millisecond) {
		t.Fatal("served beyond the cap while every connection was busy")
	}
	busy[0].Write([]byte("Host: x\r\nConnection: close\r\n\r\n"))
	if !served(busy[0], 10*time.Second) {
		t.Fatal("busy request not served")
	}
	if !served(fourth, 10*time.Second) {
		t.Fatal("not served after a slot freed")
	}
}

// TestIdleConnectionsDoNotStarveOthers is the security issue's slot
// exhaustion finding: one client holding every connection slot with idle
// keep-alive connections made /health, SQS and the admin API time out.
// Now idle connections give way, and one address cannot take more than
// its share.
func TestIdleConnectionsDoNotStarveOthers(t *testing.T) {
	const slots = 40
	s := startWith(t, func(o *Options) { o.MaxHTTPConnections = slots })
	addr := s.SQSAddr()
	// The hog: every slot, each used once and then held idle.
	for i := 0; i < slots; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatalf("hog connection %d: %v", i, err)
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/health", "/sluice/v1/queues", "/?Action=ListQueues"} {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("%s while idle connections hold every slot: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	if _, err := client(addr).ListQueues(context.Background(), &sqs.ListQueuesInput{}); err != nil {
		t.Fatalf("SDK while idle connections hold every slot: %v", err)
	}
}

// TestHTTPConnectionsPerIP: one address gets at most its share; a
// connection over it is closed when none of the address's own
// connections is idle.
func TestHTTPConnectionsPerIP(t *testing.T) {
	s := startWith(t, func(o *Options) { o.MaxHTTPConnectionsPerIP = 3 })
	addr := s.SQSAddr()
	for i := 0; i < 3; i++ { // busy: headers half sent
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET /health HTTP/1.1\r\n"))
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 64)); err == nil {
		t.Fatal("a connection over the per-IP cap was served")
	}
}

// TestDiskNearlyFullBackPressure: below min_free_disk, sends are refused
// with a retryable 503 while receives and deletes go on; when space
// returns, sends are accepted again, with no restart.
func TestDiskNearlyFullBackPressure(t *testing.T) {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	o.MinFreeDisk = 1 << 30
	var free atomic.Uint64
	free.Store(10 << 30)
	o.freeBytes = func(string) (uint64, error) { return free.Load(), nil }
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	c := sqs.New(sqs.Options{BaseEndpoint: aws.String("http://" + s.SQSAddr()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})
	bg := context.Background()
	q, err := c.CreateQueue(bg, &sqs.CreateQueueInput{QueueName: aws.String("d")})
	if err != nil {
		t.Fatal(err)
	}
	send := func() error {
		_, err := c.SendMessage(bg, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m")})
		return err
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	free.Store(100 << 20) // below the 1 GiB watermark
	poll.CheckFor(t, 10*time.Second, func() error {
		err := send()
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "ServiceUnavailable" {
			return nil
		}
		return fmt.Errorf("sends not refused on a nearly full disk: %v", err)
	})
	// Receives and deletes, which free space, still work.
	out, err := c.ReceiveMessage(bg, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
	if err != nil || len(out.Messages) == 0 {
		t.Fatalf("receive while refusing sends: %v", err)
	}
	if _, err := c.DeleteMessage(bg, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
		t.Fatalf("delete while refusing sends: %v", err)
	}
	free.Store(10 << 30) // space is back
	poll.CheckFor(t, 10*time.Second, func() error {
		if err := send(); err != nil {
			return fmt.Errorf("sends still refused after space returned: %w", err)
		}
		return nil
	})
}

// TestOversizedHeadersRefused: a request whose headers exceed the 64 KiB
// limit gets 431 and costs the broker no more than that.
func TestOversizedHeadersRefused(t *testing.T) {
	s := startWith(t, func(*Options) {})
	req, _ := http.NewRequest("GET", "http://"+s.SQSAddr()+"/health", nil)
	req.Header.Set("X-Padding", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB of headers: %d, want 431", resp.StatusCode)
	}
}
