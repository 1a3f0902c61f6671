package raftstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/store"
)

// envPowerCutRounds sets TestPowerCutsUnderLoad's rounds (default 4;
// `make cluster-faults` runs more).
const envPowerCutRounds = "SLUICE_RAFT_POWERCUT_ROUNDS"

// TestPowerCutsUnderLoad: eight writers keep proposing two-key batches to
// the leader while every node of the cluster loses power, one after the
// other in a random order, each keeping a random part of what it had not
// synced (as a disk's cache may), at a random moment of the load. After
// the nodes restart:
//   - every batch whose Wait returned nil before the first cut is there
//     (acknowledged means on a majority's synced Raft logs);
//   - every batch there is whole (both keys, the written value);
//   - nothing is there that no writer proposed.
//
// TestCrashKeepsAcknowledgedWrites cuts power between sequential writes;
// this one cuts it with proposals in flight on every node, on logs and
// state stores that keep arbitrary parts of their unsynced tails. A log
// that is not synced before its entries are acknowledged fails it (checked
// by hand: with raftLog.save writing without sync, the first round loses
// acknowledged batches).
func TestPowerCutsUnderLoad(t *testing.T) {
	rounds := 4
	if v := os.Getenv(envPowerCutRounds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", envPowerCutRounds, v)
		}
		rounds = n
	}
	seed := rand.Uint64()
	if v := os.Getenv("SLUICE_FAULT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_FAULT_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (SLUICE_FAULT_SEED replays the draws; the interleaving is the scheduler's)", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	c := newCrashCluster(t, 3)

	type batch struct {
		writer, seq int
		ackedAt     time.Time // zero: not acknowledged
	}
	var (
		mu       sync.Mutex
		proposed = map[string]*batch{} // by "w<writer>/<seq>"
		acked    int
	)
	var seqs [8]int // per writer, never reused across rounds
	for round := range rounds {
		li := c.leader(-1)
		var cur atomic.Pointer[Node]
		cur.Store(c.nodes[li])
		ctx, stop := context.WithCancel(context.Background())
		var writers sync.WaitGroup
		for w := range seqs {
			writers.Go(func() {
				for ctx.Err() == nil {
					seqs[w]++
					id := fmt.Sprintf("w%d/%d", w, seqs[w])
					bt := &batch{writer: w, seq: seqs[w]}
					mu.Lock()
					proposed[id] = bt
					mu.Unlock()
					var b store.Batch
					b.Set([]byte(id+"/a"), []byte(id))
					b.Set([]byte(id+"/b"), []byte(id))
					p, err := cur.Load().Store().Write(&b, true)
					if err == nil {
						err = p.Wait()
					}
					if err != nil {
						return // the cut: this round's load is over
					}
					mu.Lock()
					bt.ackedAt = time.Now()
					acked++
					mu.Unlock()
				}
			})
		}
		// Let the load run for a random while, then cut every node.
		load := time.Duration(20+rng.IntN(300)) * time.Millisecond
		time.Sleep(load) // the fault's timing, drawn at random; nothing waits on it to be right
		cut := time.Now()
		kept := make([]int, len(c.nodes))
		for _, i := range rng.Perm(len(c.nodes)) {
			cfg := vfs.CrashCloneCfg{}
			if rng.IntN(3) > 0 {
				kept[i] = 1 + rng.IntN(99)
				cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: kept[i], RNG: rand.New(rand.NewPCG(rng.Uint64(), 12))}
			}
			c.crashWith(i, cfg)
		}
		stop()
		writers.Wait()
		for i := range c.nodes {
			c.restart(i)
		}
		li = c.leader(-1)

		// Check the leader's state against what was proposed and acknowledged.
		got := map[string]map[string]string{}
		if err := c.nodes[li].Store().Scan([]byte("w"), func(k, v []byte) error {
			key := string(k)
			slash := strings.LastIndexByte(key, '/')
			id := key[:slash]
			if got[id] == nil {
				got[id] = map[string]string{}
			}
			got[id][key[slash+1:]] = string(v)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		var lost, partial, unknown []string
		present, ackedBefore := 0, 0
		for id, bt := range proposed {
			kv := got[id]
			if !bt.ackedAt.IsZero() && bt.ackedAt.Before(cut) {
				ackedBefore++
				if kv == nil {
					lost = append(lost, id)
				}
			}
		}
		for id, kv := range got {
			present++
			if proposed[id] == nil {
				unknown = append(unknown, id)
			}
			if len(kv) != 2 || kv["a"] != id || kv["b"] != id {
				partial = append(partial, fmt.Sprintf("%s=%v", id, kv))
			}
		}
		total := acked
		mu.Unlock()
		t.Logf("round %d: load %v, unsynced kept %v%%: %d batches present, %d acknowledged before the cut (%d in all so far)",
			round+1, load, kept, present, ackedBefore, total)
		if len(lost)+len(partial)+len(unknown) > 0 {
			t.Fatalf("round %d: lost %d acknowledged batches %v; %d partial %v; %d never proposed %v",
				round+1, len(lost), head(lost), len(partial), head(partial), len(unknown), head(unknown))
		}
	}
	if acked == 0 {
		t.Fatal("no write was acknowledged in any round: the test proved nothing")
	}
}

// head is the first few of s, for a failure message.
func head(s []string) []string { return s[:min(len(s), 5)] }
