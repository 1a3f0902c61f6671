package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/internal/server"
)

// TestUnreachableLeaderKeepsTheConnection: a follower that cannot reach
// the leader (it has just died, or is being replaced) answers a request
// with a body 503, and the client's keep-alive connection carries its next
// request too. Before proxyFullDuplex closed the body, net/http's server
// panicked on its next read of the connection ("invalid concurrent
// Body.Read call", golang/go#68560) and cut it, so every request after
// the first failed or needed a new connection: seen in the fault harness's
// node logs while a killed leader restarted.
func TestUnreachableLeaderKeepsTheConnection(t *testing.T) {
	var refuse atomic.Bool
	nodes := threeNodesWith(t, func(*server.Options) {}, func(n *Node) {
		dial := n.transport.DialContext
		n.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, errors.New("the test refuses connections to the leader")
			}
			return dial(ctx, network, addr)
		}
	})
	_, followers := leaderAndFollowers(t, nodes)
	via := followers[0]
	refuse.Store(true)
	via.transport.CloseIdleConnections()

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 5 {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
			http.MethodPost, "http://"+via.HTTPAddr()+"/", strings.NewReader(`{"QueueNamePrefix":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v: the follower cut the connection after answering the one before", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // only the status matters
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d: status %d, want 503 while the leader cannot be reached", i, resp.StatusCode)
		}
		if i > 0 && !reused {
			t.Fatalf("request %d came on a new connection: the follower closed the one before", i)
		}
	}
}
