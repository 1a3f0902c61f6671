package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/dashboard"
	"github.com/sluicemq/sluice/test/crash"
)

// TestShardViews: a server with OtherShards lists, in the admin API's
// queue list and the dashboard's overview, the queues another server
// serves on its ShardViews paths, sorted with its own; a shard it cannot
// read makes the queue list 503 and is named in the overview. A server
// without ShardViews does not serve those paths.
func TestShardViews(t *testing.T) {
	ctx := context.Background()
	other, stopOther := start(t, t.TempDir())
	defer func() { stopOther() }() // the one running at the end
	var down atomic.Bool
	read := func(ctx context.Context, path string) []ShardAnswer {
		out := []ShardAnswer{{Shard: 1}, {Shard: 2}}
		out[0].Body, out[0].Err = get(ctx, "http://"+other.SQSAddr()+path)
		if down.Load() {
			out[1].Err = errors.New("no leader of shard 2 is serving")
		} else {
			out[1].Body = []byte(`{"queues":[]}`)
		}
		return out
	}
	dir := t.TempDir()
	o := DefaultOptions()
	o.DataDir = dir
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = ""
	o.OtherShards = read
	s, stop := run(t, o, nil)
	defer stop()

	// The other server does not serve the paths without ShardViews.
	if _, err := get(ctx, "http://"+other.SQSAddr()+ShardQueuesPath); err == nil {
		t.Fatalf("a server without ShardViews answered %s", ShardQueuesPath)
	}
	// ... so it is started again with them, as a shard's leader is.
	stopOther()
	oo := DefaultOptions()
	oo.Store = "memory"
	oo.SQSListen = "127.0.0.1:0"
	oo.AMQPListen = ""
	oo.ShardViews = true
	oo.Alerts.Interval = duration(50 * time.Millisecond) // the new DLQ's rules evaluated at once
	other, stopOther = run(t, oo, nil)

	for c, names := range map[*sqs.Client][]string{client(s.SQSAddr()): {"alpha", "delta"}, client(other.SQSAddr()): {"gamma", "beta"}} {
		for _, n := range names {
			attrs := map[string]string{}
			if n == "beta" { // gamma is its dead-letter queue, which the dlq_growth rule watches
				attrs["RedrivePolicy"] = `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:gamma","maxReceiveCount":3}`
			}
			if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(n), Attributes: attrs}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{"alpha", "beta", "delta", "gamma"}
	var l api.QueueList
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/queues", &l); err != nil {
		t.Fatal(err)
	}
	var ov dashboard.Overview
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/dashboard/overview", &ov); err != nil {
		t.Fatal(err)
	}
	if got, dash := queueNames(l.Queues, func(q api.Queue) string { return q.Name }), queueNames(ov.Queues, func(q dashboard.QueueMeters) string { return q.Name }); !slices.Equal(got, want) || !slices.Equal(dash, want) || len(ov.Missing) != 0 {
		t.Fatalf("queue list %v, overview %v (missing %v); want %v in both", got, dash, ov.Missing, want)
	}

	// The alerts: this server's and the other's, each evaluated by its
	// own manager (polled: a manager evaluates a new queue on its next
	// round).
	poll.CheckFor(t, 10*time.Second, func() error {
		var theirs, all alerts.List
		if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+other.SQSAddr()+ShardAlertsPath, &theirs); err != nil {
			return err
		}
		if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/alerts", &all); err != nil {
			return err
		}
		if len(theirs.Alerts) == 0 || len(all.Alerts) < len(theirs.Alerts) || len(all.Missing) != 0 {
			return fmt.Errorf("alerts: %d of the other server's, %d listed in all (missing %v)", len(theirs.Alerts), len(all.Alerts), all.Missing)
		}
		for _, a := range theirs.Alerts {
			if !slices.ContainsFunc(all.Alerts, func(b alerts.State) bool { return a.Queue == b.Queue && a.Rule == b.Rule }) {
				return fmt.Errorf("the other server's alert %s/%s is not in the list", a.Queue, a.Rule)
			}
		}
		return nil
	})

	// The definitions export holds the other server's queues too, with
	// their settings.
	var defs Definitions
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/definitions", &defs); err != nil {
		t.Fatal(err)
	}
	if got := queueNames(defs.Queues, func(q QueueDeclaration) string { return q.Name }); !slices.Equal(got, want) {
		t.Fatalf("the definitions export lists %v, want %v", got, want)
	}
	if i := slices.IndexFunc(defs.Queues, func(q QueueDeclaration) bool { return q.Name == "beta" }); !strings.Contains(defs.Queues[i].Attributes["RedrivePolicy"], "gamma") {
		t.Fatalf("beta exported as %+v: want its RedrivePolicy", defs.Queues[i])
	}

	// The advisor's findings cover the other server's queues too.
	var adv dashboard.Advice
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/advisor", &adv); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(adv.Findings, func(f advisor.Finding) bool { return f.Queue == "beta" }) ||
		!slices.ContainsFunc(adv.Findings, func(f advisor.Finding) bool { return f.Queue == "alpha" }) {
		t.Fatalf("the advisor's findings %+v: want some on alpha (here) and beta (the other shard)", adv.Findings)
	}

	// Shard 2 cannot be read: the list says so rather than look complete;
	// the overview shows what it has and names the gap.
	down.Store(true)
	if _, err := get(ctx, "http://"+s.SQSAddr()+"/sluice/v1/queues"); err == nil || !errors.Is(err, errStatus503) {
		t.Fatalf("queue list with a shard unread: %v, want 503", err)
	}
	ov = dashboard.Overview{}
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/dashboard/overview", &ov); err != nil {
		t.Fatal(err)
	}
	if len(ov.Queues) != 4 || len(ov.Missing) != 1 || ov.Missing[0] != "shard 2: no leader of shard 2 is serving" {
		t.Fatalf("overview with a shard unread: %d queues, missing %q", len(ov.Queues), ov.Missing)
	}
	var al alerts.List
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/alerts", &al); err != nil || len(al.Missing) != 1 {
		t.Fatalf("alerts with a shard unread: missing %q, %v", al.Missing, err)
	}
	if _, err := get(ctx, "http://"+s.SQSAddr()+"/sluice/v1/definitions"); !errors.Is(err, errStatus503) {
		t.Fatalf("a definitions export with a shard unread: %v, want 503", err)
	}
	adv = dashboard.Advice{}
	if err := crash.GetJSON(ctx, http.DefaultClient, "http://"+s.SQSAddr()+"/sluice/v1/advisor", &adv); err != nil ||
		!slices.ContainsFunc(adv.Gaps, func(g string) bool { return strings.Contains(g, "shard 2: no leader") }) {
		t.Fatalf("the advisor with a shard unread: gaps %q, %v", adv.Gaps, err)
	}
}

var errStatus503 = errors.New("503")

// get returns the body of a 200 answer to a GET of url.
func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode == http.StatusServiceUnavailable:
		return nil, fmt.Errorf("%w: %s", errStatus503, b)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b, nil
}

func queueNames[T any](qs []T, name func(T) string) []string {
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		out = append(out, name(q))
	}
	return out
}
