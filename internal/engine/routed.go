package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Dead letters routed outside this engine (ADR 0016 decision 6). In a
// cluster with shards, an AMQP queue with a dead-letter exchange may live
// on a shard other than shard 0, whose AMQP topology alone knows the
// exchange and its bindings. That shard's engine (Options.RouteElsewhere)
// writes each dead letter of such a queue (a Routed DeadLetterPolicy) as a
// route transfer — a transfer record (transfer.go) with Route set and no
// target, carrying the dead-letter copy with the message's own envelope —
// in the batch that takes it out of the source. The mover carries route
// transfers to shard 0's leader, whose engine imports them with
// ImportRouted: its router (DeadLetterRouter) gives each one's targets and
// new envelope (the x-death history), and the copies for its own queues
// and new transfers for targets on other shards are written with the
// import record, in one durable write. A retried import is a no-op, as for
// ImportTransfers. A message is therefore in its source, in one of the
// two outboxes, or in its targets — never in none — unless the router
// gives it no target (no such exchange, no binding, a cycle, every target
// full), when it is dropped and logged, and counted in its source's
// dropped count by the source's engine once told (CountRoutedNowhere), as
// a dead letter routed nowhere is on a single node.

// routeTransferLocked writes m's dead letter as a route transfer in b, the
// batch that takes m out of q (held locked).
func (e *Engine) routeTransferLocked(q *queue, m *message, reason string, env []byte, now int64, b *store.Batch) {
	q.stats.deadLettered.Add(1)
	e.noteDeadLetterClass(q, m, reason)
	e.transferDeadLetterLocked(q, m, &Transfer{Source: q.name, Reason: reason, Route: true}, env, now, b)
	e.log.Debug("dead letter sent to be routed", "queue", q.name, "reason", reason, "message", FormatID(m.id), "receives", m.recvCount)
}

// ImportRouted routes route transfers (Transfer.Route, written by an engine
// with Options.RouteElsewhere) with this engine's DeadLetterRouter, as if
// their sources were its own queues: each transfer's copy goes to every
// target queue of this engine the router names (of the copy's type, with
// room: a full target whose overflow refuses new messages refuses it, as
// for a dead letter here), and as a new transfer to every target held
// elsewhere (Options.QueueHeldElsewhere), with the router's envelope. The
// copies, the new transfers and an import record of each transfer are one
// durable write; the copies are receivable once it is on disk. A transfer
// whose id has an import record is skipped (imported before: a mover
// retrying). A transfer the router routes nowhere is dropped and logged,
// and its index in ts returned in nowhere, for the source's engine to
// count (CountRoutedNowhere). The router must know each source (for
// AMQP, the caller adopts the source into its topology first).
func (e *Engine) ImportRouted(ts []Transfer) (nowhere []int, err error) {
	if e.router == nil {
		return nil, errors.New("engine: no dead-letter router to route transfers with")
	}
	e.importMu.Lock()
	defer e.importMu.Unlock()
	now := e.now()
	var b store.Batch
	if err := e.sweepImportsLocked(now, &b); err != nil {
		return nil, err
	}
	var copies []pendingCopy
	release := func() { releaseCopies(copies) }
	highs := map[*queue]uint64{}
	seen := make(map[TransferID]bool, len(ts))
	out := 0 // transfers written for targets elsewhere
	for i := range ts {
		x := &ts[i]
		if !x.Route {
			release()
			return nil, fmt.Errorf("engine: transfer %s is not one to route (its target: %q)", x.ID, x.Target)
		}
		if seen[x.ID] {
			continue
		}
		seen[x.ID] = true
		if _, err := e.st.Get(importKey(x.ID)); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			release()
			return nil, err
		}
		m := &message{}
		g, err := decodeContent(m, x.Record)
		if err != nil {
			release()
			return nil, fmt.Errorf("transfer %s: %w", x.ID, err)
		}
		at := time.Unix(0, int64(binary.BigEndian.Uint64(x.ID[:8])))
		if m.ext != nil && m.ext.dead != nil && !m.ext.dead.DeadLetteredAt.IsZero() {
			at = m.ext.dead.DeadLetteredAt
		}
		names, env := e.router.RouteDeadLetter(x.Source, &DeadLetter{
			MessageID: FormatID(m.id), Reason: x.Reason, Envelope: m.envelope(), Attributes: m.attrs,
			ReceiveCount: int(m.recvCount), SentAt: fromNanos(m.sentAt), Time: at,
		})
		if env == nil {
			env = m.envelope()
		}
		var age time.Duration
		if m.sentAt != 0 {
			age = time.Duration(now - m.sentAt)
		}
		took := 0
		for _, name := range names {
			t, err := e.lookup(name)
			if err != nil {
				if !e.heldElsewhere(name) {
					continue
				}
				// Another shard's queue: a transfer, which this engine's
				// mover carries there (its import checks type and room).
				n := &message{}
				_, _ = decodeContent(n, x.Record) // decoded above
				n.extension().envelope = env
				n.group = &group{id: g}
				t := &Transfer{ID: e.newTransferID(now), Target: name, Source: x.Source, Reason: x.Reason, Record: encodeContent(n)}
				b.Set(transferKey(t.ID), encodeTransfer(t))
				out++
				took++
				continue
			}
			if fifo := g != ""; fifo != t.isFIFO {
				continue
			}
			n := &message{}
			_, _ = decodeContent(n, x.Record)
			n.extension().envelope = env
			size := int64(len(n.body))
			if !t.room.reserve(t.snap.Load(), size, false) {
				e.log.Warn("dead letter refused: target queue is full", "queue", x.Source, "target", t.name, "reason", x.Reason, "message", FormatID(n.id))
				continue
			}
			recLen := importCopy(t, n, g, now, &b)
			highs[t] = max(highs[t], n.seq)
			copies = append(copies, pendingCopy{target: t, m: n, group: g, purges: t.purges.Load(), size: size, recLen: recLen,
				dead: &deadLetterEvent{source: x.Source, reason: x.Reason, age: age}})
			took++
		}
		if took == 0 {
			e.log.Warn("message dropped: its dead letter was routed nowhere", "queue", x.Source, "reason", x.Reason, "message", FormatID(m.id), "receives", m.recvCount)
			nowhere = append(nowhere, i)
		}
		b.Set(importKey(x.ID), binary.AppendVarint(nil, now))
	}
	for t, high := range highs {
		b.Set(movedSeqKey(t.id, importSeqSource), binary.BigEndian.AppendUint64(nil, high))
	}
	if out > 0 {
		e.transfers.Add(int64(out))
	}
	p, err := e.write(&b, true)
	if err != nil {
		release()
		return nil, err
	}
	if len(copies) == 0 {
		err = e.wait(p)
	} else {
		err = e.insertCopies(copies, p)
	}
	if err == nil && out > 0 {
		// Told once the new transfers are in the store (see
		// writeTransferLocked).
		select {
		case e.transferPoke <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return nil, err
	}
	return nowhere, nil
}

// CountRoutedNowhere counts, in queue source's dropped messages, one whose
// dead letter its routing engine routed nowhere (ImportRouted's nowhere),
// as a dead letter routed nowhere here is counted. No such queue (deleted
// since): nothing.
func (e *Engine) CountRoutedNowhere(source, reason string) {
	q, err := e.lookup(source)
	if err != nil {
		return
	}
	q.stats.dropped.Add(1)
	lvl := slog.LevelDebug
	if e.logDrops {
		lvl = slog.LevelInfo
	}
	e.log.Log(context.Background(), lvl, "message dropped: its dead letter was routed nowhere", "queue", source, "reason", reason)
}

// RoutedElsewhereQueues returns, sorted, this engine's queues whose dead
// letters are routed elsewhere (a Routed DeadLetterPolicy marked
// RoutedElsewhere, on an engine with Options.RouteElsewhere): a cluster
// has the routing shard learn them before their first dead letter.
func (e *Engine) RoutedElsewhereQueues() []string {
	if !e.routeElsewhere {
		return nil
	}
	var out []string
	for _, q := range e.allQueues() {
		q.mu.Lock()
		if p := q.cfg.DeadLetter; p != nil && p.Routed && p.RoutedElsewhere && !q.deleted {
			out = append(out, q.name)
		}
		e.unlockAndInsertCopies(q)
	}
	slices.Sort(out)
	return out
}
