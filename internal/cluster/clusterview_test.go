package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

func getReport(n *Node) (Report, error) {
	resp, err := http.Get("http://" + n.HTTPAddr() + "/sluice/v1/cluster")
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	var rep Report
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("status %d", resp.StatusCode)
	}
	return rep, json.NewDecoder(resp.Body).Decode(&rep)
}

// TestClusterView: GET /sluice/v1/cluster on any node carries the leader's
// view of every member (the dashboard's cluster page reads it): the
// leader, the term, each member's role, commit and applied index as it
// reported them, and how far its log is behind the leader's. The
// node-to-node routes behind it answer only on the leader's internal
// listener, and take reports from members only.
func TestClusterView(t *testing.T) {
	nodes := threeNodes(t, func(*server.Options) {})
	var leader *Node
	for _, n := range nodes {
		if st := n.raft.Status(); st.Leader == st.ID {
			leader = n
		}
	}
	lst := leader.raft.Status()
	for _, n := range nodes {
		var rep Report
		poll.CheckFor(t, 20*time.Second, func() error {
			var err error
			if rep, err = getReport(n); err != nil {
				return err
			}
			v := rep.View
			if v == nil || len(v.Members) != 3 {
				return fmt.Errorf("node %d: members %+v", n.opts.Cluster.NodeID, v)
			}
			for _, m := range v.Members {
				if m.Role == "" || m.ReportedMsAgo == nil {
					return fmt.Errorf("node %d: member %d has not reported yet: %+v", n.opts.Cluster.NodeID, m.ID, m)
				}
			}
			return nil
		})
		for _, p := range rep.Peers {
			if p.Membership != "voter" {
				t.Errorf("node %d: peer %+v, want a voter (boot member)", n.opts.Cluster.NodeID, p)
			}
		}
		v := rep.View
		if v.Leader != lst.ID || v.Term != lst.Term || v.LastIndex == 0 {
			t.Fatalf("node %d: view of leader %d term %d last %d; want leader %d term %d", n.opts.Cluster.NodeID, v.Leader, v.Term, v.LastIndex, lst.ID, lst.Term)
		}
		for i, m := range v.Members {
			wantRole := "follower"
			if m.ID == lst.ID {
				wantRole = "leader"
			}
			if m.ID != uint64(i+1) || m.Raft != n.opts.Cluster.Peers[i].Raft || m.Membership != "voter" || m.Role != wantRole || m.Term != lst.Term ||
				m.Commit == 0 || m.Applied == 0 || m.Match == 0 || m.Lag != v.LastIndex-m.Match {
				t.Errorf("node %d's view, member %d: %+v", n.opts.Cluster.NodeID, i+1, m)
			}
		}
		// The node-to-node routes are not on the public listeners: no
		// membership change without [http_auth] through them either.
		for _, req := range []struct{ method, path string }{{"GET", internalMembers}, {"POST", internalStatus},
			{"POST", internalMembersPath}, {"DELETE", internalMembersPath + "/2"}} {
			r, _ := http.NewRequest(req.method, "http://"+n.HTTPAddr()+req.path, strings.NewReader(`{"id":2,"role":"leader"}`))
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close() // only the status matters
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s on node %d's public listener: %d, want 404", req.method, req.path, n.opts.Cluster.NodeID, resp.StatusCode)
			}
		}
	}
	ad, _, _ := leader.target(0)
	// The internal listener takes only nodes: post through a node's own
	// transport, which runs the node handshake.
	client := &http.Client{Transport: leader.transport}
	for body, want := range map[string]int{
		`{"id":9,"role":"leader"}`:                  http.StatusBadRequest, // not a member
		fmt.Sprintf(`{"id":%d,"role":"x"}`, lst.ID): http.StatusBadRequest, // the leader itself
		`{"id":`: http.StatusBadRequest,
		strings.Repeat(" ", maxStatusBody) + `{"id":2}`: http.StatusBadRequest, // too long
	} {
		resp, err := client.Post("http://"+ad.SQS+internalStatus, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close() // only the status matters
		if resp.StatusCode != want {
			t.Errorf("report %.40q: %d, want %d", body, resp.StatusCode, want)
		}
	}
}

// TestReplicationFactorMismatchShown: a member configured with another
// replication_factor than the leader's is shown in the leader's view with
// its own value (FactorMismatch), whichever node leads: the leader's
// setting applies only while it leads, so the voters would change with
// the leader.
func TestReplicationFactorMismatchShown(t *testing.T) {
	nodes := threeNodes(t, func(o *server.Options) {
		if o.Cluster.NodeID == 3 {
			o.Cluster.ReplicationFactor = 5
		}
	})
	for _, n := range nodes {
		poll.CheckFor(t, 20*time.Second, func() error {
			rep, err := getReport(n)
			if err != nil {
				return err
			}
			v := rep.View
			if v == nil || len(v.Members) != 3 {
				return fmt.Errorf("node %d: members %+v", n.opts.Cluster.NodeID, v)
			}
			var want []uint64 // the members configured otherwise than the leader
			for _, m := range nodes {
				if m.opts.Cluster.Factor() != v.ReplicationFactor {
					want = append(want, m.opts.Cluster.NodeID)
				}
			}
			var got []uint64
			for _, m := range v.FactorMismatch() {
				got = append(got, m.ID)
				if m.ReplicationFactor != nodes[m.ID-1].opts.Cluster.Factor() {
					return fmt.Errorf("node %d's view: member %d reports factor %d, configured %d", n.opts.Cluster.NodeID, m.ID, m.ReplicationFactor, nodes[m.ID-1].opts.Cluster.Factor())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || rep.Node.ReplicationFactor != n.opts.Cluster.Factor() {
				return fmt.Errorf("node %d (own factor %d reported %d): view factor %d, members configured otherwise %v, want %v",
					n.opts.Cluster.NodeID, n.opts.Cluster.Factor(), rep.Node.ReplicationFactor, v.ReplicationFactor, got, want)
			}
			return nil
		})
	}
}
