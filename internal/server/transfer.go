package server

import (
	"context"
	"errors"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// The mover of ADR 0015 step 5 (the first slice: dead letters). In a
// cluster with shards, a queue's RedrivePolicy may name a dead-letter queue
// on another shard; the engine writes each dead letter for it as a
// transfer in the batch that takes it out of its source (engine
// transfer.go). The mover runs on every shard's leader: it reads this
// engine's durable transfers, has the leader of the dead-letter queue's
// shard import them (opImport on ShardEnginePath: the copies and an import
// record of each transfer, one durable write), then ends them here. A
// mover that stops between the import and the end — a crash, a lost
// leadership — leaves the transfers here, and the next leader's mover
// imports them again, which the import records (kept five minutes) make
// a no-op.

// Mover bounds: how many transfers one round reads, how often it looks
// when not told of a new one (transfers a restart or a new leadership
// found), and how long it waits after a round that failed.
const (
	moverBatch = 256
	moverBytes = 4 * ShardSendChunk // what one round holds in memory, past its first transfer
	moverPoll  = time.Second
	moverRetry = 2 * time.Second
)

// moveTransfers runs the mover until ctx ends.
func (s *Server) moveTransfers(ctx context.Context) {
	tick := time.NewTicker(moverPoll)
	defer tick.Stop()
	warned := map[string]time.Time{} // target → last warning, one a minute
	var after *engine.TransferID     // where the next round reads from
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.eng.TransferReady():
		case <-tick.C:
		}
		for ctx.Err() == nil && s.eng.TransfersPending() > 0 {
			moved, next, err := s.moveRound(ctx, after, warned)
			after = next
			if err != nil || (moved == 0 && after == nil) {
				break
			}
		}
	}
}

// moveRound moves one round of transfers (up to moverBatch after after,
// in calls of at most ShardSendChunk bytes per target). It returns how many
// ended, and where the next round reads from: past this round's when it
// read a full batch (transfers that cannot move yet, for a missing or full
// dead-letter queue, do not hold up the others), else from the start. A
// target that fails is skipped this round and warned about.
func (s *Server) moveRound(ctx context.Context, after *engine.TransferID, warned map[string]time.Time) (int, *engine.TransferID, error) {
	ts, err := s.eng.Transfers(after, moverBatch, moverBytes)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, engine.ErrNotLeading) {
			s.log.Warn("cannot read dead letters bound for other shards", "err", err)
		}
		s.waitRetry(ctx)
		return 0, nil, err
	}
	var next *engine.TransferID
	if len(ts) == moverBatch || transferBytes(ts) >= moverBytes {
		next = &ts[len(ts)-1].ID
	}
	byTarget := map[string][]engine.Transfer{}
	var order []string
	for _, t := range ts {
		if byTarget[t.Target] == nil {
			order = append(order, t.Target)
		}
		byTarget[t.Target] = append(byTarget[t.Target], t)
	}
	moved, failed := 0, false
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
				failed = true
				if now := s.clk.Now(); ctx.Err() == nil && now.Sub(warned[target]) >= time.Minute {
					warned[target] = now
					s.log.Warn("messages moving to a queue of another shard wait for it (dead letters, or redriven messages)", "target", target,
						"waiting", s.eng.TransfersPending(), "err", err)
				}
				break // this target's others wait for the next round
			}
			moved += len(chunk)
		}
	}
	if failed && next == nil {
		s.waitRetry(ctx)
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

func (s *Server) waitRetry(ctx context.Context) {
	t := time.NewTimer(moverRetry)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func transferBytes(ts []engine.Transfer) int {
	n := 0
	for _, t := range ts {
		n += len(t.Record)
	}
	return n
}
