package server

import (
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
// (transfers a restart or a new leadership found), and the most it waits
// between passes that moved nothing (the wait doubles from moverPoll).
const (
	moverBatch   = 256
	moverBytes   = 4 * ShardSendChunk
	moverPoll    = time.Second
	moverBackoff = 30 * time.Second
)

// moveTransfers runs the mover until ctx ends. A pass reads every
// transfer, a round at a time; a target that fails is not called again in
// that pass (its transfers wait). A new transfer starts a pass (at most
// one a moverPoll); otherwise, after a pass that moved nothing, the next
// waits longer, up to moverBackoff, so that transfers stuck on a missing
// or full queue cost a read of the outbox now and then, not a stream of
// calls.
func (s *Server) moveTransfers(ctx context.Context) {
	warned := map[string]time.Time{} // target → last warning, one a minute
	wait := moverPoll
	timer := s.clk.NewTimer(wait)
	defer timer.Stop()
	var last time.Time // when the last pass began
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.eng.TransferReady():
			// A new transfer starts a pass, but not more than one a
			// moverPoll: while a target fails, every dead letter for it
			// would start another.
			if d := moverPoll - s.clk.Now().Sub(last); d > 0 {
				pause := s.clk.NewTimer(d)
				select {
				case <-ctx.Done():
					pause.Stop()
					return
				case <-pause.C():
				}
			}
		case <-timer.C():
		}
		last = s.clk.Now()
		moved := 0
		failing := map[string]bool{}
		var after *engine.TransferID
		for ctx.Err() == nil && s.eng.TransfersPending() > 0 {
			n, next, err := s.moveRound(ctx, after, failing, warned)
			moved += n
			if after = next; err != nil || next == nil {
				break
			}
		}
		switch {
		case moved > 0 && s.eng.TransfersPending() > 0:
			wait = 0 // progress: the next pass at once
		case moved > 0 || s.eng.TransfersPending() == 0:
			wait = moverPoll
		default:
			wait = min(2*max(wait, moverPoll), moverBackoff)
		}
		timer.Reset(wait)
	}
}

// moveRound moves one round of transfers: those after after (up to
// moverBatch, and moverBytes past the first), in calls of at most
// ShardSendChunk bytes per target, skipping targets in failing and adding
// those that fail. It returns how many ended, and where the next round of
// the pass reads from (nil: the pass is over).
func (s *Server) moveRound(ctx context.Context, after *engine.TransferID, failing map[string]bool, warned map[string]time.Time) (int, *engine.TransferID, error) {
	ts, err := s.eng.Transfers(after, moverBatch, moverBytes)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, engine.ErrNotLeading) {
			s.log.Warn("cannot read the messages bound for other shards", "err", err)
		}
		return 0, nil, err
	}
	var next *engine.TransferID
	if len(ts) == moverBatch || transferBytes(ts) >= moverBytes {
		next = &ts[len(ts)-1].ID
	}
	byTarget := map[string][]engine.Transfer{}
	var order []string
	for _, t := range ts {
		if failing[t.Target] {
			continue
		}
		if byTarget[t.Target] == nil {
			order = append(order, t.Target)
		}
		byTarget[t.Target] = append(byTarget[t.Target], t)
	}
	moved := 0
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
				failing[target] = true
				if now := s.clk.Now(); ctx.Err() == nil && now.Sub(warned[target]) >= time.Minute {
					warned[target] = now
					s.log.Warn("messages moving to a queue of another shard wait for it (dead letters, or redriven messages)", "target", target,
						"waiting", s.eng.TransfersPending(), "err", err)
				}
				break // this target's others wait for a later pass
			}
			moved += len(chunk)
		}
	}
	return moved, next, nil
}

// moveChunk imports transfers into target's shard, then ends them here.
func (s *Server) moveChunk(ctx context.Context, target string, chunk []engine.Transfer) error {
	ids := make([]engine.TransferID, len(chunk))
	for i, t := range chunk {
		ids[i] = t.ID
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := s.transferCall(cctx, engineCall{Op: opImport, Queue: target, Transfers: chunk})
	if errors.Is(err, ErrNotElsewhere) {
		// The target lives on this shard now (deleted on its shard and
		// made again here since the transfer was written): imported here.
		err = s.eng.ImportTransfers(target, chunk)
	}
	if err != nil {
		return err
	}
	return s.eng.EndTransfers(ids)
}

// transferCall runs c on the leader of the shard holding c.Queue
// (ErrNotElsewhere: no other shard holds it).
func (s *Server) transferCall(ctx context.Context, c engineCall) error {
	body, err := encodeGob(c)
	if err != nil {
		return err
	}
	out, err := s.opts.ShardCall(ctx, c.Queue, ShardEnginePath, body)
	if err != nil {
		return err
	}
	rep, err := decodeEngineReply(out)
	if err != nil {
		return err
	}
	return rep.Err.err()
}

// transferBytes is the size of the copies ts carry.
func transferBytes(ts []engine.Transfer) int {
	n := 0
	for _, t := range ts {
		n += len(t.Record)
	}
	return n
}
