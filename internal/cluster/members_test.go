package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/internal/brokertest"
	"github.com/sluicemq/sluice/internal/server"
)

// TestMembershipEndpointsRefuse: every refusal of the membership endpoints
// answers its documented status and code, through the leader and through a
// follower (which forwards to the leader), and only with the [http_auth]
// credentials.
func TestMembershipEndpointsRefuse(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	nodes := threeNodes(t, func(o *server.Options) { o.HTTPAuth.Tokens = []string{token} })
	member2 := nodes[1].raft.Members()[1].RaftAddr
	do := func(n *Node, method, path, body string, auth bool) (int, string) {
		t.Helper()
		if auth {
			return memberCall(t, n, method, path, body, token)
		}
		return memberCall(t, n, method, path, body, "")
	}
	for _, n := range nodes {
		for _, tc := range []struct {
			method, path, body string
			auth               bool
			status             int
			code               string
		}{
			{"POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "127.0.0.1:7999"}`, false, http.StatusUnauthorized, "Unauthorized"},
			{"DELETE", "/sluice/v1/cluster/members/2", "", false, http.StatusUnauthorized, "Unauthorized"},
			{"POST", "/sluice/v1/cluster/members", `{"id": 4, "addr": "x"}`, true, http.StatusBadRequest, "InvalidRequest"},
			{"POST", "/sluice/v1/cluster/members", `{"id": 0, "raft": "127.0.0.1:7999"}`, true, http.StatusBadRequest, "InvalidRequest"},
			{"POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "127.0.0.1:0"}`, true, http.StatusBadRequest, "InvalidAddress"},
			{"POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "` + member2 + `"}`, true, http.StatusBadRequest, "InvalidAddress"},
			{"POST", "/sluice/v1/cluster/members", `{"id": 2, "raft": "127.0.0.1:7999"}`, true, http.StatusConflict, "MemberExists"},
			{"POST", "/sluice/v1/cluster/members", strings.Repeat(" ", MaxMemberRequestSize) + `{}`, true, http.StatusBadRequest, "InvalidRequest"},
			{"DELETE", "/sluice/v1/cluster/members/x", "", true, http.StatusBadRequest, "InvalidRequest"},
			{"DELETE", "/sluice/v1/cluster/members/9", "", true, http.StatusNotFound, "MemberNotFound"},
		} {
			if status, code := do(n, tc.method, tc.path, tc.body, tc.auth); status != tc.status || code != tc.code {
				t.Errorf("node %d (%s): %s %s %s: %d %q, want %d %q", n.raft.Status().ID, n.raft.Status().Role,
					tc.method, tc.path, tc.body[:min(len(tc.body), 60)], status, code, tc.status, tc.code)
			}
		}
	}
	for _, n := range nodes {
		if got := len(n.raft.Members()); got != 3 {
			t.Fatalf("node %d: %d members after refused changes", n.raft.Status().ID, got)
		}
	}
}

// noPublicForwards makes n's forwards of membership changes to a leader's
// public listener fail, counting them in dialled: a leader of this build
// takes them on its internal listener.
func noPublicForwards(n *Node, dialled *atomic.Int64) {
	n.publicTransport.DialContext = func(context.Context, string, string) (net.Conn, error) {
		dialled.Add(1)
		return nil, errors.New("test: a membership change was forwarded to a leader's public listener")
	}
}

// TestMembershipForwardedInternally: a membership change asked of a
// follower is checked there (401 without the token) and reaches the leader
// through its internal listener, the one behind the node handshake (and
// TLS with [cluster] encrypt), never through the leader's public one; the
// leader's answers, errors included, come back as they are. A leader
// whose advertisement does not say it takes them there (an older build)
// still gets them on its public listener.
func TestMembershipForwardedInternally(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	var dialled atomic.Int64
	nodes := threeNodesWith(t, func(o *server.Options) { o.HTTPAuth.Tokens = []string{token} },
		func(n *Node) { noPublicForwards(n, &dialled) })
	_, followers := leaderAndFollowers(t, nodes)
	spare := brokertest.ReservePorts(t, 1)[0]
	for _, tc := range []struct {
		via                *Node
		method, path, body string
		token              string
		status             int
		code               string
	}{
		{followers[0], "POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "` + spare + `"}`, "", http.StatusUnauthorized, "Unauthorized"},
		{followers[0], "POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "` + spare + `"}`, token, http.StatusOK, ""},
		{followers[1], "POST", "/sluice/v1/cluster/members", `{"id": 4, "raft": "` + spare + `"}`, token, http.StatusConflict, "MemberExists"},
		{followers[1], "POST", "/sluice/v1/cluster/members", `{"id": 5}`, token, http.StatusBadRequest, "InvalidAddress"},
		{followers[1], "DELETE", "/sluice/v1/cluster/members/4", "", "", http.StatusUnauthorized, "Unauthorized"},
		{followers[1], "DELETE", "/sluice/v1/cluster/members/4", "", token, http.StatusOK, ""},
		{followers[0], "DELETE", "/sluice/v1/cluster/members/4", "", token, http.StatusNotFound, "MemberNotFound"},
	} {
		if status, code := memberCall(t, tc.via, tc.method, tc.path, tc.body, tc.token); status != tc.status || code != tc.code {
			t.Fatalf("%s %s %s through node %d: %d %q, want %d %q", tc.method, tc.path, tc.body, tc.via.opts.Cluster.NodeID, status, code, tc.status, tc.code)
		}
	}
	if n := dialled.Load(); n != 0 {
		t.Fatalf("%d membership changes went to the leader's public listener", n)
	}

	// A leader of an older build: its advertisement has no Members, and
	// the follower goes to its public listener.
	ad, _, ok := followers[0].target(0)
	if !ok || !ad.Members || !ad.EngineWire || ad.Public == "" {
		t.Fatalf("the leader's advertisement: %+v, %v", ad, ok)
	}
	ad.Members = false
	req := httptest.NewRequest(http.MethodDelete, "/sluice/v1/cluster/members/9", nil)
	req = req.WithContext(context.WithValue(req.Context(), targetKey{}, ad))
	rec := httptest.NewRecorder()
	followers[0].memberProxy().ServeHTTP(rec, req)
	if n := dialled.Load(); n != 1 || rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("a leader without Members: %d public dials, answered %d", n, rec.Code)
	}
}

// TestRemoveTheOnlyMemberRefused: a one-member cluster refuses to remove
// its only voter with 409 LastVoter.
func TestRemoveTheOnlyMemberRefused(t *testing.T) {
	n, _ := soloNode(t, io.Discard)
	req, err := http.NewRequest("DELETE", "http://"+n.HTTPAddr()+"/sluice/v1/cluster/members/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), `"LastVoter"`) {
		t.Fatalf("removing the only member: %d %s", resp.StatusCode, b)
	}
}

// FuzzDecodeMemberRequest: any body is either refused or decodes to a
// request with an id of 1 or more; nothing panics.
func FuzzDecodeMemberRequest(f *testing.F) {
	for _, s := range []string{
		`{"id": 4, "raft": "127.0.0.1:7104"}`,
		`{"id": 0, "raft": "x"}`,
		`{"id": -1}`,
		`{"id": 18446744073709551616}`,
		`{"id": 4, "raft": "a", "extra": 1}`,
		`{"id": 4} {"id": 5}`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeMemberRequest(bytes.NewReader(b))
		if err == nil && req.ID == 0 {
			t.Fatalf("accepted %q with id 0", b)
		}
	})
}

// memberCall sends a membership request to node n's public listener, with
// a bearer token when token is not "", and returns the status and the
// error code of the answer ("" without one).
func memberCall(t *testing.T, n *Node, method, path, body, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	b, _ := io.ReadAll(resp.Body)
	var eb struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(b, &eb) // an answer without a code fails the comparison
	return resp.StatusCode, eb.Error.Code
}
