package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/engine"
)

const grafanaFile = "../../docs/prometheus/sluice-dashboard.json"

// exportedMetricNames runs traffic through a real disk-store broker (a
// dead letter, a processed message, a redrive task) and returns every
// metric name its /metrics exposes, histograms as their _bucket, _sum and
// _count series.
func exportedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	// An alert that fires on the first dead letter, evaluated often, so
	// that sluice_alert_firing has a series.
	o.Alerts.DLQDepthWarn, o.Alerts.Interval = 1, duration(50*time.Millisecond)
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	c := client(s.SQSAddr())
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders-dlq")})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{
		"VisibilityTimeout": "0",
		"RedrivePolicy":     `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":"1"}`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"good", "poison"} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// Receive both; delete the good one; the poison one is dead-lettered
	// by the next receive (maxReceiveCount 1, visibility 0).
	for range 3 {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			if aws.ToString(m.Body) == "good" {
				c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			}
		}
	}
	_ = dlq
	if _, err := s.Engine().StartMoveTask(engine.MoveTaskSpec{Source: "orders-dlq"}); err != nil {
		t.Fatal(err)
	}
	var names map[string]bool
	poll.CheckFor(t, 10*time.Second, func() error {
		if names = scrapeNames(t, "http://"+s.SQSAddr()+"/metrics"); !names["sluice_alert_firing"] {
			return errors.New("the DLQ depth alert never fired")
		}
		return nil
	})
	return names
}

func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" {
				for _, sfx := range []string{"_bucket", "_sum", "_count"} {
					names[f[2]+sfx] = true
				}
			}
		}
	}
	return names
}

// clusterPanel is the title prefix of the dashboard's panels of cluster
// mode, whose metrics a single broker does not export: internal/cluster
// TestGrafanaClusterPanels checks them against a real cluster.
const clusterPanel = "Cluster: "

// Every query of the shipped Grafana dashboard names only metrics the
// broker exports, so a renamed metric cannot leave a panel silently empty.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile(grafanaFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", grafanaFile, err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: title, uid and panels are required", grafanaFile)
	}
	exported := exportedMetricNames(t)
	for _, want := range []string{"sluice_build_info", "sluice_disk_free_bytes", "sluice_disk_min_free_bytes", "sluice_redrive_task_moved_messages", "sluice_redrive_task_to_move_messages"} {
		if !exported[want] {
			t.Errorf("the broker does not export %s", want)
		}
	}
	metric := regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	ids, used := map[int]bool{}, map[string]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metric.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no Sluice metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !exported[n] && !strings.HasPrefix(p.Title, clusterPanel) {
					t.Errorf("panel %q: %s is not exported by the broker (query %q)", p.Title, n, tg.Expr)
				}
			}
		}
	}
	for _, want := range []string{"sluice_queue_is_dlq", "sluice_queue_oldest_message_age_seconds", "sluice_queue_visible_messages"} {
		if !used[want] {
			t.Errorf("no panel shows %s (one of the three operator meters)", want)
		}
	}
}
