package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The AMQP gauges count a real client's connection, channels and consumer,
// and drop back when it goes; the disk gauges report the watermark.
func TestAMQPAndDiskMetrics(t *testing.T) {
	s, stop := start(t, t.TempDir())
	defer stop()
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch1, _ := conn.Channel()
	if _, err := conn.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err := ch1.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch1.Consume("jobs", "c1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	want := func(lines ...string) {
		t.Helper()
		poll.CheckFor(t, 10*time.Second, func() error {
			m := metricsText(t, s.SQSAddr())
			for _, l := range lines {
				if !strings.Contains(m, "\n"+l+"\n") {
					return fmt.Errorf("metrics lack %q (of %q)", l, lines)
				}
			}
			return nil
		})
	}
	want("sluice_amqp_connections 1", "sluice_amqp_channels 2", "sluice_amqp_consumers 1",
		"sluice_disk_min_free_bytes 2.68435456e+08")
	conn.Close()
	want("sluice_amqp_connections 0", "sluice_amqp_channels 0", "sluice_amqp_consumers 0",
		"sluice_amqp_flow_throttled_publishes_total 0", "sluice_amqp_flow_throttling_queues 0",
		"sluice_amqp_flow_paused_connections 0", "sluice_sqs_send_throttled_total 0")
	if m := metricsText(t, s.SQSAddr()); !strings.Contains(m, "\nsluice_disk_free_bytes ") {
		t.Fatal("no sluice_disk_free_bytes")
	}
}

// SQS requests are counted by action and status, an unknown action under
// "invalid" (so a client cannot grow the label set).
func TestHTTPRequestMetrics(t *testing.T) {
	s, stop := start(t, t.TempDir())
	defer stop()
	c := client(s.SQSAddr())
	ctx := t.Context()
	if _, err := c.ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("missing")}); err == nil {
		t.Fatal("GetQueueUrl of a missing queue succeeded")
	}
	for _, action := range []string{"NoSuchAction", "AnotherMadeUpOne"} {
		req, _ := http.NewRequest("POST", "http://"+s.SQSAddr()+"/", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A streamed export still flushes through the counting writer.
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("exported")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("kept")}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.SQSAddr() + "/sluice/v1/queues/exported/export")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"kept"`) && !strings.Contains(string(body), "a2VwdA") {
		t.Fatalf("export: %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{"/sluice/v1/queues", "/sluice/v1/queues/missing"} {
		resp, err := http.Get("http://" + s.SQSAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	m := metricsText(t, s.SQSAddr())
	for _, want := range []string{
		`sluice_http_requests_total{action="GET /sluice/v1/queues",api="admin",code="200"} 1`,
		`sluice_http_requests_total{action="GET /sluice/v1/queues/{name}",api="admin",code="404"} 1`,
		`sluice_http_requests_total{action="ListQueues",api="sqs",code="200"} 1`,
		`sluice_http_requests_total{action="GetQueueUrl",api="sqs",code="400"} 1`,
		`sluice_http_requests_total{action="invalid",api="sqs",code="400"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, "NoSuchAction") {
		t.Error("an unknown action became a label value")
	}
}

// The overview's DLQ growth column uses the dlq_growth alert's window, so
// the banner (the alert) and the table agree.
func TestOverviewGrowthWindowIsTheAlertWindow(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	o := DefaultOptions()
	o.Store, o.SQSListen, o.AMQPListen = "memory", "127.0.0.1:0", ""
	o.Alerts.DLQGrowthWindow = duration(5 * time.Minute)
	s, err := New(o, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	cfg := engine.DefaultQueueConfig()
	if _, _, err := s.Engine().CreateQueue("dlq", cfg, nil); err != nil {
		t.Fatal(err)
	}
	cfg.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 3}
	if _, _, err := s.Engine().CreateQueue("q", cfg, nil); err != nil {
		t.Fatal(err)
	}
	// Step the clock 10 minutes; the growth window must stop at 5. Each
	// step waits until the alerts evaluator and the dashboard's sampler
	// are parked on the clock, done with the previous step.
	var win float64
	for range 120 {
		poll.Parked(t, clk, 2)
		clk.Advance(5 * time.Second)
		resp, err := http.Get("http://" + s.SQSAddr() + "/sluice/v1/dashboard/overview")
		if err != nil {
			t.Fatal(err)
		}
		var ov struct {
			Queues []struct {
				Name   string `json:"name"`
				Growth *struct {
					WindowSeconds float64 `json:"windowSeconds"`
				} `json:"growth"`
			} `json:"queues"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ov)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range ov.Queues {
			if q.Name == "dlq" && q.Growth != nil {
				win = q.Growth.WindowSeconds
			}
		}
		if win > 300 {
			t.Fatalf("the overview counts growth over %v s; the alert's window is 300 s", win)
		}
	}
	if win < 240 {
		t.Fatalf("growth window %v s after 10 minutes; want about the alert's 300 s", win)
	}
}

// The amqp_flow_* settings reach the AMQP server: with a mark of 50 and a
// consumer that holds its prefetch without acking, a confirming publisher
// is paused (the gauge shows it) and stays within the mark plus its
// window; with amqp_flow_max_wait = -1s the same load is not paused.
func TestAMQPFlowControlSettings(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			s := startWith(t, func(o *Options) {
				o.AMQPFlowMinBacklog, o.AMQPFlowCreditFactor, o.AMQPFlowMaxWait = 50, 1, duration(time.Minute)
				if off {
					o.AMQPFlowMaxWait = duration(-time.Second)
				}
			})
			url := "amqp://guest:guest@" + s.AMQPAddr() + "/"
			cc, err := amqp091.Dial(url)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			cch, _ := cc.Channel()
			if _, err := cch.QueueDeclare("flow", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := cch.Qos(5, 0, false); err != nil {
				t.Fatal(err)
			}
			if _, err := cch.Consume("flow", "stalled", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			pc, err := amqp091.Dial(url)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			pch, _ := pc.Channel()
			if err := pch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			const n, window = 300, 10
			confirms := pch.NotifyPublish(make(chan amqp091.Confirmation, n))
			done := make(chan int, 1)
			go func() {
				confirmed := 0
				for i := 0; i < n; i++ {
					if i-confirmed >= window {
						if _, ok := <-confirms; !ok {
							break
						}
						confirmed++
					}
					if pch.Publish("", "flow", false, false, amqp091.Publishing{Body: []byte("m")}) != nil {
						break
					}
				}
				done <- confirmed
			}()
			if off {
				<-done // every publish went out: nothing paused the publisher
				if m := metricsText(t, s.SQSAddr()); !strings.Contains(m, "\nsluice_amqp_flow_throttled_publishes_total 0\n") {
					t.Fatal("a publisher was throttled with flow control off")
				}
				return
			}
			poll.CheckFor(t, 10*time.Second, poll.True("the publisher to be paused", func() bool {
				return strings.Contains(metricsText(t, s.SQSAddr()), "\nsluice_amqp_flow_paused_connections 1\n")
			}))
			if n, _ := s.Engine().VisibleHint("flow"); n > 50+window {
				t.Fatalf("ready %d while paused, want at most %d", n, 50+window)
			}
			// The consumer leaving releases the publisher, which finishes.
			if err := cch.Cancel("stalled", false); err != nil {
				t.Fatal(err)
			}
			<-done
		})
	}
}
