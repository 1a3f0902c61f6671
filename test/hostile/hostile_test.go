// Package hostile runs the real sluice binary under a bounded hostile
// load and checks that it stays within a stated memory ceiling while a
// well-behaved client keeps being served (docs/security.md, "Hostile-input
// soak").
//
// For SLUICE_HOSTILE_DURATION (default 60s) these run at once against one
// broker started with the config below:
//
//   - header-only requests declaring a 5 MiB body, then silence (the
//     pre-auth memory attack);
//   - malformed and oversized HTTP requests: bad JSON, bad forms, 6 MiB
//     bodies, 70 KiB headers, Content-Length with Transfer-Encoding,
//     random bytes;
//   - idle keep-alive HTTP connections, more than the listener's cap;
//   - AMQP: silent sockets, logins that publish a 1 MB body and stall
//     short of its end on many channels, and garbage frames.
//
// The broker's RSS is sampled every 250 ms and must stay under rssCeiling;
// a client sends, receives and deletes over SQS (aws-sdk-go-v2) and checks
// /health throughout, and every one of its operations must succeed.
package hostile

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/test/crash"
)

// rssCeiling is the stated ceiling for the broker's resident memory under
// this load with this config (http_body_budget 32 MiB, 1 MiB AMQP bodies
// capped at 16 MiB per connection, 64 handshakes).
const rssCeiling = 512 << 20

const config = `
http_body_budget = 33554432
max_http_connections = 600
max_http_connections_per_ip = 600
amqp_max_handshakes = 64
`

func duration(t *testing.T) time.Duration {
	d := 60 * time.Second
	if v := os.Getenv("SLUICE_HOSTILE_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("SLUICE_HOSTILE_DURATION=%q: want a positive duration", v)
		}
	}
	return d
}

func TestHostileSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("hostile soak skipped with -short")
	}
	dur := duration(t)
	dir := t.TempDir()
	bin, err := crash.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := crash.Start(context.Background(), bin, dir, 60*time.Second, "--config", cfg, "--store", "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(10 * time.Second)
	amqpAddr := srv.AMQP
	httpAddr := srv.Addr

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	run := func(n int, f func(ctx context.Context, r *rand.Rand)) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
				for ctx.Err() == nil {
					f(ctx, r)
				}
			}()
		}
	}
	var attacks atomic.Int64
	count := func() { attacks.Add(1) }
	run(40, func(ctx context.Context, r *rand.Rand) { headerOnly(ctx, httpAddr, 8); count() })
	run(4, func(ctx context.Context, r *rand.Rand) { malformedHTTP(httpAddr, r); count() })
	run(2, func(ctx context.Context, r *rand.Rand) { idleHTTP(ctx, httpAddr, 400); count() })
	run(2, func(ctx context.Context, r *rand.Rand) { silentAMQP(ctx, amqpAddr, 100); count() })
	run(4, func(ctx context.Context, r *rand.Rand) { partialAMQP(ctx, amqpAddr, 30); count() })
	run(2, func(ctx context.Context, r *rand.Rand) { garbageAMQP(amqpAddr, r); count() })

	// The sampler and the well-behaved client.
	var maxRSS int64
	legit, failures := 0, []string{}
	c := sqs.New(sqs.Options{BaseEndpoint: aws.String(srv.URL()), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), RetryMaxAttempts: 10})
	qctx, qcancel := context.WithTimeout(context.Background(), 30*time.Second)
	q, err := c.CreateQueue(qctx, &sqs.CreateQueueInput{QueueName: aws.String("legit")})
	qcancel()
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: 10 * time.Second}
	for ctx.Err() == nil {
		<-tick.C
		rss, err := procRSS(srv.PID)
		if err != nil {
			t.Fatalf("broker gone: %v (log: %s)", err, crash.Tail(dir))
		}
		maxRSS = max(maxRSS, rss)
		if rss > rssCeiling {
			t.Errorf("RSS %d MiB over the %d MiB ceiling", rss>>20, rssCeiling>>20)
			break
		}
		legit++
		if err := legitRound(c, hc, srv.URL(), q.QueueUrl); err != nil {
			failures = append(failures, err.Error())
		}
	}
	cancel()
	wg.Wait()
	t.Logf("%s: %d attack rounds, %d client rounds, max RSS %d MiB (ceiling %d MiB)",
		dur, attacks.Load(), legit, maxRSS>>20, rssCeiling>>20)
	if len(failures) > 0 {
		t.Errorf("%d of %d client rounds failed; first: %s", len(failures), legit, failures[0])
	}
	// Still alive and serving after the storm.
	if err := legitRound(c, hc, srv.URL(), q.QueueUrl); err != nil {
		t.Fatalf("after the soak: %v (log: %s)", err, crash.Tail(dir))
	}
}

// legitRound sends, receives and deletes one message and checks /health.
func legitRound(c *sqs.Client, hc *http.Client, base string, qurl *string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body := "hello " + strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: qurl, MessageBody: aws.String(body)}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: qurl, WaitTimeSeconds: 5, MaxNumberOfMessages: 10})
	if err != nil || len(out.Messages) == 0 {
		return fmt.Errorf("receive: %v (%d messages)", err, len(out.Messages))
	}
	for _, m := range out.Messages {
		if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: qurl, ReceiptHandle: m.ReceiptHandle}); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
	resp, err := hc.Get(base + "/health")
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("health: %d", resp.StatusCode)
	}
	return nil
}

// headerOnly opens n connections that declare a large body and send none,
// holds them a moment and closes them.
func headerOnly(ctx context.Context, addr string, n int) {
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.SendMessage\r\nContent-Length: 5242000\r\n\r\n", addr)
		c.Write(make([]byte, 64<<10)) // a little body, then silence
	}
	sleep(ctx, 2*time.Second)
	for _, c := range conns {
		c.Close()
	}
}

// malformedHTTP sends one bad request and reads whatever comes back.
func malformedHTTP(addr string, r *rand.Rand) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	w := bufio.NewWriter(c)
	json := "POST / HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.%s\r\nContent-Length: %d\r\n\r\n%s"
	switch r.IntN(7) {
	case 0:
		body := `{"QueueUrl":` + strings.Repeat("[", r.IntN(5000))
		fmt.Fprintf(w, json, "SendMessage", len(body), body)
	case 1:
		body := "Action=SendMessage&QueueUrl=%zz&" + strings.Repeat("a=b&", r.IntN(10000))
		fmt.Fprintf(w, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	case 2:
		fmt.Fprintf(w, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", addr, 6<<20)
		w.Write(make([]byte, 6<<20))
	case 3:
		fmt.Fprintf(w, "GET /health HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n", addr, strings.Repeat("x", 70<<10))
	case 4:
		fmt.Fprintf(w, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", addr)
	case 5:
		b := make([]byte, r.IntN(4096))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		w.Write(b)
	case 6:
		body := `{"Entries":[` + strings.Repeat(`{"Id":"x","MessageBody":"`+strings.Repeat("y", 1000)+`"},`, 100) + `{}]}`
		fmt.Fprintf(w, json, "SendMessageBatch", len(body), body)
	}
	w.Flush()
	c.Read(make([]byte, 4096))
}

// idleHTTP holds n keep-alive connections idle after one request each.
func idleHTTP(ctx context.Context, addr string, n int) {
	var conns []net.Conn
	for i := 0; i < n && ctx.Err() == nil; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	}
	sleep(ctx, 5*time.Second)
	for _, c := range conns {
		c.Close()
	}
}

// silentAMQP opens n sockets to the AMQP port and sends nothing.
func silentAMQP(ctx context.Context, addr string, n int) {
	var conns []net.Conn
	for i := 0; i < n; i++ {
		if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			conns = append(conns, c)
		}
	}
	sleep(ctx, 3*time.Second)
	for _, c := range conns {
		c.Close()
	}
}

// partialAMQP logs in and, on channels 1..n, publishes a 1,000,000-byte
// body and stops short of its last byte, then holds the connection.
func partialAMQP(ctx context.Context, addr string, n int) {
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	r, w := bufio.NewReader(nc), bufio.NewWriter(nc)
	send := func(ch uint16, m wire.Method) error {
		f, err := wire.MethodFrame(ch, m)
		if err != nil {
			return err
		}
		return wire.WriteFrame(w, f)
	}
	w.WriteString(wire.ProtocolHeader)
	w.Flush()
	if _, err := wire.ReadFrame(r, 0); err != nil {
		return
	}
	send(0, &wire.ConnectionStartOK{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	w.Flush()
	if _, err := wire.ReadFrame(r, 0); err != nil {
		return
	}
	send(0, &wire.ConnectionTuneOK{ChannelMax: 2047, FrameMax: 131072})
	send(0, &wire.ConnectionOpen{VirtualHost: "/"})
	w.Flush()
	go func() { // drain whatever the server says
		for {
			if _, err := wire.ReadFrame(r, 0); err != nil {
				return
			}
		}
	}()
	chunk := make([]byte, 131072-wire.FrameOverhead)
	hdr, _ := wire.AppendContentHeader(nil, &wire.ContentHeader{ClassID: wire.ClassBasic, BodySize: 1_000_000})
	for ch := uint16(1); ch <= uint16(n) && ctx.Err() == nil; ch++ {
		send(ch, &wire.ChannelOpen{})
		send(ch, &wire.BasicPublish{RoutingKey: "nowhere"})
		if wire.WriteFrame(w, wire.Frame{Type: wire.FrameHeader, Channel: ch, Payload: hdr}) != nil {
			return
		}
		for left := 999_999; left > 0; left -= len(chunk) {
			if wire.WriteFrame(w, wire.Frame{Type: wire.FrameBody, Channel: ch, Payload: chunk[:min(left, len(chunk))]}) != nil {
				return
			}
		}
		if w.Flush() != nil {
			return
		}
	}
	sleep(ctx, 3*time.Second)
}

// garbageAMQP sends a protocol header and then random frames.
func garbageAMQP(addr string, r *rand.Rand) {
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if r.IntN(2) == 0 {
		nc.Write([]byte(wire.ProtocolHeader))
	}
	b := make([]byte, r.IntN(8192))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	nc.Write(b)
	nc.Read(make([]byte, 1024))
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// procRSS is VmRSS of pid in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 {
				return 0, fmt.Errorf("VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
