package crash

import (
	"bytes"
	"context"
	"net"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/internal/brokertest"
)

// TestClientSurvivesEarlyAnswer: a receive answered (10 × 1 KiB, more than
// the client's 4 KiB read buffer) while net/http's writeLoop is still
// finishing the request is read in full. The interleaving is forced: the
// connection holds the writeLoop just after the request's bytes are sent
// until the SDK has the response headers, has closed the request body it
// handed to http.Client.Do (smithy-go does so as soon as Do returns) and
// reads the body past what the first read brought. Then the writeLoop
// finishes (httptrace's WroteRequest), and, if it failed, the connection's
// Close is awaited before the read goes on. With the SDK's own body given
// to net/http the writeLoop fails with io.EOF, the Transport closes the
// connection and the receive fails with "use of closed network
// connection" after 4,096 bytes (the failed receives make perf-fifo
// counted); with ownBodies it succeeds. The broker is real; it sends every
// byte either way.
func TestClientSurvivesEarlyAnswer(t *testing.T) {
	b := brokertest.Start(t, brokertest.Options(t), nil)
	ctx := context.Background()
	plain := NewClient(b.SQSURL(), "early", 2, 30*time.Second)
	q, err := plain.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("early")})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("0123456789abcdef", 64) // 1 KiB
	var entries []types.SendMessageBatchRequestEntry
	for i := range 10 {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)})
	}
	if res, err := plain.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: entries}); err != nil || len(res.Failed) > 0 {
		t.Fatalf("send: %v %+v", err, res)
	}

	hc := &holdConn{release: make(chan struct{}), wrote: make(chan error, 1), closed: make(chan struct{})}
	d := &net.Dialer{Timeout: 2 * time.Second}
	var dials int
	hooked := dialClient(b.SQSURL(), "early", 2, 30*time.Second, func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if dials++; dials > 1 {
			return c, nil // only the first connection is held
		}
		hc.Conn = c
		return hc, nil
	})
	rctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		select {
		case hc.wrote <- i.Err:
		default:
		}
	}})
	res, err := hooked.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl,
		MaxNumberOfMessages: 10, VisibilityTimeout: 30})
	hc.mu.Lock()
	held, hookRan := hc.held, hc.hooked
	hc.mu.Unlock()
	if !held || !hookRan {
		t.Fatalf("the interleaving was not forced (write held %v, read hooked %v; %d bytes read; err %v): the test proves nothing", held, hookRan, len(hc.seen), err)
	}
	if err != nil {
		t.Fatalf("receive answered while the request was being finished: %v", err)
	}
	if len(res.Messages) != 10 {
		t.Fatalf("received %d messages, want 10", len(res.Messages))
	}
	for _, m := range res.Messages {
		if aws.ToString(m.Body) != body {
			t.Fatalf("body %.40q…, want the 1 KiB sent", aws.ToString(m.Body))
		}
	}
}

// holdConn forces the interleaving of TestClientSurvivesEarlyAnswer on the
// first request it carries.
type holdConn struct {
	net.Conn
	release chan struct{} // closed by the body read: the writeLoop may go on
	wrote   chan error    // the request write's result (httptrace)
	closed  chan struct{} // closed by Close
	once    sync.Once

	mu     sync.Mutex
	held   bool   // the request's write was held
	hooked bool   // the body read released it
	seen   []byte // bytes read so far
}

// Write sends p and, for the bytes of the ReceiveMessage body, waits for
// release before returning to net/http's writeLoop.
func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	hold := !c.held && bytes.Contains(p, []byte(`"MaxNumberOfMessages"`))
	c.held = c.held || hold // before the bytes go: the answer may be read at once
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	if hold {
		<-c.release
	}
	return n, err
}

// Read: the first read after the response's headers have arrived comes
// from the SDK reading the body (after Do returned and the SDK closed the
// request body). It releases the held write and waits for the writeLoop's
// outcome, and for the Transport's Close when the write failed.
func (c *holdConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	hook := !c.hooked && c.held && bytes.Contains(c.seen, []byte("\r\n\r\n"))
	c.hooked = c.hooked || hook
	c.mu.Unlock()
	if hook {
		close(c.release)
		if err := <-c.wrote; err != nil {
			<-c.closed
		}
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.seen = append(c.seen, p[:n]...)
	c.mu.Unlock()
	return n, err
}

func (c *holdConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
