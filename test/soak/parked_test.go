package soak

import (
	"context"
	"time"
)

// waitParked polls until n long polls have been written and are waiting
// for their answer, and then until the broker counts n receives waiting
// (the admin API's per-queue "waiting", summed over every queue), and
// returns how long the first took. The broker gets up to 30 s more (its
// count misses a poll between its answer and the next, and a poll's wait
// is 20 s). Falling short is logged, not failed: the phase measures CPU
// with whatever parked.
func (s *soak) waitParked(ctx context.Context, n int64, limit time.Duration) time.Duration {
	t0 := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	wait := func(what string, have func() int64, until time.Time) bool {
		for have() < n {
			if time.Now().After(until) {
				s.t.Logf("only %d of %d long polls %s after %v", have(), n, what, time.Since(t0).Round(time.Millisecond))
				return true
			}
			select {
			case <-ctx.Done():
				return false
			case <-tick.C:
			}
		}
		return true
	}
	if !wait("parked", s.parked.Load, t0.Add(limit)) {
		return time.Since(t0)
	}
	took := time.Since(t0)
	s.t.Logf("%d long polls parked after %v", s.parked.Load(), took.Round(time.Millisecond))
	var broker int64
	if wait("counted waiting by the broker", func() int64 {
		if d, err := s.c.depths(ctx); err == nil {
			broker = waitingIn(d)
		}
		return broker
	}, time.Now().Add(30*time.Second)) {
		s.t.Logf("the broker counts %d receives waiting after %v", broker, time.Since(t0).Round(time.Millisecond))
	}
	return took
}

// waitingIn sums the broker's waiting receives over every queue it listed.
func waitingIn(d map[string]queueDepth) int64 {
	var n int64
	for _, q := range d {
		n += q.Waiting
	}
	return n
}
