package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Tests of a standard queue's delayed sends while the queue is cold
// (cold.go): they go to the store like any other send, count as delayed
// until their delay ends, and are never delivered before it.

// stdColdMsgBound is how many messages a standard queue with a window of
// coldWindow may hold in memory while a consumer receives ten at a time
// and deletes them: up to two windows of waiting messages (a look-ahead
// loads while fewer than two windows wait) and a batch in flight.
const stdColdMsgBound = 2*coldWindow + 10

// delayed is message body s sent with a delay of d.
func delayed(s string, d time.Duration) Message {
	return Message{Body: []byte(s), Delay: d, DelaySet: true}
}

// sendDelayed sends messages "<prefix>NNNNN" from to from+n, ten at a
// time, each with a delay of d.
func (f *coldFixture) sendDelayed(q, prefix string, from, n int, d time.Duration) {
	f.t.Helper()
	for i := from; i < from+n; i += 10 {
		var batch []Message
		for j := i; j < min(i+10, from+n); j++ {
			batch = append(batch, delayed(fmt.Sprintf("%s%05d", prefix, j), d))
		}
		f.send(q, batch...)
	}
}

// counts returns q's Visible, Delayed and InFlight.
func (f *coldFixture) counts(q string) (visible, delayed, inFlight int) {
	f.t.Helper()
	info, err := f.e.GetQueue(q)
	if err != nil {
		f.t.Fatal(err)
	}
	return info.Visible, info.Delayed, info.InFlight
}

// drainOnce receives and deletes from q until at least want more messages
// were received (a batch may take it past want), each exactly once (seen
// holds every body received so far), checking that memory stays bounded
// at every step.
func (f *coldFixture) drainOnce(q string, want int, seen map[string]bool) {
	f.t.Helper()
	f.drainBounded(q, want, seen, stdColdMsgBound)
}

// drainBounded is drainOnce with a bound of bound messages held.
func (f *coldFixture) drainBounded(q string, want int, seen map[string]bool, bound int) {
	f.t.Helper()
	got := 0
	for got < want {
		d := f.recv(q, 10, time.Hour)
		if len(d) == 0 {
			f.t.Fatalf("stuck after %d of %d", got, want)
		}
		for _, m := range d {
			if seen[string(m.Body)] {
				f.t.Fatalf("%s delivered twice", m.Body)
			}
			seen[string(m.Body)] = true
			got++
		}
		if h := f.held(q); h > bound {
			f.t.Fatalf("%d messages held after %d received", h, got)
		}
		for _, m := range d {
			f.del(q, m.ReceiptHandle)
		}
	}
}

// TestColdDelayedSendsStayOnDisk: 500 sends delayed per message and 500
// delayed by the queue's DelaySeconds into a queue whose window is 16. At
// most a window stays in memory while they wait (receives deliver nothing
// and load nothing); they count as Delayed, then as Visible once the delay
// ends; each is then delivered exactly once with memory bounded.
func TestColdDelayedSendsStayOnDisk(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.create("qd", func(c *QueueConfig) { c.Delay = 30 * time.Second })
		f.sendDelayed("q", "m", 0, 500, 30*time.Second)
		f.sendN("qd", 0, 500)
		for _, q := range []string{"q", "qd"} {
			if h := f.held(q); h > coldWindow {
				t.Fatalf("%s: %d messages held after the sends", q, h)
			}
			for i := 0; i < 5; i++ {
				if d := f.recv(q, 10, time.Hour); len(d) != 0 {
					t.Fatalf("%s: delivered during the delay: %v", q, bodies(d))
				}
			}
			if h := f.held(q); h > coldWindow {
				t.Fatalf("%s: %d messages held after receives", q, h)
			}
			if v, d, _ := f.counts(q); v != 0 || d != 500 {
				t.Fatalf("%s during the delay: %d visible, %d delayed", q, v, d)
			}
		}
		f.clk.Advance(29 * time.Second)
		for _, q := range []string{"q", "qd"} {
			if d := f.recv(q, 10, time.Hour); len(d) != 0 {
				t.Fatalf("%s: delivered a second before the delay ends: %v", q, bodies(d))
			}
		}
		f.clk.Advance(2 * time.Second)
		for _, q := range []string{"q", "qd"} {
			if v, d, _ := f.counts(q); v != 500 || d != 0 {
				t.Fatalf("%s after the delay: %d visible, %d delayed", q, v, d)
			}
			seen := map[string]bool{}
			f.drainOnce(q, 500, seen)
			if v, d, fl := f.counts(q); v+d+fl != 0 {
				t.Fatalf("%s drained: %d visible, %d delayed, %d in flight", q, v, d, fl)
			}
		}
	})
}

// TestColdDelayedSendsDoNotHoldBackVisible: a window of delayed messages
// does not hold back the visible messages behind it: receives look past it
// (within the look-ahead's bound) and deliver every visible message before
// the delays end, never a delayed one; then the delayed ones, each once.
func TestColdDelayedSendsDoNotHoldBackVisible(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendDelayed("q", "d", 0, 2*coldWindow, time.Minute)
		f.sendN("q", 0, 300)
		f.sendDelayed("q", "d", 2*coldWindow, 10, time.Minute)
		if v, d, _ := f.counts("q"); v != 300 || d != 2*coldWindow+10 {
			t.Fatalf("after the sends: %d visible, %d delayed", v, d)
		}
		seen := map[string]bool{}
		f.drainOnce("q", 300, seen)
		for b := range seen {
			if b[0] != 'm' {
				t.Fatalf("%s delivered before its delay ended", b)
			}
		}
		if d := f.recv("q", 10, time.Hour); len(d) != 0 {
			t.Fatalf("delivered during the delay: %v", bodies(d))
		}
		if v, d, _ := f.counts("q"); v != 0 || d != 2*coldWindow+10 {
			t.Fatalf("visible drained: %d visible, %d delayed", v, d)
		}
		f.clk.Advance(time.Minute)
		f.drainOnce("q", 2*coldWindow+10, seen)
		if len(seen) != 300+2*coldWindow+10 {
			t.Fatalf("%d distinct messages", len(seen))
		}
	})
}

// TestColdDelayedSendsAcrossRestart: delayed messages on disk survive a
// restart, are still not delivered before their delay ends, count as
// delayed (from their delay records: Open does not read their content),
// count as visible once it has ended, and are each delivered once.
func TestColdDelayedSendsAcrossRestart(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendDelayed("q", "m", 0, 300, 40*time.Second)
		f.restartCold()
		if v, d, _ := f.counts("q"); v != 0 || d != 300 {
			t.Fatalf("after the restart: %d visible, %d delayed", v, d)
		}
		if h := f.held("q"); h > coldWindow {
			t.Fatalf("%d messages held after the restart", h)
		}
		for i := 0; i < 5; i++ {
			if d := f.recv("q", 10, time.Hour); len(d) != 0 {
				t.Fatalf("delivered during the delay: %v", bodies(d))
			}
		}
		if h := f.held("q"); h > stdColdMsgBound {
			t.Fatalf("%d messages held after receives", h)
		}
		f.clk.Advance(41 * time.Second)
		if v, d, _ := f.counts("q"); v != 300 || d != 0 {
			t.Fatalf("after the delay: %d visible, %d delayed", v, d)
		}
		seen := map[string]bool{}
		f.drainOnce("q", 150, seen)
		f.restartCold()
		f.drainOnce("q", 300-len(seen), seen)
		if len(seen) != 300 {
			t.Fatalf("%d distinct messages", len(seen))
		}
		if v, d, fl := f.counts("q"); v+d+fl != 0 {
			t.Fatalf("drained: %d visible, %d delayed, %d in flight", v, d, fl)
		}
	})
}

// TestColdDelayedSendsPurge: a purge deletes cold delayed messages with
// their counts: nothing comes back when their delay would have ended,
// across a restart too.
func TestColdDelayedSendsPurge(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendDelayed("q", "m", 0, 300, 20*time.Second)
		if err := f.e.PurgeQueue("q"); err != nil {
			t.Fatal(err)
		}
		if v, d, _ := f.counts("q"); v+d != 0 {
			t.Fatalf("after the purge: %d visible, %d delayed", v, d)
		}
		f.clk.Advance(21 * time.Second)
		if v, d, _ := f.counts("q"); v+d != 0 {
			t.Fatalf("after the delay: %d visible, %d delayed", v, d)
		}
		if d := f.recv("q", 10, time.Hour); len(d) != 0 {
			t.Fatalf("purged messages delivered: %v", bodies(d))
		}
		f.restartCold()
		if got := f.count("q"); got != 0 {
			t.Fatalf("count %d after a restart", got)
		}
		f.send("q", body("after"))
		if d := bodies(f.recv("q", 10, time.Hour)); fmt.Sprint(d) != "[after]" {
			t.Fatalf("after the purge: %v", d)
		}
	})
}

// TestColdDelayedSendsRetention: cold delayed messages past the queue's
// retention expire when a receive reaches them; younger ones are
// delivered once their delay ends.
func TestColdDelayedSendsRetention(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", func(c *QueueConfig) { c.Retention = time.Minute })
		f.sendDelayed("q", "old", 0, 100, 30*time.Second)
		f.clk.Advance(30 * time.Second)
		f.sendDelayed("q", "new", 0, 10, 20*time.Second)
		f.clk.Advance(31 * time.Second)
		var got []string
		for i := 0; i < 5; i++ {
			for _, d := range f.recv("q", 10, time.Hour) {
				got = append(got, string(d.Body))
				f.del("q", d.ReceiptHandle)
			}
		}
		if len(got) != 10 || got[0] != "new00000" {
			t.Fatalf("received %d: %v", len(got), got)
		}
		info, _ := f.e.GetQueue("q")
		if info.Expired != 100 || info.Visible+info.Delayed+info.InFlight != 0 {
			t.Fatalf("after retention: %+v", info)
		}
	})
}

// TestColdDelayEndWakesLongPoll: a long poll waiting on a queue whose
// window holds only messages delayed for a minute returns as soon as the
// (shorter) delay of cold messages behind them ends, before its own wait
// does.
func TestColdDelayEndWakesLongPoll(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendDelayed("q", "late", 0, coldWindow, time.Minute)
		f.sendDelayed("q", "soon", 0, 5, 10*time.Second)
		type result struct {
			d   []Delivery
			err error
		}
		done := make(chan result, 1)
		go func() {
			d, err := f.e.Receive(context.Background(), "q", ReceiveRequest{Max: 10, Wait: 20 * time.Second, WaitSet: true})
			done <- result{d, err}
		}()
		// The scheduler's timer and the poll's.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.clk.BlockUntil(ctx, 2); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(11 * time.Second)
		select {
		case r := <-done:
			if r.err != nil || len(r.d) != 5 || string(r.d[0].Body[:4]) != "soon" {
				t.Fatalf("long poll returned %q, %v", bodies(r.d), r.err)
			}
		case <-time.After(10 * time.Second):
			f.e.Close() // ends the poll
			t.Fatal("the long poll was not woken when the cold messages' delay ended")
		}
	})
}

// TestColdDelayedRandomWorkload: random sends (a third delayed, up to two
// minutes), receives, deletes, failure reports with a retry backoff,
// visibility changes, clock steps and restarts on a standard queue whose
// window is 16. No message is delivered before its delay, backoff or lease
// ends, none after its delete; the counts always add up to what is
// undeleted; memory holds at most two windows besides leases and
// backoffs; at the end every message is delivered and deleted.
func TestColdDelayedRandomWorkload(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		rng := rand.New(rand.NewPCG(13, 4))
		f.create("q", func(c *QueueConfig) { c.Retention = 14 * 24 * time.Hour })
		notBefore := map[string]int64{} // body → earliest delivery (unix nanos)
		deleted := map[string]bool{}
		backoff := map[string]bool{} // bodies waiting out a retry backoff
		leased := map[string]bool{}
		now := func() int64 { return f.clk.Now().UnixNano() }
		total := 0
		check := func(step int, d Delivery) {
			b := string(d.Body)
			if deleted[b] {
				t.Fatalf("step %d: %s delivered after its delete", step, b)
			}
			if nb := notBefore[b]; now() < nb {
				t.Fatalf("step %d: %s delivered %v early", step, b, time.Duration(nb-now()))
			}
		}
		for step := 0; step < 3000; step++ {
			switch r := rng.IntN(100); {
			case r < 35:
				var batch []Message
				for i := rng.IntN(10); i >= 0; i-- {
					m := body(fmt.Sprintf("m%05d", total))
					notBefore[string(m.Body)] = now()
					if rng.IntN(3) == 0 {
						d := time.Duration(1+rng.IntN(120)) * time.Second
						m.Delay, m.DelaySet = d, true
						notBefore[string(m.Body)] = now() + int64(d)
					}
					batch = append(batch, m)
					total++
				}
				f.send("q", batch...)
			case r < 85:
				for _, m := range f.recv("q", 1+rng.IntN(10), 30*time.Second) {
					check(step, m)
					b := string(m.Body)
					delete(backoff, b)
					leased[b] = true
					notBefore[b] = now() + int64(30*time.Second)
					switch rng.IntN(10) {
					case 0, 1, 2, 3, 4, 5:
						if errs := f.del("q", m.ReceiptHandle); errs[0] != nil {
							t.Fatalf("step %d: delete %s: %v", step, b, errs[0])
						}
						deleted[b] = true
						delete(leased, b)
					case 6, 7:
						d := time.Duration(1+rng.IntN(60)) * time.Second
						if _, err := f.e.ReportFailure("q", m.ReceiptHandle, Failure{RetryAfter: d, RetryAfterSet: true}); err != nil {
							t.Fatalf("step %d: report %s: %v", step, b, err)
						}
						notBefore[b] = now() + int64(d)
						delete(leased, b)
						backoff[b] = true
					case 8:
						f.changeVis("q", m.ReceiptHandle, 0)
						notBefore[b] = now()
						delete(leased, b)
					}
				}
			case r < 99:
				f.clk.Advance(time.Duration(rng.IntN(20_000)) * time.Millisecond)
			default:
				f.restartCold()
			}
			if got, want := f.count("q"), total-len(deleted); got != want {
				t.Fatalf("step %d: count %d, want %d", step, got, want)
			}
			if h, limit := f.held("q"), 2*coldWindow+len(leased)+len(backoff)+10; h > limit {
				t.Fatalf("step %d: %d messages held, bound %d", step, h, limit)
			}
		}
		f.clk.Advance(3 * time.Minute)
		for stuck := 0; len(deleted) < total; {
			d := f.recv("q", 10, 30*time.Second)
			if len(d) == 0 {
				if stuck++; stuck > 3 {
					t.Fatalf("%d of %d deleted; count %d", len(deleted), total, f.count("q"))
				}
				f.clk.Advance(time.Minute)
				continue
			}
			for _, m := range d {
				check(-1, m)
				if errs := f.del("q", m.ReceiptHandle); errs[0] != nil {
					t.Fatalf("delete %s: %v", m.Body, errs[0])
				}
				deleted[string(m.Body)] = true
			}
		}
		if got := f.count("q"); got != 0 {
			t.Fatalf("count %d after deleting all %d", got, total)
		}
	})
}

// TestColdRetryBackoffsOutsideWindow: received messages waiting out a
// retry backoff stay in memory outside the window (like leases): however
// many there are, receives go on loading and delivering the cold backlog
// behind them, and the backoffs count as delayed.
func TestColdRetryBackoffsOutsideWindow(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendN("q", 0, 300)
		failed := 0
		for failed < 4*coldWindow {
			d := f.recv("q", 10, time.Hour)
			if len(d) == 0 {
				t.Fatalf("nothing delivered with %d messages in a retry backoff", failed)
			}
			for _, m := range d {
				if _, err := f.e.ReportFailure("q", m.ReceiptHandle, Failure{RetryAfter: 10 * time.Minute, RetryAfterSet: true}); err != nil {
					t.Fatal(err)
				}
				failed++
			}
		}
		seen := map[string]bool{}
		f.drainBounded("q", 300-failed, seen, stdColdMsgBound+failed)
		if v, d, fl := f.counts("q"); v != 0 || d != failed || fl != 0 {
			t.Fatalf("backoffs left: %d visible, %d delayed, %d in flight; want %d delayed", v, d, fl, failed)
		}
		f.clk.Advance(11 * time.Minute)
		f.drainBounded("q", failed, seen, stdColdMsgBound+failed)
		if len(seen) != 300 {
			t.Fatalf("%d distinct messages", len(seen))
		}
	})
}

// TestColdLookAheadIdleSeesNewSends: a look-ahead that found only delayed
// messages remembers it (lookAheadIdle), but a message sent after it that
// is not delayed and the end of a skipped delay each make the next receive
// look again.
func TestColdLookAheadIdleSeesNewSends(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendDelayed("q", "late", 0, 2*coldWindow, 15*time.Minute)
		f.sendDelayed("q", "soon", 0, 3, time.Minute)
		for i := 0; i < 3; i++ {
			if d := f.recv("q", 10, time.Hour); len(d) != 0 {
				t.Fatalf("delivered during the delays: %v", bodies(d))
			}
		}
		f.send("q", body("now"))
		if d := bodies(f.recv("q", 10, time.Hour)); fmt.Sprint(d) != "[now]" {
			t.Fatalf("after a send: %v", d)
		}
		if d := f.recv("q", 10, time.Hour); len(d) != 0 {
			t.Fatalf("delivered during the delays: %v", bodies(d))
		}
		f.clk.Advance(time.Minute)
		if d := bodies(f.recv("q", 10, time.Hour)); len(d) != 3 || d[0][:4] != "soon" {
			t.Fatalf("after the short delay: %v", d)
		}
		if v, d, fl := f.counts("q"); v != 0 || d != 2*coldWindow || fl != 4 {
			t.Fatalf("counts: %d visible, %d delayed, %d in flight", v, d, fl)
		}
	})
}

// TestColdDelayCountsAfterRestart: after a restart the cold part counts
// exactly the messages whose send delay has not ended as delayed — among
// visible ones, with delays ending at different times, and none of those
// deleted, purged or whose delay ended while the broker was down.
func TestColdDelayCountsAfterRestart(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", nil)
		f.sendN("q", 0, 100)
		f.sendDelayed("q", "short", 0, 50, 10*time.Second)
		f.sendN("q", 100, 100)
		f.sendDelayed("q", "long", 0, 70, 5*time.Minute)
		f.sendN("q", 200, 30)
		if v, d, _ := f.counts("q"); v != 230 || d != 120 {
			t.Fatalf("before the restart: %d visible, %d delayed", v, d)
		}
		f.restartCold()
		if v, d, _ := f.counts("q"); v != 230 || d != 120 {
			t.Fatalf("after the restart: %d visible, %d delayed", v, d)
		}
		f.clk.Advance(11 * time.Second)
		f.restartCold()
		if v, d, _ := f.counts("q"); v != 280 || d != 70 {
			t.Fatalf("after the short delays ended: %d visible, %d delayed", v, d)
		}
		seen := map[string]bool{}
		f.drainOnce("q", 280, seen)
		f.restartCold()
		if v, d, _ := f.counts("q"); v != 0 || d != 70 {
			t.Fatalf("visible drained: %d visible, %d delayed", v, d)
		}
		f.clk.Advance(5 * time.Minute)
		f.drainOnce("q", 70, seen)
		if n := f.delayRecords(); n != 0 {
			t.Fatalf("%d delay records left after every message was deleted", n)
		}
		f.sendDelayed("q", "purged", 0, 40, time.Minute)
		if err := f.e.PurgeQueue("q"); err != nil {
			t.Fatal(err)
		}
		if n := f.delayRecords(); n != 0 {
			t.Fatalf("%d delay records left after a purge", n)
		}
		f.restartCold()
		if v, d, _ := f.counts("q"); v+d != 0 {
			t.Fatalf("after purge and restart: %d visible, %d delayed", v, d)
		}
	})
}

// delayRecords counts the store's delay records.
func (f *coldFixture) delayRecords() int {
	f.t.Helper()
	n := 0
	if err := f.st.Scan([]byte{prefixDelay}, func(_, _ []byte) error { n++; return nil }); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestColdLeasesCountAfterRestart: after a restart, received messages
// beyond the first window count as in flight while their lease runs, and
// as delayed while their retry backoff runs (from their state records),
// not as visible; each is delivered once its lease or backoff ends.
func TestColdLeasesCountAfterRestart(t *testing.T) {
	coldStores(t, func(t *testing.T, f *coldFixture) {
		f.create("q", func(c *QueueConfig) {
			c.Retry = &RetryPolicy{Strategy: RetryFixed, Base: 10 * time.Minute, Cap: 10 * time.Minute}
		})
		f.sendN("q", 0, 100)
		for got := 0; got < 60; {
			d := f.recv("q", min(10, 60-got), 5*time.Minute)
			if len(d) == 0 {
				t.Fatalf("received %d of 60", got)
			}
			got += len(d)
		}
		f.restartCold()
		if v, d, fl := f.counts("q"); v != 40 || d != 0 || fl != 60 {
			t.Fatalf("leases after the restart: %d visible, %d delayed, %d in flight", v, d, fl)
		}
		if h := f.held("q"); h > coldWindow {
			t.Fatalf("%d messages held after the restart", h)
		}
		seen := map[string]bool{}
		// In-flight messages are what memory holds: the look-ahead
		// loads the cold ones it passes.
		f.drainBounded("q", 40, seen, 100)

		// The leases end while the broker runs: the messages in memory
		// start their backoff; the cold ones are loaded and do too.
		f.clk.Advance(5*time.Minute + time.Second)
		if v, d, fl := f.counts("q"); v+d+fl != 60 || fl != 0 {
			t.Fatalf("leases ended: %d visible, %d delayed, %d in flight", v, d, fl)
		}
		for range 10 {
			if d := f.recv("q", 10, time.Minute); len(d) != 0 {
				t.Fatalf("delivered %v during the backoff", bodies(d))
			}
		}
		if v, d, fl := f.counts("q"); v != 0 || d != 60 || fl != 0 {
			t.Fatalf("in their backoff: %d visible, %d delayed, %d in flight", v, d, fl)
		}
		f.restartCold()
		if v, d, fl := f.counts("q"); v != 0 || d != 60 || fl != 0 {
			t.Fatalf("backoffs after the restart: %d visible, %d delayed, %d in flight", v, d, fl)
		}
		f.clk.Advance(10 * time.Minute)
		f.drainBounded("q", 60, seen, 100)
		if len(seen) != 100 {
			t.Fatalf("%d distinct messages", len(seen))
		}
	})
}
