package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// liveHeap is the heap still referenced after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestBodyMemoryBoundedBeforeAuth is the security issue's first finding:
// connections that send only headers declaring a 5 MiB body made the
// server allocate 5 MiB each, before SigV4 could refuse them (2,000
// connections: 8 GB). Now a buffer grows only as bytes arrive, and all
// buffered bodies share one budget: the live heap stays far below what
// the declared lengths would cost, requests over the budget get a
// retryable 503, everything is released when the clients go, and real
// clients are served afterwards.
func TestBodyMemoryBoundedBeforeAuth(t *testing.T) {
	for _, signed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sigv4=%v", signed), func(t *testing.T) {
			const budget = 6 << 20
			s := startWith(t, func(o *Options) {
				o.HTTPBodyBudget = budget
				if signed {
					o.SQSCredentials = []SQSCredential{{AccessKeyID: "AKIDHOSTILE", SecretAccessKey: "secret-hostile"}}
				}
			})
			addr := s.SQSAddr()
			const conns = 64
			base := liveHeap()

			// Phase 1: headers only, each declaring the 5 MiB maximum. A
			// signed request names the real (non-secret) key id with a
			// wrong signature: the body must be read to check it.
			var attackers []net.Conn
			defer func() {
				for _, c := range attackers {
					c.Close()
				}
			}()
			for i := 0; i < conns; i++ {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				attackers = append(attackers, c)
				hdr := "POST / HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/x-amz-json-1.0\r\n" +
					"X-Amz-Target: AmazonSQS.SendMessage\r\nContent-Length: 5242000\r\n"
				if signed {
					now := time.Now().UTC()
					hdr += "X-Amz-Date: " + now.Format("20060102T150405Z") + "\r\n" +
						"Authorization: AWS4-HMAC-SHA256 Credential=AKIDHOSTILE/" + now.Format("20060102") +
						"/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=" + strings.Repeat("0", 64) + "\r\n"
				}
				if _, err := c.Write([]byte(hdr + "\r\n")); err != nil {
					t.Fatal(err)
				}
			}
			// Every request is now waiting for its body, holding only a
			// first small buffer.
			poll.CheckFor(t, 10*time.Second, poll.True("every request to start reading its body", func() bool {
				return s.BufferedRequestBytes() >= conns*4096
			}))
			if held := s.BufferedRequestBytes(); held > conns*8192 {
				t.Fatalf("headers alone hold %d bytes of buffers", held)
			}
			if grew := liveHeap() - base; grew > 32<<20 {
				t.Fatalf("live heap grew %d MiB for %d header-only requests (declared %d MiB)", grew>>20, conns, conns*5)
			}

			// Phase 2: each sends 1 MiB of its body and stalls: 64 MiB
			// of demand against a 6 MiB budget.
			var got503 atomic.Int32
			var wg sync.WaitGroup
			var peak atomic.Int64
			for _, c := range attackers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.SetDeadline(time.Now().Add(30 * time.Second))
					go c.Write(make([]byte, 1<<20)) // may block: the server stops reading
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
						got503.Add(1)
					}
				}()
			}
			poll.CheckFor(t, 20*time.Second, poll.True("most over-budget requests to be refused with 503", func() bool {
				if b := s.BufferedRequestBytes(); b > peak.Load() {
					peak.Store(b)
				}
				return got503.Load() >= conns/2
			}))
			if p := peak.Load(); p > budget {
				t.Fatalf("buffered %d bytes, over the %d budget", p, budget)
			}
			if grew := liveHeap() - base; grew > budget+32<<20 {
				t.Fatalf("live heap grew %d MiB with a %d MiB budget", grew>>20, budget>>20)
			}
			t.Logf("503s: %d of %d; peak buffered %d KiB", got503.Load(), conns, peak.Load()>>10)

			for _, c := range attackers {
				c.Close()
			}
			wg.Wait()
			poll.CheckFor(t, 10*time.Second, poll.True("every buffer to be released", func() bool { return s.BufferedRequestBytes() == 0 }))

			// Real clients are served afterwards.
			if !signed {
				c := client(addr)
				ctx := context.Background()
				q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("after")})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(strings.Repeat("b", 200<<10))}); err != nil {
					t.Fatal(err)
				}
			}
			qs := s.Engine().ListQueues("")
			if want := map[bool]int{false: 1, true: 0}[signed]; len(qs) != want {
				t.Fatalf("queues after the attack: %v", qs)
			}
		})
	}
}
