package raftstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// A node repairs a member that lost its data, or fills a new one, by
// streaming it a snapshot of the state store (snapshot.go); a node that
// held many shards, when it dies or is replaced, has each of them copied
// at once by their leaders. Unbounded, those copies take the disks and
// the network from the foreground load: a single copy at full speed
// (about 140 MB/s on the benchmark VM) tripled the send p99 of a steady
// load for its duration (docs/benchmarks.md, "A node catching up a large
// backlog by snapshot"). snapLimits is the node's budget for them, shared
// by all its shards' groups (OpenShards gives every group the same one):
//
//   - at most sends streams go out at once. A leader checks for a free
//     slot before Raft builds a snapshot for a follower (raftLog.Snapshot
//     answers raft.ErrSnapshotTemporarilyUnavailable otherwise, so Raft
//     asks again at the follower's next heartbeat answer) and takes it in
//     sendSnapshot, until the stream ends;
//   - at most recvs streams come in at once. The transport takes a slot
//     at a stream connection's first frame and holds it until the
//     connection ends (transport.read); a stream that finds none waits up
//     to snapRecvWait and is then closed, which the sender reports to Raft
//     as a failed snapshot (it tries again later);
//   - the outgoing streams together write at most rate bytes a second
//     (a token bucket, byteRate), so a copy runs at a pace the foreground
//     load can live beside.
type snapLimits struct {
	sends, recvs chan struct{} // buffered to the bound; nil: no bound
	rate         *byteRate     // nil: no limit

	// peakSends and peakRecvs are the most streams held at once (tests).
	inSends, inRecvs     atomic.Int64
	peakSends, peakRecvs atomic.Int64
}

// Snapshot traffic defaults (Config.SnapshotStreams, Config.SnapshotRate).
const (
	// DefaultSnapshotStreams: two streams each way at once. One shard's
	// copy already keeps a disk busy; two let a second shard's repair
	// start while a large one runs, without the pile-up of every shard
	// of a dead node copied at once.
	DefaultSnapshotStreams = 2
	// DefaultSnapshotRate bounds the bytes a node's snapshot streams write
	// together a second (64 MiB/s: a shard of 1 GB is copied in about 16
	// s).
	DefaultSnapshotRate = 64 << 20
	// MinSnapshotRate is the lowest rate a node accepts (1 MiB/s): below
	// it a chunk of the largest size would outlast snapRecvIdle.
	MinSnapshotRate = 1 << 20
)

// snapRecvWait is how long an incoming stream waits for a receive slot
// before it is closed: below streamWriteTimeout, so the sender, stalled
// meanwhile by TCP flow control, sees the refusal rather than a timeout of
// its own, and tries again later.
const snapRecvWait = 5 * time.Second

// snapRecvIdle bounds the wait for the next frame of a stream holding a
// receive slot: a sender that stops (a paused process, a cut link the
// kernel has not noticed) gives the slot back after it.
const snapRecvIdle = 60 * time.Second

// newSnapLimits makes the budget cfg describes: SnapshotStreams and
// SnapshotRate, 0 meaning the defaults and a negative value no bound.
func newSnapLimits(cfg *Config) *snapLimits {
	l := &snapLimits{}
	if n := cfg.SnapshotStreams; n >= 0 {
		if n == 0 {
			n = DefaultSnapshotStreams
		}
		l.sends, l.recvs = make(chan struct{}, n), make(chan struct{}, n)
	}
	if r := cfg.SnapshotRate; r >= 0 {
		if r == 0 {
			r = DefaultSnapshotRate
		}
		l.rate = newByteRate(r, time.Now)
	}
	return l
}

// sendFree reports whether a send slot is free now (it may be taken by the
// time the caller asks for it: trySend decides).
func (l *snapLimits) sendFree() bool {
	return l.sends == nil || len(l.sends) < cap(l.sends)
}

// trySend takes a send slot if one is free; release gives it back.
func (l *snapLimits) trySend() bool {
	if l.sends != nil {
		select {
		case l.sends <- struct{}{}:
		default:
			return false
		}
	}
	peak(&l.peakSends, l.inSends.Add(1))
	return true
}

// releaseSend gives back a slot trySend took.
func (l *snapLimits) releaseSend() {
	l.inSends.Add(-1)
	if l.sends != nil {
		<-l.sends
	}
}

// acquireRecv takes a receive slot, waiting up to wait for one, or until
// stop is closed; it reports whether it got one.
func (l *snapLimits) acquireRecv(wait time.Duration, stop <-chan struct{}) bool {
	if l.recvs != nil {
		select {
		case l.recvs <- struct{}{}:
		default:
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case l.recvs <- struct{}{}:
			case <-t.C:
				return false
			case <-stop:
				return false
			}
		}
	}
	peak(&l.peakRecvs, l.inRecvs.Add(1))
	return true
}

// releaseRecv gives back a slot acquireRecv took.
func (l *snapLimits) releaseRecv() {
	l.inRecvs.Add(-1)
	if l.recvs != nil {
		<-l.recvs
	}
}

// pace waits until the outgoing streams may write n more bytes, or until
// stop is closed (then it reports false).
func (l *snapLimits) pace(n int, stop <-chan struct{}) bool {
	if l.rate == nil {
		return true
	}
	d := l.rate.reserve(n)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// peak raises p to v if v is higher.
func peak(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if v <= old || p.CompareAndSwap(old, v) {
			return
		}
	}
}

// byteRate is a token bucket of bytes: it refills at rate bytes a second
// up to a burst of an eighth of a second's worth, and a reservation larger
// than what is there goes into debt, which the next callers wait out in
// turn. So writers that share it together write rate bytes a second, each
// in the order it asked.
type byteRate struct {
	mu     sync.Mutex
	rate   float64 // bytes a second
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newByteRate(rate int64, now func() time.Time) *byteRate {
	r := float64(rate)
	return &byteRate{rate: r, burst: r / 8, tokens: r / 8, last: now(), now: now}
}

// reserve takes n bytes from the bucket and returns how long the caller
// must wait before writing them (0: at once).
func (b *byteRate) reserve(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
