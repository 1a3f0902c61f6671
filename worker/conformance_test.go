package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/workertest"
)

// The conformance suite on a real Sluice, over SQS and over AMQP 0-9-1.
// The DLQ is Sluice's own: peeked through the admin API and redriven by
// Sluice's redrive task, with its safety stop.

func TestConformanceSQS(t *testing.T) {
	t.Parallel()
	workertest.Run(t, func(t *testing.T, cfg workertest.Config) workertest.Harness {
		b := startBroker(t)
		url, _ := b.queue("orders", 2, cfg.MaxAttempts, nil)
		return &sluiceHarness{b: b, queue: "orders", source: func(t testing.TB) (worker.Source, func()) {
			return workertest.Crashable(b.source(url, worker.SQSSourceOptions{}))
		}, publish: func(t testing.TB, bodies ...string) { b.send(url, bodies...) }}
	})
}

func TestConformanceAMQP(t *testing.T) {
	t.Parallel()
	workertest.Run(t, func(t *testing.T, cfg workertest.Config) workertest.Harness {
		ab := startAMQPBroker(t)
		// The queue and its redrive policy are made over SQS (so that the
		// DLQ is one Sluice's redrive knows); the worker consumes over AMQP.
		ab.queue("orders", 2, cfg.MaxAttempts, nil)
		return &sluiceHarness{b: ab.broker, queue: "orders", source: func(t testing.TB) (worker.Source, func()) {
			conn, err := amqp.Dial("amqp://guest:guest@" + ab.amqpAddr + "/")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			src, err := worker.NewAMQPSource(conn, "orders", worker.AMQPSourceOptions{Prefetch: 10,
				HTTPEndpoint: "http://" + ab.addr, HasDeadLetterExchange: true, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			s, crash := workertest.Crashable(src)
			return s, func() { crash(); conn.Close() }
		}, publish: func(t testing.TB, bodies ...string) { ab.publish("orders", bodies...) }}
	})
}

// sluiceHarness drives one Sluice queue and its DLQ queue+"-dlq".
type sluiceHarness struct {
	b       *broker
	queue   string
	source  func(t testing.TB) (worker.Source, func())
	publish func(t testing.TB, bodies ...string)
}

func (h *sluiceHarness) Publish(t testing.TB, bodies ...string) { h.publish(t, bodies...) }

func (h *sluiceHarness) Source(t testing.TB) (worker.Source, func()) { return h.source(t) }

// adminMessage is the part of the admin API's message JSON the suite
// reads.
type adminMessage struct {
	ID         string `json:"id"`
	Body       string `json:"body"`
	DeadLetter *struct {
		SourceQueue    string     `json:"sourceQueue"`
		Reason         string     `json:"reason"`
		Attempts       int        `json:"attempts"`
		DeadLetteredAt *time.Time `json:"deadLetteredAt"`
	} `json:"deadLetter"`
	LastFailure *struct {
		ErrorClass      string `json:"errorClass"`
		Message         string `json:"message"`
		Trace           string `json:"trace"`
		ConsumerID      string `json:"consumerId"`
		ConsumerVersion string `json:"consumerVersion"`
	} `json:"lastFailure"`
	Redrive *struct {
		OriginalMessageID string `json:"originalMessageId"`
		Count             int    `json:"count"`
	} `json:"redrive"`
}

func (h *sluiceHarness) DeadLetters(t testing.TB) []dlq.Entry {
	t.Helper()
	resp, err := http.Get("http://" + h.b.addr + "/sluice/v1/queues/" + h.queue + "-dlq/messages?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct{ Messages []adminMessage }
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	var out []dlq.Entry
	for _, m := range page.Messages {
		e := dlq.Entry{ID: m.ID, Body: []byte(m.Body)}
		c := dlq.Context{Source: m.ID, OriginID: m.ID}
		if m.Redrive != nil {
			c.OriginID, c.Redrives = m.Redrive.OriginalMessageID, m.Redrive.Count
		}
		if d := m.DeadLetter; d != nil {
			e.Valid = true
			c.Origin, c.Reason, c.Attempts = d.SourceQueue, d.Reason, d.Attempts
			c.Terminal = d.Reason == "terminal"
			if d.DeadLetteredAt != nil {
				c.FailedAt = *d.DeadLetteredAt
			}
		}
		if f := m.LastFailure; f != nil {
			c.ErrorClass, c.ErrorMessage, c.Trace, c.ConsumerID, c.Version = f.ErrorClass, f.Message, f.Trace, f.ConsumerID, f.ConsumerVersion
		} else {
			e.Valid = false
		}
		e.Context = c
		out = append(out, e)
	}
	return out
}

// Redrive runs Sluice's redrive task (POST …/redrive) and waits for it to
// finish; a task the safety stop paused is reported as dlq.ErrSafetyStop.
func (h *sluiceHarness) Redrive(t testing.TB, o dlq.Options) (dlq.Report, error) {
	t.Helper()
	rate := max(1, int(o.Rate))
	thr := o.SafetyThreshold
	if thr == 0 {
		thr = 1
	}
	body := fmt.Sprintf(`{"destination":%q,"rate":%d,"safetyWindowSeconds":%g,"safetyThreshold":%d}`,
		h.queue, rate, o.SafetyWindow.Seconds(), thr)
	resp, err := http.Post("http://"+h.b.addr+"/sluice/v1/queues/"+h.queue+"-dlq/redrive", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var task struct {
		ID, Status string
		Moved      int
		Returned   int
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("redrive: %s: %s", resp.Status, raw)
	}
	if err := json.Unmarshal(raw, &task); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for task.Status == "RUNNING" || task.Status == "CANCELLING" {
		if ctx.Err() != nil {
			t.Fatalf("redrive task %s still %s", task.ID, task.Status)
		}
		time.Sleep(50 * time.Millisecond)
		r, err := http.Get("http://" + h.b.addr + "/sluice/v1/tasks/" + task.ID)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(r.Body).Decode(&task)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	rep := dlq.Report{Redriven: task.Moved, Refailed: task.Returned}
	switch task.Status {
	case "COMPLETED":
		return rep, nil
	case "PAUSED":
		rep.Stopped = true
		return rep, fmt.Errorf("%w: task %s paused", dlq.ErrSafetyStop, task.ID)
	}
	return rep, fmt.Errorf("redrive task %s ended %s", task.ID, task.Status)
}
