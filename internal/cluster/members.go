package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/auth/httpauth"
	"github.com/sluicemq/sluice/internal/cluster/raftstore"
	"github.com/sluicemq/sluice/internal/server"
)

// Membership admin endpoints on every node's public HTTP listener, behind
// the same guards as GET /sluice/v1/cluster:
//
//	POST   /sluice/v1/cluster/members        {"id": 4, "raft": "host:port"}
//	DELETE /sluice/v1/cluster/members/{id}
//
// The leader applies the change (raftstore's AddMember/RemoveMember) and
// answers once it has applied it, with the new membership
// ({"members": [{"id":…,"raft":…,"membership":"voter"|"learner"}, …]}).
// An added node is a learner: it receives the log but neither votes nor
// counts in the commit quorum until the leader promotes it to voter, on
// its own, once its log has caught up and a voter is needed (fewer than
// replication_factor, or one silent for replace_after; GET
// /sluice/v1/cluster shows when; `sluice cluster add --wait` waits for it,
// or for it to catch up as a standby). A follower checks the client's
// credentials and forwards the request to the leader's internal HTTP
// listener (memberInternalRoutes), over the node handshake and, with
// [cluster] encrypt, in TLS, without the client's Authorization and
// Cookie headers; a leader of a build before 2026-12-05 (its
// advertisement without Members) gets it, as it is, on its public
// listener instead (Public), where it checks the credentials itself. A
// request that was already forwarded once is not forwarded again. With
// several shards the change is made on every shard (members_shards.go).
//
// Errors ({"error": {"code", "message"}}):
//
//	400 InvalidRequest      a body that is not {"id", "raft"} or an id that is not a number
//	400 InvalidAddress      raft is not host:port with a fixed port, or a member uses it
//	404 MemberNotFound      no member has that id (remove)
//	409 MemberExists        the id is a member already, learner or voter (add)
//	409 IDRemoved           the id belonged to a removed member; ids are never reused
//	409 LastVoter           removing it would leave no voting member
//	409 ChangeInProgress    another membership change (a learner's promotion too) is being applied; retry
//	503 ServiceUnavailable  no leader, or leadership moved meanwhile; retry
//	504 Timeout             not applied within MembershipTimeout; read GET /sluice/v1/cluster

// MembershipTimeout bounds how long a membership request waits for the
// change to apply.
const MembershipTimeout = 30 * time.Second

// MaxMemberRequestSize bounds the body of POST /sluice/v1/cluster/members.
const MaxMemberRequestSize = 4 << 10

// forwardedHeader marks a membership request a follower forwarded.
const forwardedHeader = "X-Sluice-Forwarded"

// MemberRequest is the body of POST /sluice/v1/cluster/members.
type MemberRequest struct {
	ID   uint64 `json:"id"`
	Raft string `json:"raft"`
}

// MembersResponse answers a membership change: the membership after it.
type MembersResponse struct {
	Members []raftstore.Member `json:"members"`
}

// memberRoutes registers the membership endpoints on mux.
func (n *Node) memberRoutes(mux *http.ServeMux, ha httpauth.Options) {
	proxy := n.memberProxy()
	guard := func(change memberChange) http.Handler {
		h := n.onLeader(proxy, 0, n.applyChange(0, change))
		if n.shards.Len() > 1 {
			h = n.shardedChange(proxy, change) // members_shards.go
		}
		return server.BrowserGuard(httpauth.Middleware(h, ha), n.opts.AllowedHosts)
	}
	mux.Handle("POST "+publicMembersPath, guard(addChange))
	mux.Handle("DELETE "+publicMembersPath+"/{id}", guard(removeChange))
}

// memberProxy forwards a membership request to the leader whose
// Advertisement its context holds (targetKey): to its internal listener,
// without the client's credentials, or to the public one of a leader of
// an older build.
func (n *Node) memberProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			ad, _ := r.In.Context().Value(targetKey{}).(Advertisement)
			if ad.Members {
				r.Out.URL.Scheme, r.Out.URL.Host = "http", ad.SQS
				r.Out.URL.Path, r.Out.URL.RawPath = internalMemberPath(r.In.URL.Path), ""
				r.Out.Header.Del("Authorization") // checked here
				r.Out.Header.Del("Cookie")
			} else {
				r.Out.URL.Scheme = n.publicScheme()
				r.Out.URL.Host = ad.Public
				r.Out.Host = r.In.Host // the leader's guards check the client's Host
			}
			r.Out.Header.Set(forwardedHeader, "1")
		},
		Transport: n.memberTransport(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			n.log.Debug("forwarding a membership request to the leader failed", "err", err)
			unavailable(w, r, "the leader could not be reached; retry")
		},
	}
}

// internalMembersPath is where a leader's internal HTTP listener takes the
// membership changes its followers forward: POST to add, DELETE
// internalMembersPath/{id} to remove.
const internalMembersPath = "/sluice/internal/v1/cluster/members"

// publicMembersPath is the public path of the membership changes.
const publicMembersPath = "/sluice/v1/cluster/members"

// internalMemberPath maps a public membership path to the internal one.
func internalMemberPath(public string) string {
	return internalMembersPath + strings.TrimPrefix(public, publicMembersPath)
}

// memberTransport sends a forwarded membership request by its path: to a
// leader's internal listener (node handshake) or, for a leader of an
// older build, to its public one.
func (n *Node) memberTransport() http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasPrefix(r.URL.Path, internalPrefix) {
			return n.transport.RoundTrip(r)
		}
		return n.publicTransport.RoundTrip(r)
	})
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// leadsShard reports whether this node's member of shard k leads it now.
func (n *Node) leadsShard(k int) bool {
	r := n.shards.Shard(k)
	if r == nil {
		return false // a shard this node does not hold (ADR 0016)
	}
	st := r.Status()
	return st.Leader == st.ID && st.Role == "leader"
}

// memberInternalRoutes registers on mux, the internal handler of shard
// k's leader's server, the membership changes other nodes forward: run
// on this node's member of shard k while it leads it, else 503 (the
// forwarding node's client retries). They carry no client credentials:
// the node that forwarded one checked them (its public listener's
// guards), and the internal listener admits only nodes that hold the
// cluster secret, which could write into the Raft log directly anyway.
func (n *Node) memberInternalRoutes(mux *http.ServeMux, k int) {
	run := func(change memberChange) http.HandlerFunc {
		apply := n.applyChange(k, change)
		return func(w http.ResponseWriter, r *http.Request) {
			if !n.leadsShard(k) {
				unavailable(w, r, "this node no longer leads; retry")
				return
			}
			apply(w, r)
		}
	}
	mux.Handle("POST "+internalMembersPath, run(addChange))
	mux.Handle("DELETE "+internalMembersPath+"/{id}", run(removeChange))
	mux.Handle("POST "+retirePath, n.serveRetire(k))
	mux.Handle("POST "+placeAddPath, run(placeAddChange))
	mux.Handle("GET "+shardViewPath, n.serveShardViewInternal(k))
}

// memberChange reads a membership request and returns the change it asks
// for, to run on a shard's leader; for a request it cannot read it
// answers 400 itself and returns nil.
type memberChange func(w http.ResponseWriter, r *http.Request) func(ctx context.Context, rn *raftstore.Node) error

// applyChange runs change on this node's member of shard k (its leader)
// and answers with that shard's membership.
func (n *Node) applyChange(k int, change memberChange) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := change(w, r)
		if c == nil {
			return // answered
		}
		ctx, cancel := context.WithTimeout(r.Context(), MembershipTimeout)
		defer cancel()
		rn := n.shards.Shard(k)
		if rn == nil {
			memberError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "this node does not hold shard "+strconv.Itoa(k)+"; retry")
			return
		}
		n.membershipDone(w, r, rn, c(ctx, rn))
	}
}

// onLeader runs h when this node leads shard k, and otherwise forwards
// the request to that shard's leader (once), with proxy.
func (n *Node) onLeader(proxy http.Handler, k int, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.leadsShard(k) {
			h(w, r)
			return
		}
		if r.Header.Get(forwardedHeader) != "" {
			unavailable(w, r, "this node no longer leads; retry")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), n.hold)
		ad, _, err := n.route(ctx, k)
		cancel()
		if err != nil || (!ad.Members && ad.Public == "") {
			unavailable(w, r, "no cluster leader is serving yet; retry")
			return
		}
		n.proxyFullDuplex(proxy, w, r.WithContext(context.WithValue(r.Context(), targetKey{}, ad)))
	})
}

// addChange reads POST /sluice/v1/cluster/members.
func addChange(w http.ResponseWriter, r *http.Request) func(ctx context.Context, rn *raftstore.Node) error {
	req, err := decodeMemberRequest(r.Body)
	if err != nil {
		memberError(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return nil
	}
	return func(ctx context.Context, rn *raftstore.Node) error { return rn.AddMember(ctx, req.ID, req.Raft) }
}

// placeAddChange reads a placement controller's add (placeAddPath): a
// MemberRequest, run with AddMemberAgain.
func placeAddChange(w http.ResponseWriter, r *http.Request) func(ctx context.Context, rn *raftstore.Node) error {
	req, err := decodeMemberRequest(r.Body)
	if err != nil {
		memberError(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return nil
	}
	return func(ctx context.Context, rn *raftstore.Node) error { return rn.AddMemberAgain(ctx, req.ID, req.Raft) }
}

// decodeMemberRequest reads the body of POST /sluice/v1/cluster/members:
// one JSON object {"id", "raft"} within MaxMemberRequestSize, no other
// fields, id 1 or more. raft is checked by raftstore.AddMember.
func decodeMemberRequest(body io.Reader) (MemberRequest, error) {
	var req MemberRequest
	dec := json.NewDecoder(io.LimitReader(body, MaxMemberRequestSize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return MemberRequest{}, fmt.Errorf("the body must be {\"id\": <node id>, \"raft\": \"host:port\"}: %w", err)
	}
	if dec.More() {
		return MemberRequest{}, errors.New("the body must be one JSON object")
	}
	if req.ID == 0 {
		return MemberRequest{}, errors.New("id: node ids are 1 or more")
	}
	return req, nil
}

// removeChange reads DELETE /sluice/v1/cluster/members/{id}.
func removeChange(w http.ResponseWriter, r *http.Request) func(ctx context.Context, rn *raftstore.Node) error {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		memberError(w, http.StatusBadRequest, "InvalidRequest", "the node id must be a number of 1 or more")
		return nil
	}
	return func(ctx context.Context, rn *raftstore.Node) error { return rn.RemoveMember(ctx, id) }
}

// membershipDone answers a change: the new membership of rn's group, or
// the change's error.
func (n *Node) membershipDone(w http.ResponseWriter, r *http.Request, rn *raftstore.Node, err error) {
	var remote *remoteMemberError
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(MembersResponse{Members: rn.Members()}) // a client gone cannot be told
	case errors.Is(err, raftstore.ErrBadAddress):
		memberError(w, http.StatusBadRequest, "InvalidAddress", err.Error())
	case errors.Is(err, raftstore.ErrUnknownMember):
		memberError(w, http.StatusNotFound, "MemberNotFound", err.Error())
	case errors.Is(err, raftstore.ErrMemberExists):
		memberError(w, http.StatusConflict, "MemberExists", err.Error())
	case errors.Is(err, raftstore.ErrIDRemoved):
		memberError(w, http.StatusConflict, "IDRemoved", err.Error())
	case errors.Is(err, raftstore.ErrLastVoter):
		memberError(w, http.StatusConflict, "LastVoter", err.Error())
	case errors.Is(err, raftstore.ErrChangePending):
		w.Header().Set("Retry-After", "1")
		memberError(w, http.StatusConflict, "ChangeInProgress", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		memberError(w, http.StatusGatewayTimeout, "Timeout", "the change was not applied in time; it may still apply: check sluice cluster status")
	case errors.As(err, &remote) && remote.status != http.StatusServiceUnavailable:
		memberError(w, remote.status, remote.code, err.Error())
	default:
		n.log.Info("membership change failed", "err", err)
		unavailable(w, r, "the change could not be applied ("+err.Error()+"); retry")
	}
}

// memberError answers an admin API error object.
func memberError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}}) // a client gone cannot be told
}

// publicScheme is the scheme of the public listeners: https with [tls].
func (n *Node) publicScheme() string {
	if n.cert != nil {
		return "https"
	}
	return "http"
}

// publicForPeers is this node's public HTTP address as other nodes dial it:
// an unspecified host (0.0.0.0, ::) is replaced by the host of its Raft
// address.
func (n *Node) publicForPeers() string {
	host, port, err := net.SplitHostPort(n.HTTPAddr())
	if err != nil {
		return n.HTTPAddr()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, _, err := net.SplitHostPort(n.opts.Cluster.Self().Raft); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}
