package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/sluicemq/sluice/internal/cluster/raftstore"
)

// Membership changes with several shards (ADR 0015 decision 9). Every
// member belongs to every shard (but with [cluster] placement "subset",
// ADR 0016, where add and remove change shard 0 alone and the placement
// controller the others), so `sluice cluster
// add/remove` changes every shard's membership, one shard after the other, each on its own
// leader: the node asked runs the change on the shards it leads and sends
// it to the internal listener of each other shard's leader (to the public
// one, naming the shard (?shard=k), of a leader of an older build). A
// change that fails part way leaves the shards before it changed; sending
// it again finishes it (a shard that already has the node, or no longer
// has it, counts as done). The answer is shard 0's membership, like a
// cluster's without shards.

// shardedChange serves a membership change on a node with several shards:
// a request naming a shard changes that shard on its leader (forwarded
// there once if this node does not lead it); one naming none changes
// every shard.
func (n *Node) shardedChange(proxy http.Handler, change memberChange) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.URL.Query().Get("shard"); s != "" {
			k, err := strconv.Atoi(s)
			if err != nil || k < 0 || k >= n.shards.Len() {
				memberError(w, http.StatusBadRequest, "InvalidRequest", fmt.Sprintf("shard %q: want 0 to %d", s, n.shards.Len()-1))
				return
			}
			// Sent by a node changing every shard: run here, or on the
			// shard's leader (forwarded once).
			n.onLeader(proxy, k, n.applyChange(k, change)).ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxMemberRequestSize+1))
		if err != nil {
			memberError(w, http.StatusBadRequest, "InvalidRequest", "the body could not be read")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := change(w, r)
		if c == nil {
			return // answered
		}
		ctx, cancel := context.WithTimeout(r.Context(), MembershipTimeout)
		defer cancel()
		changed := 0
		var same error // a shard where the change was already made
		count := n.shards.Len()
		if n.opts.Cluster.SubsetPlacement() {
			// With placement "subset" a node is added to shard 0 only,
			// and removed from shard 0 only: the placement controller
			// (controller.go) then gives it its share of the shards, or
			// moves it out of each of its shards once another node has
			// caught up in its place (ADR 0016).
			count = 1
		}
		for k := range count {
			err := n.changeShard(ctx, k, r, body, c)
			switch {
			case err == nil:
				changed++
			case r.Method == http.MethodPost && errors.Is(err, raftstore.ErrMemberExists),
				r.Method == http.MethodDelete && errors.Is(err, raftstore.ErrUnknownMember):
				same = err
			default:
				n.membershipDone(w, r, n.raft, fmt.Errorf("shard %d of %d (%d changed before it; send the request again to finish): %w", k, n.shards.Len(), changed, err))
				return
			}
		}
		if changed == 0 {
			n.membershipDone(w, r, n.raft, same) // no shard changed: the node was (not) a member already
			return
		}
		// The answer is this node's copy of shard 0, which may not have
		// applied a change its leader (another node) committed: catch it
		// up first, so the answer lists the change (a failed catch-up
		// answers the copy as it is; status shows the rest).
		if err := n.raft.ReadBarrier(ctx); err != nil {
			n.log.Info("membership answer: shard 0's copy did not catch up", "err", err)
		}
		n.membershipDone(w, r, n.raft, nil)
	})
}

// changeShard runs c on shard k: here when this node leads it, else on
// its leader, through that leader's internal listener (or, for a leader
// of an older build, its public one with the client's credentials).
func (n *Node) changeShard(ctx context.Context, k int, r *http.Request, body []byte, c func(context.Context, *raftstore.Node) error) error {
	if n.leadsShard(k) {
		return c(ctx, n.shards.Shard(k))
	}
	rctx, cancel := context.WithTimeout(ctx, n.hold)
	ad, _, err := n.route(rctx, k)
	cancel()
	if err != nil || (!ad.Members && ad.Public == "") {
		return fmt.Errorf("no leader of shard %d is serving: %w", k, errNoLeader)
	}
	url, headers := "http://"+ad.SQS+internalMemberPath(r.URL.Path), []string{"Content-Type"}
	if !ad.Members { // its public listener checks the client's credentials and Host
		url = n.publicScheme() + "://" + ad.Public + r.URL.Path + "?shard=" + strconv.Itoa(k)
		headers = append(headers, "Authorization", "Cookie")
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for _, h := range headers {
		if v := r.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	if !ad.Members {
		req.Host = r.Host
	}
	req.Header.Set(forwardedHeader, "1")
	resp, err := (&http.Client{Transport: n.memberTransport()}).Do(req)
	if err != nil {
		return fmt.Errorf("shard %d's leader: %w", k, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	if resp.StatusCode == http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body) // a drained body keeps the connection
		return nil
	}
	return memberAnswer(resp.StatusCode, resp.Body)
}

// memberAnswer is a shard leader's refusal of a membership change, read
// from its answer's status and error body ({"error": {"code",
// "message"}}, memberError).
func memberAnswer(status int, body io.Reader) *remoteMemberError {
	var eb struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(&eb) // an answer without a code is reported by its status
	return &remoteMemberError{status: status, code: eb.Error.Code, msg: eb.Error.Message}
}

// remoteMemberError is a shard leader's refusal of a membership change.
// Its codes map back to raftstore's errors (Unwrap), so the answer is the
// one a single leader gives.
type remoteMemberError struct {
	status    int
	code, msg string
}

func (e *remoteMemberError) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.msg, e.status, e.code)
}

// Unwrap maps the leader's code to raftstore's error, nil for the others.
func (e *remoteMemberError) Unwrap() error {
	switch e.code {
	case "MemberExists":
		return raftstore.ErrMemberExists
	case "MemberNotFound":
		return raftstore.ErrUnknownMember
	case "InvalidAddress":
		return raftstore.ErrBadAddress
	case "IDRemoved":
		return raftstore.ErrIDRemoved
	case "LastVoter":
		return raftstore.ErrLastVoter
	case "ChangeInProgress":
		return raftstore.ErrChangePending
	case "Timeout":
		return context.DeadlineExceeded
	}
	return nil
}
