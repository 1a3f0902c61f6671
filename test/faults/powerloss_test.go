package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

var quiet = slog.New(slog.DiscardHandler)

// plQueue is one source queue of the power-loss test with its DLQ.
type plQueue struct {
	name, dlq string
	fifo      bool
}

var plQueues = []plQueue{{"pl", "pl-dlq", false}, {"pl.fifo", "pl-dlq.fifo", true}}

// TestPowerLoss runs the engine and the pebble store in process on a
// filesystem that can simulate power loss (crashfs, pebble's crashable MemFS), with
// producers and consumers calling the engine API on a standard and a FIFO
// queue (each with a DLQ, maxReceiveCount 3). At a random moment it takes a
// crash clone of the filesystem, which keeps only what was synced (in half
// the rounds also a random part of what was not), reopens store and engine
// on the clone, and lists every stored message without receiving it. Every
// send that returned before the cut must be there exactly once unless a
// delete of it returned before the cut; those must be gone. The reopened
// broker then carries the load into the next round.
func TestPowerLoss(t *testing.T) {
	load := budget(t, 0.15)
	s := seed(t)
	rng := rand.New(rand.NewPCG(s, 0x9017))
	ck := NewChecker(false, MaxReceiveCount)
	mem := crashfs.New()
	open := func(fs vfs.FS) (*engine.Engine, func()) {
		t.Helper()
		st, err := pebblestore.Open("db", pebblestore.Options{FS: fs, Logger: quiet})
		if err != nil {
			t.Fatalf("reopen after power loss: %v", err)
		}
		eng, err := engine.Open(engine.Options{Store: st})
		if err != nil {
			t.Fatalf("engine reopen after power loss: %v", err)
		}
		return eng, func() { eng.Close(); _ = st.Close() }
	}
	eng, closeEng := open(mem)
	for _, q := range plQueues {
		cfg := engine.DefaultQueueConfig()
		cfg.FIFO = q.fifo
		if _, _, err := eng.CreateQueue(q.dlq, cfg, nil); err != nil {
			t.Fatal(err)
		}
		cfg.DeadLetter = &engine.DeadLetterPolicy{Target: q.dlq, MaxReceiveCount: MaxReceiveCount}
		if _, _, err := eng.CreateQueue(q.name, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}

	var (
		rounds, present, withUnsynced int
		violations                    []string
		ops                           atomic.Int64
		seq                           atomic.Int64
		began                         = time.Now()
	)
	for rounds < 10 || time.Since(began) < load {
		rounds++
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Per queue: two producers, two consumers of the queue, one of
		// its DLQ.
		for i := range 10 {
			q, r := plQueues[i%2], rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
			wg.Add(1)
			switch i / 2 {
			case 0, 1:
				go func() { defer wg.Done(); plProduce(ctx, eng, ck, q, &seq, rounds, r, &ops) }()
			case 2, 3:
				go func() { defer wg.Done(); plConsume(ctx, eng, ck, q.name, false, rounds-1, r, &ops) }()
			default:
				go func() { defer wg.Done(); plConsume(ctx, eng, ck, q.dlq, true, rounds-1, r, &ops) }()
			}
		}
		// Random moment to cut the power.
		SleepCtx(context.Background(), time.Duration(100+rng.IntN(700))*time.Millisecond)
		cfg := vfs.CrashCloneCfg{}
		if rng.IntN(2) == 0 {
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 1 + rng.IntN(99), RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
			withUnsynced++
		}
		cut := time.Now()
		crashed := mem.CrashClone(cfg)
		stop()
		wg.Wait()
		closeEng()
		ck.PowerCut(cut)
		ck.Fault()

		mem = crashed
		eng, closeEng = open(mem)
		stored := plSnapshot(t, eng)
		snap := ck.CheckSnapshot(stored)
		present = snap.Present
		if snap.Violations() > 0 {
			violations = append(violations, fmt.Sprintf("round %d (unsynced kept %d%%): lost %v duplicated %v resurrected %v unexpected %v corrupt %v",
				rounds, cfg.UnsyncedDataPercent, head(snap.Lost), head(snap.Duplicated), head(snap.Resurrected), head(snap.Unexpected), head(snap.Corrupt)))
		}
	}
	closeEng()
	r := ck.Report()
	t.Logf("%d power cuts (%d keeping a random part of unsynced data) in %v; engine calls %d; sends attempted %d, acknowledged and surviving %d; stored at the end %d; deliveries %d; violating rounds %d",
		rounds, withUnsynced, time.Since(began).Round(time.Millisecond), ops.Load(), r.Attempted, r.Acked, present, r.Deliveries, len(violations))
	for _, v := range violations {
		t.Error(v)
	}
}

func head(l []string) []string { return l[:min(len(l), 5)] }

// plProduce sends batches of 10 to q until ctx ends; 3% are poison.
func plProduce(ctx context.Context, eng *engine.Engine, ck *Checker, q plQueue, seq *atomic.Int64, round int, rng *rand.Rand, ops *atomic.Int64) {
	pad := strings.Repeat("~", 100)
	for ctx.Err() == nil {
		if ck.Backlog() > 20000 {
			SleepCtx(ctx, 2*time.Millisecond) // pacing
			continue
		}
		sends := make([]Send, 10)
		msgs := make([]engine.Message, 10)
		for i := range msgs {
			id := fmt.Sprintf("pl-%d-%07d", round, seq.Add(1))
			s := Send{ID: id, Poison: rng.IntN(100) < 3}
			flags := "-"
			if s.Poison {
				flags = "P"
			}
			s.Body = id + "|" + flags + "|" + pad
			msgs[i] = engine.Message{Body: []byte(s.Body)}
			if q.fifo {
				s.Group = fmt.Sprintf("g%d", rng.IntN(8))
				msgs[i].GroupID, msgs[i].DedupID = s.Group, id
			}
			sends[i] = s
			ck.Attempt(s, time.Now())
		}
		ops.Add(1)
		res, err := eng.Send(q.name, msgs)
		if err != nil {
			return // the engine was closed under us
		}
		now := time.Now()
		for i, r := range res {
			if r.Err == nil {
				ck.Acked(sends[i].ID, r.MessageID, now)
			}
		}
	}
}

// plConsume receives from queue with 1 s leases and deletes at once,
// except poison messages outside the DLQ, which it releases (visible again)
// until they are dead-lettered.
func plConsume(ctx context.Context, eng *engine.Engine, ck *Checker, queue string, dlq bool, epoch int, rng *rand.Rand, ops *atomic.Int64) {
	for ctx.Err() == nil {
		begin := time.Now()
		ops.Add(1)
		ds, err := eng.Receive(ctx, queue, engine.ReceiveRequest{Max: 10, Visibility: time.Second, VisibilitySet: true,
			Wait: 50 * time.Millisecond, WaitSet: true})
		if err != nil {
			if errors.Is(err, engine.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		end := time.Now()
		var handles []string
		var ids []string
		var leases []Lease
		var release []engine.VisibilityChange
		for _, d := range ds {
			body := string(d.Body)
			id, rest, _ := strings.Cut(body, "|")
			ck.Received(Receipt{ID: id, Body: body, MessageID: d.MessageID, Queue: queue, DLQ: dlq,
				Begin: begin, End: end, Count: d.ReceiveCount, Visibility: time.Second, Epoch: epoch})
			if !dlq && strings.HasPrefix(rest, "P") {
				ck.Released(id, Lease{d.ReceiveCount, epoch}, time.Now())
				release = append(release, engine.VisibilityChange{ReceiptHandle: d.ReceiptHandle})
				continue
			}
			ck.DeleteAttempted(id, Lease{d.ReceiveCount, epoch}, time.Now())
			handles, ids, leases = append(handles, d.ReceiptHandle), append(ids, id), append(leases, Lease{d.ReceiveCount, epoch})
		}
		if len(release) > 0 {
			ops.Add(1)
			_, _ = eng.ChangeVisibility(queue, release)
		}
		if len(handles) == 0 {
			continue
		}
		ops.Add(1)
		errs, err := eng.Delete(queue, handles)
		if err != nil {
			continue
		}
		now := time.Now()
		for i, e := range errs {
			if e == nil {
				ck.DeleteAcked(ids[i], leases[i], epoch, now)
			}
		}
	}
}

// plSnapshot lists every message of every queue, in any state.
func plSnapshot(t *testing.T, eng *engine.Engine) []Stored {
	t.Helper()
	var out []Stored
	for _, q := range plQueues {
		for _, name := range []string{q.name, q.dlq} {
			var cursor uint64
			for {
				page, err := eng.Browse(name, engine.Filter{}, cursor, 1000)
				if err != nil {
					t.Fatalf("browse %s: %v", name, err)
				}
				for _, v := range page.Messages {
					body := string(v.Body)
					id, _, _ := strings.Cut(body, "|")
					out = append(out, Stored{ID: id, Body: body, MessageID: v.MessageID})
				}
				if page.Next == 0 {
					break
				}
				cursor = page.Next
			}
		}
	}
	return out
}
