package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// client speaks the AWS JSON 1.0 protocol of SQS (reference §5.1) directly
// over net/http. It exists because the load generator shares the machine with
// the broker: the SDK's middleware stack, signing and per-request reflection
// would cost more CPU than the requests themselves. Requests are not signed;
// Sluice does not verify signatures yet.
type client struct {
	hc       *http.Client
	endpoint string // base URL; every action is POST <endpoint>/
}

// newClient returns a client whose Transport keeps one idle connection per
// worker, so no request pays for a TCP handshake after warm-up.
func newClient(endpoint string, conns int) *client {
	tr := &http.Transport{
		Proxy:               nil, // a benchmark never goes through HTTP_PROXY
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 4,
		MaxIdleConnsPerHost: conns + 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
	return &client{
		hc:       &http.Client{Transport: tr},
		endpoint: strings.TrimRight(endpoint, "/") + "/",
	}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// apiError is an SQS error response (or a non-200 without one).
type apiError struct {
	Status  int
	Code    string // the Query code when the server sent x-amzn-query-error, else the JSON shape
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("bench: SQS error %d %s: %s", e.Status, e.Code, e.Message)
}

// trackedBody is a request body over a buffer the caller will reuse. The
// Transport may still be writing the body after RoundTrip has returned
// (http.RoundTripper contract), so the caller waits for Close before it
// touches the buffer again.
type trackedBody struct {
	bytes.Reader
	once sync.Once
	done *sync.WaitGroup
}

func (b *trackedBody) Close() error {
	b.once.Do(b.done.Done)
	return nil
}

// call POSTs body as action target and reads the response into resp (reset
// first). A non-200 answer is returned as *apiError. call returns only when
// the Transport has released body.
func (c *client) call(ctx context.Context, target string, body []byte, resp *bytes.Buffer) error {
	var released sync.WaitGroup
	released.Add(1)
	rb := &trackedBody{done: &released}
	rb.Reset(body)
	defer released.Wait()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, rb)
	if err != nil {
		_ = rb.Close() // our own reader: never fails
		return err
	}
	req.ContentLength = int64(len(body))
	req.Header["Content-Type"] = []string{"application/x-amz-json-1.0"}
	req.Header["X-Amz-Target"] = []string{target}
	r, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	resp.Reset()
	_, err = resp.ReadFrom(r.Body)
	_ = r.Body.Close() // read to the end; the read's error is the one that counts
	if err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return decodeAPIError(r, resp.Bytes())
	}
	return nil
}

// decodeAPIError builds an apiError the way the SDKs do: the code from the
// x-amzn-query-error header ("<code>;Sender"), else from __type after '#'.
func decodeAPIError(r *http.Response, body []byte) error {
	e := &apiError{Status: r.StatusCode}
	var shape struct {
		Type     string `json:"__type"`
		Message  string `json:"message"`
		Message2 string `json:"Message"`
	}
	_ = json.Unmarshal(body, &shape) // a non-JSON error body leaves the fields empty
	e.Message = shape.Message
	if e.Message == "" {
		e.Message = shape.Message2
	}
	if h := r.Header.Get("x-amzn-query-error"); h != "" {
		e.Code, _, _ = strings.Cut(h, ";")
	} else if shape.Type != "" {
		e.Code = shape.Type[strings.LastIndexByte(shape.Type, '#')+1:]
	} else {
		e.Code = fmt.Sprintf("HTTP%d", r.StatusCode)
	}
	return e
}

// createQueue creates the queue (idempotent in SQS) and returns its URL. If a
// queue of that name exists with other attributes, its URL is looked up and
// used as it is.
func (c *client) createQueue(ctx context.Context, name string, fifo bool) (string, error) {
	req := struct {
		QueueName  string
		Attributes map[string]string `json:",omitempty"`
	}{QueueName: name}
	if fifo {
		req.Attributes = map[string]string{"FifoQueue": "true"}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	err = c.call(ctx, "AmazonSQS.CreateQueue", body, &buf)
	var ae *apiError
	if errors.As(err, &ae) && (ae.Code == "QueueAlreadyExists" || ae.Code == "QueueNameExists") {
		body, _ = json.Marshal(struct{ QueueName string }{name})
		err = c.call(ctx, "AmazonSQS.GetQueueUrl", body, &buf)
	}
	if err != nil {
		return "", fmt.Errorf("bench: create queue %s: %w", name, err)
	}
	var out struct{ QueueUrl string }
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.QueueUrl == "" {
		return "", fmt.Errorf("bench: create queue %s: no QueueUrl in %q", name, truncate(buf.Bytes()))
	}
	return out.QueueUrl, nil
}

// appendJSONString appends s as a JSON string literal: quote, backslash and
// control characters escaped, everything else (valid UTF-8 or not) copied.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
