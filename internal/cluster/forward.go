package cluster

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
)

// forward is one HTTP request being forwarded to the internal listener of
// leader, shard's leader.
type forward struct {
	shard  int
	leader uint64
	cancel context.CancelCauseFunc
	// answered: the leader's response headers are in (answeredForward),
	// so the answer is being copied to the client and is not cut.
	answered atomic.Bool
}

// forwardKey is the context key of a request's *forward.
type forwardKey struct{}

// answeredForward is the proxy's ModifyResponse: the leader answered, so
// a leader change from now on leaves the forward alone — its answer is
// already produced (a receive's messages are leased to this client), and
// cutting the copy would only lose it.
func answeredForward(resp *http.Response) error {
	if f, ok := resp.Request.Context().Value(forwardKey{}).(*forward); ok {
		f.answered.Store(true)
	}
	return nil
}

// errLeaderChanged ends a forwarded request whose leader another node has
// replaced: the client gets 503 and retries against the new one.
var errLeaderChanged = errors.New("cluster: the leader changed while the request was forwarded")

// trackForward registers a request forwarded to leader and returns the
// context to forward it under, which cancelForwards ends once another
// node leads, and the function that unregisters it (call it when the
// forward is over). changed is Node.changed as it was before the route
// to leader was chosen: only if it has been closed since (a reroute in
// between) is the route looked up again.
//
// Without it a request forwarded to a leader that then froze (SIGSTOP, a
// silent partition) hung until the client gave up, although the cluster
// had a new leader within an election timeout: the old connection stays
// open, and no answer ever comes on it.
func (n *Node) trackForward(ctx context.Context, shard int, leader uint64, changed <-chan struct{}) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	f := &forward{shard: shard, leader: leader, cancel: cancel}
	ctx = context.WithValue(ctx, forwardKey{}, f)
	n.mu.Lock()
	n.forwards[f] = struct{}{}
	n.mu.Unlock()
	// The leader may have changed between route and registering: a
	// request to a deposed leader never outlives the change.
	select {
	case <-changed:
		if _, now, ok := n.target(shard); ok && now != leader {
			cancel(errLeaderChanged)
		}
	default:
	}
	return ctx, func() {
		n.mu.Lock()
		delete(n.forwards, f)
		n.mu.Unlock()
		cancel(nil)
	}
}

// deposed reports whether the request forwarded under ctx went to a node
// that no longer leads its shard (its connection may fail before the
// change has cancelled it).
func (n *Node) deposed(ctx context.Context) bool {
	f, ok := ctx.Value(forwardKey{}).(*forward)
	if !ok {
		return false
	}
	r := n.shards.Shard(f.shard)
	if r == nil {
		return false // a shard this node does not hold: its leader's changes are not seen here
	}
	st := r.Status()
	return st.Leader != f.leader
}

// cancelForwards ends every request forwarded for shard whose leader is
// not leader and has not answered yet.
// What such a request did on the old leader is unknown to the client,
// which gets 503 and retries: a write the old leader had not committed is
// lost with its leadership, and one it had is kept (a retried send may
// then be stored twice, as after any unanswered request).
func (n *Node) cancelForwards(shard int, leader uint64) {
	n.mu.Lock()
	var doomed []*forward
	for f := range n.forwards {
		if f.shard == shard && f.leader != leader && !f.answered.Load() {
			doomed = append(doomed, f)
		}
	}
	n.mu.Unlock()
	for _, f := range doomed {
		f.cancel(errLeaderChanged)
	}
}

// proxyFullDuplex forwards r through proxy with the response in full
// duplex, and closes r's body before it returns.
//
// Full duplex: the Transport reads the request body once more after
// sending its declared length, possibly after the leader has answered and
// the answer is being copied out. Without full duplex, net/http's server
// closes an unread request body when the response header is written; that
// extra read then fails, the Transport drops the connection to the leader
// mid-answer, and the client gets a cut response while the messages it
// received stay in flight (the follower-path tail of issue #14,
// golang/go#40747; TestForwardedReceivesLoseNoMessage).
//
// The close: in full duplex the server no longer consumes an unread body
// when the answer starts, but only once the handler has returned, after
// it has stopped its background read of the connection. Consuming the
// body to its end then starts that read again, and the server's next read
// of the keep-alive connection panics with "invalid concurrent Body.Read
// call" (golang/go#68560), which closes the client's connection. A
// forward whose leader cannot be reached (it just died, or is being
// replaced) never reads the body, so every request that followed on the
// connection was cut. Closing the body here consumes it while the handler
// runs, and the server's own stop of the background read follows
// (TestUnreachableLeaderKeepsTheConnection). The close also ends a read
// the Transport may still make after RoundTrip has returned: body reads
// and Close are serialised by the server, and a read after Close fails.
func (n *Node) proxyFullDuplex(proxy http.Handler, w http.ResponseWriter, r *http.Request) {
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		n.log.Warn("cannot forward in full duplex", "err", err)
	}
	defer func() { _ = r.Body.Close() }() // the server's body: its error only repeats a read error the proxy saw
	proxy.ServeHTTP(w, r)
}

// advertiserOf is the node whose current advertisement, for any shard,
// names internal HTTP address addr (0: none does now): a connection
// dialled there must reach that node.
func (n *Node) advertiserOf(addr string) uint64 {
	for k := range n.shards.Len() {
		if ad, leader, ok := n.target(k); ok && ad.SQS == addr {
			return leader
		}
	}
	return 0
}
