// Package scenario runs whole-system scenarios against the engine on the
// real disk store and reports figures. They assert what must hold (nothing
// lost, all poison quarantined) and report speeds; they never fail on
// timing.
package scenario

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// TestPoisonScenario: a stream of messages, 1% of them poison (they fail
// every time), consumed by 4 workers. The same stream runs once without
// poison and once with it; the report compares healthy-message throughput
// and says how long the poison took to reach the dead-letter queue.
//
// SLUICE_SCENARIO_MESSAGES sets the stream length (default 100,000; CI uses
// the default, which takes tens of seconds on two cores).
func TestPoisonScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("scenario: writes and consumes a 100,000-message stream twice")
	}
	n := 100_000
	if v := os.Getenv("SLUICE_SCENARIO_MESSAGES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	clean := runStream(t, n, 0)
	poisoned := runStream(t, n, 100) // every 100th message is poison: 1%
	cost := 100 * (1 - poisoned.healthyRate/clean.healthyRate)
	t.Logf("without poison: %d healthy messages in %v = %.0f msg/s", clean.healthy, clean.elapsed.Round(time.Millisecond), clean.healthyRate)
	t.Logf("with 1%% poison: %d healthy messages in %v = %.0f msg/s; %d poison messages all dead-lettered %v after the first send (last one %v after its own send)",
		poisoned.healthy, poisoned.elapsed.Round(time.Millisecond), poisoned.healthyRate, poisoned.poison,
		poisoned.poisonDone.Round(time.Millisecond), poisoned.lastPoisonLatency.Round(time.Millisecond))
	t.Logf("poison costs %.1f%% of healthy throughput (target: under 5%%)", cost)
}

type streamResult struct {
	healthy, poison   int
	elapsed           time.Duration // until the last healthy message was deleted
	healthyRate       float64
	poisonDone        time.Duration // until the last poison message was in the DLQ
	lastPoisonLatency time.Duration
}

// runStream sends n messages (every poisonEvery-th one poison, 0 = none)
// from 4 producers in batches of 10 while 4 consumers receive, process and delete; poison
// fails (a transient-looking error, so it uses its retries), backs off under
// the queue's retry policy and is dead-lettered after 3 receives.
func runStream(t *testing.T, n, poisonEvery int) streamResult {
	t.Helper()
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := engine.Open(engine.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, _, err := e.CreateQueue("dlq", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultQueueConfig()
	cfg.Visibility = 30 * time.Second
	cfg.DeadLetter = &engine.DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 3}
	cfg.Retry = &engine.RetryPolicy{Strategy: engine.RetryFullJitter, Base: 50 * time.Millisecond, Cap: time.Second}
	if _, _, err := e.CreateQueue("work", cfg, nil); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'x'
	}
	var res streamResult
	for i := 0; i < n; i++ {
		if poisonEvery > 0 && i%poisonEvery == poisonEvery-1 {
			res.poison++
		}
	}
	res.healthy = n - res.poison

	start := time.Now()
	var healthyDone atomic.Int64
	var lastHealthy atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	// 4 producers, batches of 10, as applications would send; concurrent
	// producers share fsyncs.
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p * 10; i < n; i += 40 {
				batch := make([]engine.Message, 0, 10)
				for j := i; j < i+10 && j < n; j++ {
					kind := "ok"
					if poisonEvery > 0 && j%poisonEvery == poisonEvery-1 {
						kind = "poison"
					}
					batch = append(batch, engine.Message{Body: payload, Attributes: []engine.Attribute{{Name: "kind", DataType: "String", StringValue: kind}}})
				}
				if _, err := e.Send("work", batch); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for healthyDone.Load() < int64(res.healthy) && ctx.Err() == nil {
				wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				d, err := e.Receive(wctx, "work", engine.ReceiveRequest{Max: 10, Wait: time.Second, WaitSet: true})
				wcancel()
				if err != nil && ctx.Err() == nil && wctx.Err() == nil {
					t.Error(err)
					return
				}
				var ok []string
				for _, m := range d {
					if m.Attributes[0].StringValue == "poison" {
						if _, err := e.ReportFailure("work", m.ReceiptHandle, engine.Failure{ErrorClass: "DecodeError", Message: "cannot parse payload"}); err != nil {
							t.Error(err)
						}
						continue
					}
					ok = append(ok, m.ReceiptHandle)
				}
				if len(ok) > 0 {
					if _, err := e.Delete("work", ok); err != nil {
						t.Error(err)
						return
					}
					if healthyDone.Add(int64(len(ok))) >= int64(res.healthy) {
						lastHealthy.CompareAndSwap(0, int64(time.Since(start)))
					}
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Duration(lastHealthy.Load())
	if got := healthyDone.Load(); got < int64(res.healthy) {
		t.Fatalf("only %d of %d healthy messages processed", got, res.healthy)
	}
	res.healthyRate = float64(res.healthy) / res.elapsed.Seconds()
	// Poison keeps cycling through its retries; wait until it has all been
	// quarantined. Consumers must keep polling for the dead-letter move,
	// which happens on receive (SQS semantics).
	for res.poison > 0 {
		info, _ := e.GetQueue("dlq")
		if info.Visible == res.poison {
			res.poisonDone = time.Since(start)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("poison not quarantined: %d of %d in the DLQ", info.Visible, res.poison)
		}
		d, _ := e.Receive(ctx, "work", engine.ReceiveRequest{Max: 10, Wait: 100 * time.Millisecond, WaitSet: true})
		for _, m := range d {
			e.ReportFailure("work", m.ReceiptHandle, engine.Failure{ErrorClass: "DecodeError"})
		}
	}
	if res.poison > 0 {
		page, _ := e.Browse("dlq", engine.Filter{}, 0, 1000)
		for _, v := range page.Messages {
			if v.DeadLetter == nil || v.LastFailure == nil || v.LastFailure.ErrorClass != "DecodeError" || v.ReceiveCount != 3 {
				t.Fatalf("dead letter without its context: %+v", v)
			}
			if lat := v.DeadLetter.DeadLetteredAt.Sub(v.SentAt); lat > res.lastPoisonLatency {
				res.lastPoisonLatency = lat
			}
		}
		if info, _ := e.GetQueue("work"); info.Visible+info.InFlight+info.Delayed != 0 {
			t.Fatalf("work queue not empty: %+v", info)
		}
	}
	return res
}
