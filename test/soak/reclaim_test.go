//go:build linux

package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// reclamation is what happened to the data directory after the drain.
type reclamation struct {
	steps []reclaimStep
}

type reclaimStep struct {
	what       string
	start, end snapshot
	low        int64
	lowAfter   time.Duration // from the step's start to its lowest size
	took       time.Duration
	note       string
}

// reclaimed reports whether size is back within 10 % of the growth the
// backlog caused.
func reclaimed(size int64, base, full snapshot) bool {
	return size <= base.disk+(full.disk-base.disk)/10
}

// reclaim watches the data directory after the drain: first idle (or
// under the trickle, which quiesce then ends, with the consumers), then
// across a restart, then (if space is still held) while a small churn of
// writes gives the store's compactions something to do.
func (s *soak) reclaim(ctx context.Context, base, full snapshot, quiesce func()) reclamation {
	var r reclamation
	s.setPhase("settle")
	what := "idle after the drain"
	if s.cfg.trickle > 0 {
		what = fmt.Sprintf("trickle of %d/s after the drain", s.cfg.trickle)
	}
	r.steps = append(r.steps, s.settle(ctx, what, s.cfg.settle))
	if s.cfg.trickle > 0 {
		quiesce()
	}

	s.setPhase("restart")
	st := s.snap()
	down := s.stop()
	// Between the processes: what the shutdown itself gave back.
	stopped, stoppedApparent, _ := diskUsage(filepath.Join(s.dir, "data"))
	s.t.Logf("stopped: disk %s (apparent %s) | %s", mib(stopped), mib(stoppedApparent), diskFiles(filepath.Join(s.dir, "data")))
	up := s.start(ctx)
	s.refreshURLs(ctx)
	ready := s.snap()
	s.t.Logf("restarted: disk %s (apparent %s) rss %s | %s", mib(ready.disk), mib(ready.apparent), mib(ready.rss), diskFiles(filepath.Join(s.dir, "data")))
	step := s.settle(ctx, "after a restart", restartSettle)
	step.start = st
	step.note = fmt.Sprintf("SIGTERM to exit %v, disk then %s (apparent %s); start to ready %v, disk then %s (apparent %s)",
		down.Round(time.Millisecond), mib(stopped), mib(stoppedApparent), up.Round(time.Millisecond), mib(ready.disk), mib(ready.apparent))
	r.steps = append(r.steps, step)

	if !reclaimed(step.low, base, full) && ctx.Err() == nil {
		s.setPhase("churn")
		st := s.snap()
		t0 := time.Now()
		n := s.churn(ctx, churnMessages)
		step := s.settle(ctx, "after a churn of writes", restartSettle)
		step.start = st
		step.note = fmt.Sprintf("%d messages sent, received and deleted in %v", n, time.Since(t0).Round(time.Second))
		r.steps = append(r.steps, step)
	}
	return r
}

// settle polls the data directory every sampleEvery until it has not
// reached a new low for stableFor, or limit has passed.
func (s *soak) settle(ctx context.Context, what string, limit time.Duration) reclaimStep {
	st := reclaimStep{what: what, start: s.snap()}
	t0 := time.Now()
	st.low, st.lowAfter = st.start.disk, 0
	lowAt := t0
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for time.Since(lowAt) < stableFor && time.Since(t0) < limit {
		select {
		case <-ctx.Done():
			st.end, st.took = s.snap(), time.Since(t0)
			return st
		case <-tick.C:
		}
		sn := s.snap()
		if sn.disk < st.low-(1<<20) {
			st.low, lowAt = sn.disk, time.Now()
			st.lowAfter = lowAt.Sub(t0)
		}
		s.t.Logf("%7.0fs %-7s disk %10s (apparent %s) rss %s heap %s | %s", time.Since(s.t0).Seconds(), *s.phase.Load(),
			mib(sn.disk), mib(sn.apparent), mib(sn.rss), mib(sn.heap), diskFiles(filepath.Join(s.dir, "data")))
	}
	st.end, st.took = s.snap(), time.Since(t0)
	return st
}

// churn sends n messages through one backlog queue and deletes them again.
func (s *soak) churn(ctx context.Context, n int) int {
	q := s.backlog[0]
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, batch*maxBody)
			for ctx.Err() == nil && left.Add(-batch) > -batch {
				buf = s.sendTo(ctx, q, batch, buf)
			}
		}()
	}
	wg.Wait()
	dctx, cancel := context.WithCancel(ctx)
	var dwg sync.WaitGroup
	for range 8 {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			for dctx.Err() == nil {
				_, _ = s.consume(dctx, q, 1, nil)
			}
		}()
	}
	s.waitDrained(ctx, 10*time.Minute)
	cancel()
	dwg.Wait()
	return n
}

type reportInput struct {
	base, full, steadyEnd, afterDrain   snapshot
	fullDepth                           int64
	fillTook, drainTook, parkedAt       time.Duration
	backlogAcked                        uint64
	idleCPU, parkedCPU, parkedClientCPU float64
	parkedEmpty                         uint64
	drained                             bool
	rec                                 reclamation
}

func (s *soak) report(in reportInput) {
	t := s.t
	t.Logf("===== soak report (load now %s)", loadAvg())

	s.sampleMu.Lock()
	samples := append([]sample(nil), s.samples...)
	s.sampleMu.Unlock()
	t.Logf("throughput over time (every 6th sample; all are logged above):")
	t.Logf("| t (s) | phase | SQS sent/s | SQS recv/s | SQS deleted/s | AMQP pub/s | AMQP dlv/s | queued | server RSS | server CPU | disk (apparent) | load |")
	for i, sm := range samples {
		last := i == len(samples)-1
		if i%6 != 0 && !last && (i == 0 || samples[i-1].phase == sm.phase) {
			continue
		}
		t.Logf("| %.0f | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %s | %.0f%% | %s (%s) | %s |",
			sm.at.Seconds(), sm.phase, sm.send, sm.recv, sm.del, sm.pub, sm.dlv, sm.visible+sm.inflight, mib(sm.rss), sm.cpu, mib(sm.disk), mib(sm.apparent), sm.load)
	}
	var peak sample
	for _, sm := range samples {
		if sm.rss > peak.rss {
			peak = sm
		}
	}

	perM := func(a, b snapshot, n int64) float64 {
		if n <= 0 {
			return 0
		}
		return float64(a.rss-b.rss) / (1 << 20) / (float64(n) / 1e6)
	}
	t.Logf("fill: %d messages in %v, %.0f msg/s", in.backlogAcked, in.fillTook.Round(time.Second), float64(in.backlogAcked)/in.fillTook.Seconds())
	t.Logf("full backlog: %d queued; rss %s (baseline %s) → %.0f MiB per million queued; disk %s allocated (baseline %s) → %.0f bytes per message, %s apparent (baseline %s) → %.0f bytes per message",
		in.fullDepth, mib(in.full.rss), mib(in.base.rss), perM(in.full, in.base, in.fullDepth),
		mib(in.full.disk), mib(in.base.disk), float64(in.full.disk)/float64(max(in.fullDepth, 1)),
		mib(in.full.apparent), mib(in.base.apparent), float64(in.full.apparent)/float64(max(in.fullDepth, 1)))
	t.Logf("full backlog: Go heap %s allocated, next GC goal %s → live heap ≈ %s, %.0f MiB per million above the baseline's (bodies within the body budget, 64 MiB by default, are part of it)",
		mib(in.full.heap), mib(in.full.heapGoal), mib(in.full.heapGoal/2), float64(in.full.heapGoal/2-in.base.heapGoal/2)/(1<<20)/(float64(max(in.fullDepth, 1))/1e6))
	t.Logf("peak sampled rss %s (%s, %.0f s: Go heap %s, GC goal %s, goroutine stacks %s); end of steady load rss %s, disk %s", mib(peak.rss), peak.phase, peak.at.Seconds(),
		mib(peak.mem.heap), mib(peak.mem.goal), mib(peak.mem.stack), mib(in.steadyEnd.rss), mib(in.steadyEnd.disk))
	t.Logf("cpu: idle with the full backlog %.1f%% of a core; with %d long polls parked %.1f%% (test process %.1f%%; %d empty answers in the %v window; all parked %v after starting)",
		in.idleCPU, s.cfg.pollers, in.parkedCPU, in.parkedClientCPU, in.parkedEmpty, quietWindow, in.parkedAt.Round(time.Millisecond))
	t.Logf("drain: %v (drained: %v); after it rss %s, heap %s (goal %s), disk %s (apparent %s)", in.drainTook.Round(time.Second), in.drained,
		mib(in.afterDrain.rss), mib(in.afterDrain.heap), mib(in.afterDrain.heapGoal), mib(in.afterDrain.disk), mib(in.afterDrain.apparent))
	for _, st := range in.rec.steps {
		t.Logf("reclaim %-24s: disk %s (apparent %s) → low %s after %v (watched %v), end %s (apparent %s); rss %s → %s; reclaimed (within 10%% of the backlog's growth): %v. %s",
			st.what, mib(st.start.disk), mib(st.start.apparent), mib(st.low), st.lowAfter.Round(time.Second), st.took.Round(time.Second), mib(st.end.disk), mib(st.end.apparent),
			mib(st.start.rss), mib(st.end.rss), reclaimed(st.low, in.base, in.full), st.note)
	}
	// The store's idle compactions, which say whose work a reclaim was.
	for _, l := range grepLog(filepath.Join(s.dir, "server.log"), "pebblestore: compact") {
		t.Logf("server: %s", l)
	}

	// Correctness.
	var acked, seen, dups, afterDel, unexpected, misrouted, corrupt, lost uint64
	for _, q := range s.queues {
		n, first := q.lost()
		q.mu.Lock()
		acked += q.nAcked
		seen += q.nSeen
		dups += q.dups
		afterDel += q.afterDel
		unexpected += q.unexpected
		misrouted += q.misrouted
		corrupt += q.corrupt
		q.mu.Unlock()
		lost += n
		if n > 0 {
			t.Errorf("queue %s: %d acknowledged messages never delivered (first seqs %v)", q.name, n, first)
		}
	}
	t.Logf("messages: %d acknowledged (SQS %d, AMQP confirmed %d, AMQP nacked %d), %d distinct delivered (%d of them never acknowledged: sends cut short by the end of a phase, which the broker had stored), %d duplicate deliveries",
		acked, s.sent.Load(), s.published.Load(), s.nacked.Load(), seen, int64(seen)-int64(acked-lost), dups)
	t.Logf("verdict: lost %d, unexpected %d, misrouted %d, corrupt %d, delivered after an acknowledged delete %d, 5xx %d, server died %v",
		lost, unexpected, misrouted, corrupt, afterDel, s.errs.server5x.Load(), s.died.Load())
	t.Logf("errors (%d):", s.errs.total())
	for _, l := range s.errs.lines() {
		t.Logf("  %s", l)
	}
	if !in.drained {
		t.Errorf("the broker did not drain")
	}
	if unexpected+misrouted+corrupt > 0 {
		t.Errorf("deliveries that were never sent, from another queue or altered: %d, %d, %d", unexpected, misrouted, corrupt)
	}
	if afterDel > 0 {
		t.Errorf("%d deliveries of messages whose delete had been acknowledged within their lease", afterDel)
	}
	if n := s.errs.server5x.Load(); n > 0 {
		t.Errorf("%d server errors (HTTP 5xx or server-fault batch entries)", n)
	}
}

// grepLog returns the lines of the file at path that contain substr (none
// when it cannot be read).
func grepLog(path, substr string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, substr) {
			out = append(out, strings.TrimRight(l, "\n"))
		}
	}
	return out
}
