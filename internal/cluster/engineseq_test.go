package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/server"
)

// TestFreshEngineIsNumbered: a leader whose engine fails while it keeps
// its term (here: a write dropped by Raft while a leadership transfer to a
// stopped voter runs) serves on with a fresh engine, and its answers say
// so: X-Sluice-Engine goes from 1 to 2 while X-Sluice-Term stays. A lease
// the first engine wrote without a sync may be unknown to the second, so
// a checker that took the term alone for an incarnation would see a
// receive count repeat within it.
func TestFreshEngineIsNumbered(t *testing.T) {
	nodes, stop := startThreeWith(t, func(*server.Options) {}, nil, nil, 3)
	leader := awaitLeader(t, nodes)
	li := int(leader.opts.Cluster.NodeID - 1)
	fi := (li + 1) % 3
	// call posts one SQS JSON request to the leader and returns the
	// answer's term, engine number and status.
	call := func(target, body string) (term, engine string, status int, err error) {
		req, err := http.NewRequest(http.MethodPost, "http://"+leader.HTTPAddr()+"/", strings.NewReader(body))
		if err != nil {
			return "", "", 0, err
		}
		req.Header.Set("X-Amz-Target", "AmazonSQS."+target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", "", 0, err
		}
		_ = resp.Body.Close() // the headers and the status matter
		return resp.Header.Get(HeaderTerm), resp.Header.Get(HeaderEngine), resp.StatusCode, nil
	}
	if _, _, status, err := call("CreateQueue", `{"QueueName":"fresh-engine"}`); err != nil || status != http.StatusOK {
		t.Fatalf("create: %v, status %d", err, status)
	}
	send := func() (string, string, int, error) {
		return call("SendMessage", `{"QueueUrl":"http://`+leader.HTTPAddr()+`/000000000000/fresh-engine","MessageBody":"x"}`)
	}
	term, engine, status, err := send()
	if err != nil || status != http.StatusOK || engine != "1" {
		t.Fatalf("first answer: %v, status %d, %s %q; want 200 and 1", err, status, HeaderEngine, engine)
	}
	if err := stop(fi); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() { _ = leader.raft.TransferLeadershipTo(ctx, uint64(fi+1)) }() // never completes: its target is stopped
	poll.CheckFor(t, 30*time.Second, func() error {
		tm, e, status, err := send()
		switch {
		case err != nil:
			return err
		case tm != term:
			t.Skipf("the leadership moved (term %s to %s) before a fresh engine served", term, tm)
		case e != "2" || status != http.StatusOK:
			return fmt.Errorf("answered in term %s by engine %q with %d, want engine 2 with 200", tm, e, status)
		}
		return nil
	})
}
