package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/test/crash"
)

// minKills is the least number of SIGKILLs per queue type, whatever the
// budget.
const minKills = 20

// TestSIGKILL kills the real broker with SIGKILL at random moments (50 ms
// to 1 s apart) under producers and consumers, standard and FIFO, restarts
// it on the same data directory each time, and judges the whole history
// with the Checker after a drain.
func TestSIGKILL(t *testing.T) {
	b := budget(t, 0.40)
	s := seed(t)
	t.Run("standard", func(t *testing.T) { runKills(t, false, b/2, s) })
	t.Run("fifo", func(t *testing.T) { runKills(t, true, b/2, s+1) })
}

// startBroker starts the real binary on dir and, on the first start,
// creates the queues.
func startBroker(t *testing.T, ctx context.Context, w *workload, bin, dir string, create bool) *incarnation {
	t.Helper()
	srv, err := crash.Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if create {
		if err := w.CreateQueues(ctx, newClient(srv.URL(), 10*time.Second)); err != nil {
			_ = srv.Kill()
			t.Fatalf("%v\n%s", err, crash.Tail(dir))
		}
	}
	inc, err := w.connect(ctx, srv)
	if err != nil {
		_ = srv.Kill()
		t.Fatalf("%v\n%s", err, crash.Tail(dir))
	}
	return inc
}

func stopBroker(t *testing.T, w *workload) {
	if cur := w.cl.Get(); cur != nil {
		if err := cur.srv.Stop(10 * time.Second); err != nil {
			t.Logf("shutdown: %v", err)
		}
	}
}

func runKills(t *testing.T, fifo bool, load time.Duration, s uint64) {
	bin := binary(t)
	rng := rand.New(rand.NewPCG(s, 0xfa17))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), load+5*time.Minute)
	defer cancel()

	w := newWorkload(fifo, fmt.Sprintf("%x", s&0xffffff), 10*time.Second)
	w.cl.Set(startBroker(t, ctx, w, bin, dir, true))
	defer stopBroker(t, w)
	w.Start(ctx, rng)

	began := time.Now()
	kills := 0
	var downtime time.Duration
	for kills < minKills || time.Since(began) < load {
		timer := time.NewTimer(time.Duration(50+rng.IntN(951)) * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		old := w.down()
		if err := old.srv.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		w.crashes++
		w.Ck.Fault()
		kills++
		crash.CloseIdle(old.client)
		down := time.Now()
		w.cl.Set(startBroker(t, ctx, w, bin, dir, false))
		downtime += time.Since(down)
	}
	w.drain(t, ctx)
	w.verdict(t, fmt.Sprintf("%d SIGKILLs in %v, down %v in all", kills, time.Since(began).Round(time.Millisecond), downtime.Round(time.Millisecond)))
}

// TestSIGSTOP freezes the broker with SIGSTOP for 0.5–5 s at a time (often
// longer than the clients' 2.5 s timeout and than the 2 s leases),
// then resumes it with SIGCONT. Clients time out while it is frozen; once
// resumed everything must continue, and nothing may be lost, delivered
// early or out of order.
func TestSIGSTOP(t *testing.T) {
	load := budget(t, 0.10)
	s := seed(t)
	bin := binary(t)
	rng := rand.New(rand.NewPCG(s, 0x5709))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), load+5*time.Minute)
	defer cancel()

	w := newWorkload(s%2 == 0, fmt.Sprintf("%x", s&0xffffff), 2500*time.Millisecond)
	t.Logf("fifo=%v", w.FIFO)
	inc := startBroker(t, ctx, w, bin, dir, true)
	w.cl.Set(inc)
	defer stopBroker(t, w)
	w.Start(ctx, rng)

	began := time.Now()
	pauses := 0
	var frozen time.Duration
	hc := &http.Client{Timeout: time.Second}
	for pauses < 3 || time.Since(began) < load {
		SleepCtx(ctx, time.Duration(200+rng.IntN(1300))*time.Millisecond)
		pause := time.Duration(500+rng.IntN(4500)) * time.Millisecond
		if err := syscall.Kill(inc.srv.PID, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP: %v", err)
		}
		w.Ck.Fault()
		pauses++
		SleepCtx(ctx, pause)
		if err := syscall.Kill(inc.srv.PID, syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT: %v", err)
		}
		frozen += pause
		// It must answer again at once.
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := hc.Get(inc.srv.URL() + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("broker not healthy 10 s after SIGCONT: %v\n%s", err, crash.Tail(dir))
			}
			SleepCtx(ctx, 10*time.Millisecond)
		}
	}
	w.drain(t, ctx)
	w.verdict(t, fmt.Sprintf("%d pauses, frozen %v of %v", pauses, frozen.Round(time.Millisecond), time.Since(began).Round(time.Millisecond)))
	select {
	case <-inc.srv.Exited():
		t.Fatalf("the broker exited\n%s", crash.Tail(dir))
	default:
	}
}
