package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicemq/sluice/api"
)

// client calls the admin API at base (scheme://host:port, without the
// /sluice/v1 prefix).
type client struct {
	base string
	hc   *http.Client
}

// APIError is an error answer of the admin API.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// send makes a request to path (relative to /sluice/v1/) and returns the
// response when its status is 2xx; otherwise it returns an *APIError (or a
// transport error naming the endpoint). body is sent as is with
// contentType; the caller closes the response body.
func (c *client) send(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u := c.base + api.Prefix + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("bad endpoint %q: %w", c.base, err)
	}
	if contentType == "" && method != http.MethodGet && method != http.MethodHead {
		// The broker refuses a state-changing admin request without it
		// (a browser form cannot send it cross-site).
		contentType = "application/json"
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach Sluice at %s (is it running? set --endpoint or $%s): %w", c.base, EndpointEnv, unwrapURLError(err))
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }() // read-only: its close error cannot matter
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb api.ErrorBody
	if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
		msg := strings.TrimSpace(string(data))
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return nil, &APIError{Status: resp.StatusCode, Code: "HTTP", Message: msg}
	}
	return nil, &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
}

// call sends in (nil for no body) as JSON and decodes the answer into out.
func (c *client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(data), "application/json"
	}
	resp, err := c.send(ctx, method, path, query, body, ct)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read-only: its close error cannot matter
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("unreadable answer from %s: %w", c.base, err)
	}
	return nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// queuePath is the API path of a queue's resource, with the name escaped.
func queuePath(name string, rest ...string) string {
	p := "queues/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func taskPath(id string, rest ...string) string {
	p := "tasks/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func decodeJSON(r io.Reader, out any) error {
	if err := json.NewDecoder(r).Decode(out); err != nil {
		return fmt.Errorf("unreadable answer: %w", err)
	}
	return nil
}
