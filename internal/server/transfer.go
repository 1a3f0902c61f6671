package server

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// The mover of ADR 0015 step 5. In a cluster with shards, a dead letter
// (or a redriven message) whose queue lives on another shard is written by
// the engine as a transfer in the batch that takes it out of its source
// (engine transfer.go). The mover runs on every shard's leader: it reads
// this engine's durable transfers, has the leader of each target's shard
// import them (opImport on ShardEnginePath: the copies and an import
// record of each transfer, one durable write), then ends them here. A
// mover that stops between the import and the end — a crash, a lost
// leadership — leaves the transfers here, and the next leader's mover
// imports them again, which the import records (kept five minutes) make
// a no-op.

// Mover bounds: how many transfers one round reads (and, past the first,
// how many bytes of them), how often it looks when not told of a new one
// (transfers a restart or a new leadership found) and retries a target
// whose shard did not answer, and the most a refusing target waits (its
// wait doubles from moverPoll).
const (
	moverBatch   = 256
	moverBytes   = 4 * ShardSendChunk
	moverPoll    = time.Second
	moverBackoff = 30 * time.Second
)

// Pass bounds: one pass of the mover reads at most this many transfers
// (Options.MoverPassTransfers overrides it) and, past its first round,
// this many bytes of them, then the next pass goes on where it stopped.
// An outbox that cannot drain (its targets' shards without a leader, or
// refusing) is so read a part at a time, at most one pass a moverPoll
// while nothing moves, not whole every second; a transfer behind a long
// wait is reached within its length ÷ moverPassTransfers passes.
const (
	moverPassTransfers = 16 * moverBatch
	moverPassBytes     = 4 * moverBytes
)

// A mover's failure is a refusal when the target's engine answered it: no
// such queue, full, of the other type, not taking this source, its disk
// full. Asked again at once it would answer the same, so the target is
// held: not called again for 2 s, then 4, 8, 16 and 30 s (moverBackoff),
// until it takes a chunk. Any other failure — no leader of the target's
// shard serving, one that stopped leading or is closing, a call that did
// not arrive or timed out — ends with a leader election, so the target is
// called again the next pass, a moverPoll later: a dead letter waits about
// as long as the election, not a backoff that grew while it ran.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refused marks err, the target engine's answer, as a refusal unless it
// says that engine is not the one to ask (not leading, closing) or not
// yet (ErrUnavailable: shard 0 restoring its bindings to other shards'
// queues before it routes dead letters, amqp.Server.AdoptSource).
func refused(err error) error {
	if err == nil || errors.Is(err, engine.ErrNotLeading) || errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrUnavailable) {
		return err
	}
	return &refusal{err}
}

// moverState is what the mover keeps between passes.
type moverState struct {
	warned map[string]time.Time // target → last warning, one a minute
	held   map[string]*hold     // refusing targets
	// cursor is where the next pass reads from (nil: the oldest
	// transfer); cycle holds the targets read since the passes last
	// started from the oldest, so that once they reach the newest, held
	// targets with no transfer left are let go.
	cursor *engine.TransferID
	cycle  map[string]bool
}

// hold is a refusing target's backoff: not called before until; wait is
// the last wait, doubled at the next refusal.
type hold struct {
	until time.Time
	wait  time.Duration
}

// moveTransfers runs the mover until ctx ends. A pass reads the
// transfers from where the last one stopped, a round at a time, up to the
// pass bounds (moverPassTransfers, moverPassBytes) or the newest, and the
// pass after one that reached the newest starts again from the oldest. A
// target that fails is not called again in that pass (its transfers
// wait), and one that refuses is held (refusal). A new transfer starts a
// pass: at once after a clean pass (every target it met took its
// transfers, none held), else at most one a moverPoll; otherwise a pass that moved something
// is followed at once, one that stopped at its bounds or saw a target not
// answer a moverPoll later, and one that reached the newest with only
// held targets left waits for the held target due first. A pass that
// could not read the outbox waits longer each time, up to moverBackoff.
func (s *Server) moveTransfers(ctx context.Context) {
	st := &moverState{warned: map[string]time.Time{}, held: map[string]*hold{}, cycle: map[string]bool{}}
	limit := cmp.Or(s.opts.MoverPassTransfers, moverPassTransfers)
	wait := moverPoll
	timer := s.clk.NewTimer(wait)
	defer timer.Stop()
	var last time.Time // when the last pass began
	// clean: the last pass met no target that failed or is held, and
	// read the outbox: a new transfer then starts a pass at once.
	clean := true
	parked := func(bool, time.Time) {}
	if s.opts.MoverParked != nil {
		parked = s.opts.MoverParked
	}
	due := s.clk.Now().Add(wait) // when timer fires
	for {
		parked(true, due)
		select {
		case <-ctx.Done():
			return
		case <-s.eng.TransferReady():
			// A new transfer starts a pass: at once after a clean one
			// (a trickle of dead letters crosses in milliseconds, not
			// a second each), else not more than one a moverPoll: while
			// a target fails, every dead letter for it would start
			// another.
			if d := moverPoll - s.clk.Now().Sub(last); d > 0 && !clean {
				pause := s.clk.NewTimer(d)
				parked(true, s.clk.Now().Add(d))
				select {
				case <-ctx.Done():
					pause.Stop()
					return
				case <-pause.C():
				}
			}
		case <-timer.C():
		}
		parked(false, time.Time{})
		last = s.clk.Now()
		p := &movePass{failing: map[string]bool{}, seen: st.cycle}
		after, end := st.cursor, false
		var err error
		for ctx.Err() == nil && s.eng.TransfersPending() > 0 {
			var next *engine.TransferID
			next, err = s.moveRound(ctx, after, min(moverBatch, limit-p.read), p, st)
			if err != nil {
				break
			}
			if after = next; next == nil {
				end = true
				break
			}
			if p.read >= limit || p.bytes >= moverPassBytes {
				break
			}
		}
		now := s.clk.Now()
		pending := s.eng.TransfersPending()
		clean = err == nil && !p.unanswered && len(p.failing) == 0 && len(st.held) == 0
		if err == nil {
			st.cursor = after
			if end || pending == 0 {
				for target := range st.held {
					if !st.cycle[target] {
						delete(st.held, target) // no transfer waits for it
					}
				}
				st.cursor, st.cycle = nil, map[string]bool{}
			}
		}
		for target, at := range st.warned {
			if now.Sub(at) >= time.Minute {
				delete(st.warned, target) // its next warning may come at once
			}
		}
		switch {
		case p.moved > 0 && pending > 0:
			wait = 0 // progress: the next pass at once
		case p.moved > 0 || pending == 0 || p.unanswered || err == nil && st.cursor != nil:
			wait = moverPoll
		case err == nil && len(st.held) > 0:
			wait = moverBackoff
			for _, h := range st.held {
				wait = min(wait, h.until.Sub(now))
			}
			wait = max(wait, moverPoll)
		default:
			wait = min(2*max(wait, moverPoll), moverBackoff)
		}
		timer.Reset(wait)
		due = s.clk.Now().Add(wait)
	}
}

// movePass is what one pass of the mover learns: how many transfers it
// read (and their bytes) and ended, the targets that failed (not called
// again in the pass), the targets it read transfers for (the cycle's:
// moverState.cycle), and whether a target's shard did not answer.
type movePass struct {
	read, bytes int
	moved       int
	failing     map[string]bool
	seen        map[string]bool
	unanswered  bool
}

// moveRound moves one round of transfers: those after after (up to batch,
// and moverBytes past the first), in calls of at most ShardSendChunk
// bytes per target, skipping targets failing in this pass or held, and
// noting in p and st those that fail. It returns where the next round
// reads from (nil: it read the newest).
func (s *Server) moveRound(ctx context.Context, after *engine.TransferID, batch int, p *movePass, st *moverState) (*engine.TransferID, error) {
	ts, err := s.eng.Transfers(after, batch, moverBytes)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, engine.ErrNotLeading) {
			s.log.Warn("cannot read the messages bound for other shards", "err", err)
		}
		return nil, err
	}
	size := transferBytes(ts)
	p.read, p.bytes = p.read+len(ts), p.bytes+size
	var next *engine.TransferID
	if len(ts) == batch || size >= moverBytes {
		next = &ts[len(ts)-1].ID
	}
	now := s.clk.Now()
	byTarget := map[string][]engine.Transfer{}
	var order []string
	for _, t := range ts {
		p.seen[t.Target] = true
		if h := st.held[t.Target]; p.failing[t.Target] || h != nil && now.Before(h.until) {
			continue
		}
		if byTarget[t.Target] == nil {
			order = append(order, t.Target)
		}
		byTarget[t.Target] = append(byTarget[t.Target], t)
	}
	for _, target := range order {
		list := byTarget[target]
		for len(list) > 0 {
			n, size := 0, 0
			for n < len(list) && (n == 0 || size+len(list[n].Record) <= ShardSendChunk) {
				size += len(list[n].Record)
				n++
			}
			chunk := list[:n]
			list = list[n:]
			if err := s.moveChunk(ctx, target, chunk); err != nil {
				p.failing[target] = true
				var r *refusal
				if errors.As(err, &r) {
					h := st.held[target]
					if h == nil {
						h = &hold{}
						st.held[target] = h
					}
					h.wait = min(2*max(h.wait, moverPoll), moverBackoff)
					h.until = s.clk.Now().Add(h.wait)
				} else {
					p.unanswered = true
				}
				if now := s.clk.Now(); ctx.Err() == nil && now.Sub(st.warned[target]) >= time.Minute {
					st.warned[target] = now
					name := target
					if name == "" {
						name = "(dead letters to route on the shard of the AMQP topology)"
					}
					s.log.Warn("messages moving to a queue of another shard wait for it (dead letters, or redriven messages)", "target", name,
						"waiting", s.eng.TransfersPending(), "err", err)
				}
				break // this target's others wait for a later pass
			}
			delete(st.held, target)
			p.moved += len(chunk)
		}
	}
	return next, nil
}

// moveChunk imports transfers into target's shard, then ends them here.
func (s *Server) moveChunk(ctx context.Context, target string, chunk []engine.Transfer) error {
	ids := make([]engine.TransferID, len(chunk))
	for i, t := range chunk {
		ids[i] = t.ID
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var err error
	if target == "" {
		// Dead letters to route (engine.Transfer.Route), on the shard
		// whose AMQP topology routes them.
		err = s.routeCall(cctx, engineCall{Op: opRoute, Transfers: chunk})
	} else {
		err = s.transferCall(cctx, engineCall{Op: opImport, Queue: target, Transfers: chunk})
	}
	if errors.Is(err, ErrNotElsewhere) {
		// The target lives on this shard now (deleted on its shard and
		// made again here since the transfer was written): imported here.
		err = refused(s.eng.ImportTransfers(target, chunk))
	}
	if err != nil {
		return err
	}
	return s.eng.EndTransfers(ids)
}

// transferCall runs c on the leader of the shard holding c.Queue
// (ErrNotElsewhere: no other shard holds it).
func (s *Server) transferCall(ctx context.Context, c engineCall) error {
	_, err := moverReply(s.opts.ShardCall(ctx, c.Queue, ShardEnginePath, encodeEngineCall(&c)))
	return err
}

// moverReply reads the answer out (or the call's error err) to one of
// the mover's engine calls: the engine's own failure marked as a refusal
// (refused), an unreadable answer or a call that failed as it is.
func moverReply(out []byte, err error) (engineReply, error) {
	if err != nil {
		return engineReply{}, err
	}
	rep, err := decodeEngineReply(out)
	if err != nil && rep.Err != (remoteError{}) {
		return rep, refused(err) // the target's engine answered
	}
	return rep, err // nil, or an unreadable answer
}

// routeCall runs c on the leader of the shard that routes this server's
// dead letters (Options.RouteCall), or here (Options.RouteLater). The
// transfers routed nowhere (named in the answer's Errs at their place, or
// by importRouted) are counted as dropped in their sources here
// (engine.CountRoutedNowhere).
func (s *Server) routeCall(ctx context.Context, c engineCall) error {
	var nowhere []int
	switch {
	case s.opts.RouteCall != nil:
		rep, err := moverReply(s.opts.RouteCall(ctx, encodeEngineCall(&c)))
		if err != nil {
			return err
		}
		for i, e := range rep.Errs {
			if e != (remoteError{}) && i < len(c.Transfers) {
				nowhere = append(nowhere, i)
			}
		}
	case s.opts.RouteLater:
		// This server's own dead letters, kept until its topology was
		// ready (engine.Options.RouteLater): routed here.
		var err error
		if nowhere, err = s.importRouted(c.Transfers); err != nil {
			return refused(err)
		}
	default:
		return &refusal{errors.New("dead letters to route, and no shard to route them")}
	}
	for _, i := range nowhere {
		s.eng.CountRoutedNowhere(c.Transfers[i].Source, c.Transfers[i].Reason)
	}
	return nil
}

// transferBytes is the size of the copies ts carry.
func transferBytes(ts []engine.Transfer) int {
	n := 0
	for _, t := range ts {
		n += len(t.Record)
	}
	return n
}

// importRouted routes dead letters that another shard's engine sent to be
// routed here (engine.ImportRouted), this server's AMQP topology knowing
// their sources first (amqp.Server.AdoptSource), and returns the indexes
// of those routed nowhere.
func (s *Server) importRouted(ts []engine.Transfer) ([]int, error) {
	adopted := map[string]bool{}
	for i := range ts {
		if src := ts[i].Source; !adopted[src] {
			adopted[src] = true
			if err := s.amqp.AdoptSource(src); err != nil {
				return nil, err
			}
		}
	}
	return s.eng.ImportRouted(ts)
}
