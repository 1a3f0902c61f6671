package engine

import (
	"encoding/binary"
	"math/rand/v2"
	"time"
)

// backoff computes a retry delay (see RetryPolicy). The random source is
// seeded from the message id and the attempt number, which keeps the jitter
// uniform across messages yet reproducible: a replay of the same history
// (after a crash, or on another replica) computes the same delay.
func backoff(p *RetryPolicy, id [16]byte, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	exp := func(k int) time.Duration {
		d := p.Base
		for i := 1; i < k && d < p.Cap; i++ {
			d *= 2
		}
		return min(d, p.Cap)
	}
	rng := rand.New(rand.NewPCG(binary.BigEndian.Uint64(id[:8])^uint64(n), binary.BigEndian.Uint64(id[8:])))
	uniform := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	switch p.Strategy {
	case RetryFixed:
		return p.Base
	case RetryExponential:
		return exp(n)
	case RetryDecorrelated:
		// sleep_k = min(cap, uniform(base, sleep_{k-1}·3)), sleep_0 = base.
		prev := p.Base
		for k := 1; k <= n; k++ {
			prev = min(p.Cap, uniform(p.Base, prev*3))
		}
		return prev
	default: // full jitter
		return uniform(0, exp(n))
	}
}
