package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
)

// powerFixture is an engine on a powerStore, so a test can hold fsyncs,
// fail them, and cut the power.
type powerFixture struct {
	*fixture
	ps     *powerStore
	sync   time.Duration
	window int // Options.ReadyWindow
}

// newPowerFixture opens an engine whose background sync runs every
// syncEvery (use an hour to keep unsynced writes unsynced).
func newPowerFixture(t *testing.T, syncEvery time.Duration) *powerFixture {
	t.Helper()
	pf := &powerFixture{ps: newPowerStore(), sync: syncEvery}
	pf.fixture = &fixture{t: t, st: pf.ps, clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	pf.reopen()
	return pf
}

func (pf *powerFixture) reopen() {
	pf.t.Helper()
	e, err := Open(Options{Store: pf.ps, Clock: pf.clk, SyncInterval: pf.sync, ReadyWindow: pf.window})
	if err != nil {
		pf.t.Fatalf("open: %v", err)
	}
	pf.e = e
	pf.t.Cleanup(func() { e.Close() })
}

// powerCut crashes the store and opens a new engine on what survived.
func (pf *powerFixture) powerCut() {
	pf.t.Helper()
	pf.e.Close()
	pf.ps = pf.ps.crash()
	pf.st = pf.ps
	pf.reopen()
}

// TestDedupHitWaitsForOriginalSync (issue #10, hole 1): a FIFO send whose
// dedup id matches a send still waiting for its fsync must not be
// acknowledged before that fsync; when the fsync fails, the duplicate
// fails too instead of reporting a message that is not stored.
func TestDedupHitWaitsForOriginalSync(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q.fifo", fifoCfg)
	pf.ps.holdSyncs()
	msg := Message{Body: []byte("a"), GroupID: "g", DedupID: "d1"}
	first := make(chan error, 1)
	go func() { _, err := pf.e.Send("q.fifo", []Message{msg}); first <- err }()
	poll.CheckFor(t, 20*time.Second, poll.True("the first send to wait for its fsync", func() bool { return pf.ps.held() == 1 }))
	second := make(chan error, 1)
	go func() {
		res, err := pf.e.Send("q.fifo", []Message{msg})
		if err == nil {
			err = res[0].Err
		}
		second <- err
	}()
	// Either the duplicate answered (the bug) or it waits for a sync.
	var secondErr error
	answered := false
	poll.CheckFor(t, 20*time.Second, poll.True("the duplicate to answer or wait", func() bool {
		select {
		case secondErr = <-second:
			answered = true
			return true
		default:
			return pf.ps.held() == 2
		}
	}))
	if answered {
		t.Fatalf("duplicate acknowledged (err=%v) while the original's fsync was still pending", secondErr)
	}
	pf.ps.releaseSyncs(syscall.EIO)
	if err := <-first; !errors.Is(err, ErrStorage) {
		t.Fatalf("first send: %v, want ErrStorage", err)
	}
	if err := <-second; !errors.Is(err, ErrStorage) {
		t.Fatalf("duplicate send: %v, want ErrStorage (its original was never stored)", err)
	}
}

// TestRetriedDeleteWaitsForSync (issue #10, hole 2): a delete retried
// while the first delete waits for its fsync is acknowledged only with
// that fsync; after a power cut at that moment the message is back and
// the retry was not told otherwise.
func TestRetriedDeleteWaitsForSync(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q", nil)
	pf.send("q", body("a"))
	d := pf.recv("q", 1, time.Minute)
	pf.ps.holdSyncs()
	first := make(chan error, 1)
	go func() { _, err := pf.e.Delete("q", []string{d[0].ReceiptHandle}); first <- err }()
	poll.CheckFor(t, 20*time.Second, poll.True("the first delete to wait for its fsync", func() bool { return pf.ps.held() == 1 }))
	retry := make(chan error, 1)
	go func() { _, err := pf.e.Delete("q", []string{d[0].ReceiptHandle}); retry <- err }()
	answered := false
	var retryErr error
	poll.CheckFor(t, 20*time.Second, poll.True("the retried delete to answer or wait", func() bool {
		select {
		case retryErr = <-retry:
			answered = true
			return true
		default:
			return pf.ps.held() == 2
		}
	}))
	if answered {
		t.Fatalf("retried delete acknowledged (err=%v) before the delete's fsync", retryErr)
	}
	pf.ps.releaseSyncs(syscall.EIO)
	if err := <-first; !errors.Is(err, ErrStorage) {
		t.Fatalf("first delete: %v, want ErrStorage", err)
	}
	if err := <-retry; !errors.Is(err, ErrStorage) {
		t.Fatalf("retried delete: %v, want ErrStorage", err)
	}
}

// TestDeleteAfterLostLease (issue #10, hole 3): a lease that a crash lost
// (leases are written without a sync) leaves the consumer with a handle
// newer than the stored state. Deleting with it deletes the message.
func TestDeleteAfterLostLease(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q", nil)
	pf.send("q", body("a"), body("b"))
	d := pf.recv("q", 2, time.Minute)
	if len(d) != 2 {
		t.Fatalf("received %d", len(d))
	}
	pf.powerCut() // the leases were never synced
	if errs := pf.del("q", d[0].ReceiptHandle); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// The other message is received again (its lease was lost too), and
	// its old handle, now older than the new lease, no longer deletes
	// it: the new consumer's lease stands.
	again := pf.recv("q", 10, time.Minute)
	if len(again) != 1 || string(again[0].Body) != "b" {
		t.Fatalf("after the lost-lease delete, received %v, want only b", bodies(again))
	}
	pf.del("q", d[1].ReceiptHandle)
	if info, _ := pf.e.GetQueue("q"); info.InFlight != 1 {
		t.Fatalf("a stale handle deleted a live lease: %+v", info)
	}
	pf.powerCut()
	pf.clk.Advance(2 * time.Minute)
	left := pf.recv("q", 10, time.Minute)
	if len(left) != 1 || string(left[0].Body) != "b" {
		t.Fatalf("after a second power cut, received %v, want only b", bodies(left))
	}
}

// TestDeleteAfterLostLeaseFIFO: on a FIFO queue the lost lease's handle
// deletes while no one else holds the message; once it is leased again,
// the old handle is expired (the group is in other hands).
func TestDeleteAfterLostLeaseFIFO(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q.fifo", fifoCfg)
	pf.send("q.fifo", Message{Body: []byte("a"), GroupID: "g", DedupID: "1"}, Message{Body: []byte("b"), GroupID: "g", DedupID: "2"})
	d := pf.recv("q.fifo", 1, time.Minute)
	pf.powerCut()
	if errs := pf.del("q.fifo", d[0].ReceiptHandle); errs[0] != nil {
		t.Fatal(errs[0])
	}
	next := pf.recv("q.fifo", 1, time.Minute)
	if len(next) != 1 || string(next[0].Body) != "b" {
		t.Fatalf("received %v, want b (a was deleted)", bodies(next))
	}
	pf.powerCut()
	again := pf.recv("q.fifo", 1, time.Minute) // b again, receive count 1 again
	if len(again) != 1 || string(again[0].Body) != "b" {
		t.Fatalf("received %v, want b", bodies(again))
	}
	pf.send("q.fifo", Message{Body: []byte("c"), GroupID: "h", DedupID: "3"})
	// next's handle has the same receive count as the new lease: it is
	// a stale handle for a message someone else holds now.
	if errs := pf.del("q.fifo", next[0].ReceiptHandle); !errors.Is(errs[0], ErrReceiptHandleExpired) {
		t.Fatalf("old handle of a re-leased FIFO message: %v, want ErrReceiptHandleExpired", errs[0])
	}
}

// TestIdleLeaseSyncedWithinInterval (issue #10, hole 3): an unsynced
// lease reaches the disk within the sync interval even when nothing else
// is written, so a crash after that keeps it.
func TestIdleLeaseSyncedWithinInterval(t *testing.T) {
	pf := newPowerFixture(t, 10*time.Millisecond)
	pf.create("q", nil)
	pf.send("q", body("a"))
	if got := pf.recv("q", 1, time.Minute); len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	poll.CheckFor(t, 20*time.Second, poll.True("the background sync", func() bool { return !pf.ps.pendingSync() }))
	pf.powerCut()
	if got := pf.recv("q", 1, -1); len(got) != 0 {
		t.Fatalf("lease lost although it was synced: received %v", bodies(got))
	}
	pf.clk.Advance(time.Minute)
	got := pf.recv("q", 1, time.Minute)
	if len(got) != 1 || got[0].ReceiveCount != 2 {
		t.Fatalf("after the lease: %+v", got)
	}
}

// FuzzDecodeReceipt: receipt handles come from clients. The decoder never
// panics, accepts only the two documented shapes, round-trips what the
// engine issues, and a version 2 handle passes the MAC check only if it is
// exactly one the key issued.
func FuzzDecodeReceipt(f *testing.F) {
	key := newReceiptSigner(bytes.Repeat([]byte{7}, 32))
	m := &message{seq: 7, receipt: 99, recvCount: 3, id: newID()}
	issued := encodeReceipt(key, 1, m)
	f.Add(issued)
	f.Add("AQAAAAEAAAAAAAAABwAAAAAAAABj") // version 1
	f.Add("")
	f.Add("garbage")
	f.Add(strings.Repeat("A", 60))
	f.Fuzz(func(t *testing.T, s string) {
		h, ok := decodeReceipt(s)
		if !ok {
			return
		}
		if len(s) != 28 && len(s) != 60 {
			t.Fatalf("accepted a %d-char handle", len(s))
		}
		if !h.v2 {
			return
		}
		m := &message{seq: h.seq, receipt: h.receipt, recvCount: int32(h.count)}
		binary.BigEndian.PutUint64(m.id[:8], h.idTag)
		again := encodeReceipt(key, h.qid, m)
		if h.validMAC(key) != (again == s) {
			t.Fatalf("MAC check %v for %q, issued %q", h.validMAC(key), s, again)
		}
		if got, _ := decodeReceipt(again); got.qid != h.qid || got.seq != h.seq || got.receipt != h.receipt || got.count != h.count || got.idTag != h.idTag {
			t.Fatalf("round trip %+v != %+v", got, h)
		}
	})
}

// TestForgedLostLeaseHandleDeletesNothing: the lost-lease rule trusts a
// handle's receive count only with a valid MAC, so a client that knows a
// message's id and sequence number cannot delete it without receiving it.
func TestForgedLostLeaseHandleDeletesNothing(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q.fifo", fifoCfg)
	res := pf.send("q.fifo", Message{Body: []byte("a"), GroupID: "g", DedupID: "1"})
	q, _ := pf.e.lookup("q.fifo")
	m := q.msgs[1]
	forged := &message{seq: 1, receipt: 12345, recvCount: 5, id: m.id}
	if errs := pf.del("q.fifo", encodeReceipt(newReceiptSigner(bytes.Repeat([]byte{1}, 32)), q.id, forged)); !errors.Is(errs[0], ErrReceiptHandleExpired) {
		t.Fatalf("forged handle: %v, want ErrReceiptHandleExpired", errs[0])
	}
	if got := pf.recv("q.fifo", 1, time.Minute); len(got) != 1 || got[0].MessageID != res[0].MessageID {
		t.Fatalf("the message is gone after a forged delete: %v", bodies(got))
	}
}

// TestAcknowledgedChangesSurvivePowerCut: visibility changes, failure
// reports and queue administration are acknowledged only once synced: a
// power cut right after each OK (the background sync never runs here)
// keeps it.
func TestAcknowledgedChangesSurvivePowerCut(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q", nil)
	pf.create("p", nil)
	pf.create("gone", nil)
	pf.send("q", body("a"), body("b"))
	pf.send("p", body("purged"))
	d := pf.recv("q", 2, time.Second)
	if len(d) != 2 {
		t.Fatalf("received %d", len(d))
	}
	// The leases are lost in the first cut; their handles still work for
	// visibility changes only while current, so the receive is synced
	// first.
	if err := pf.ps.Sync(); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		do    func() error
		check func() string
	}{
		{"CreateQueue", func() error {
			cfg := DefaultQueueConfig()
			cfg.Visibility = 17 * time.Second
			_, _, err := pf.e.CreateQueue("fresh", cfg, map[string]string{"k": "v"})
			return err
		}, func() string {
			info, err := pf.e.GetQueue("fresh")
			if err != nil {
				return "created queue lost: " + err.Error()
			}
			if info.Config.Visibility != 17*time.Second || info.Tags["k"] != "v" {
				return fmt.Sprintf("created queue's settings lost: %v %v", info.Config.Visibility, info.Tags)
			}
			return ""
		}},
		{"ChangeVisibility", func() error {
			errs, err := pf.e.ChangeVisibility("q", []VisibilityChange{{ReceiptHandle: d[0].ReceiptHandle, Timeout: time.Hour}})
			return errors.Join(err, errs[0])
		}, nil},
		{"ReportFailure", func() error {
			_, err := pf.e.ReportFailure("q", d[1].ReceiptHandle, Failure{ErrorClass: "KeyError", RetryAfter: time.Hour, RetryAfterSet: true})
			return err
		}, func() string {
			pf.clk.Advance(time.Minute) // the original 1 s leases would have ended
			if got := pf.recv("q", 10, -1); len(got) != 0 {
				return fmt.Sprintf("extended or failed messages visible: %v", bodies(got))
			}
			return ""
		}},
		{"UpdateQueue", func() error {
			return pf.e.UpdateQueue("q", func(c *QueueConfig) error { c.Visibility = 42 * time.Second; return nil })
		}, func() string {
			if info, _ := pf.e.GetQueue("q"); info.Config.Visibility != 42*time.Second {
				return "visibility setting lost"
			}
			return ""
		}},
		{"TagQueue", func() error { return pf.e.TagQueue("q", map[string]string{"team": "x"}) }, func() string {
			if info, _ := pf.e.GetQueue("q"); info.Tags["team"] != "x" {
				return "tag lost"
			}
			return ""
		}},
		{"PurgeQueue", func() error { return pf.e.PurgeQueue("p") }, func() string {
			if got := pf.recv("p", 10, -1); len(got) != 0 {
				return fmt.Sprintf("purged messages back: %v", bodies(got))
			}
			return ""
		}},
		{"DeleteQueue", func() error { return pf.e.DeleteQueue("gone") }, func() string {
			if _, err := pf.e.GetQueue("gone"); !errors.Is(err, ErrQueueNotFound) {
				return "deleted queue back"
			}
			return ""
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		pf.powerCut()
		if st.check != nil {
			if msg := st.check(); msg != "" {
				t.Fatalf("after %s and a power cut: %s", st.name, msg)
			}
		}
	}
}

// TestDeleteLeasedUnsynced: AMQP's acks are written without a sync. They
// take effect at once; a power cut before any sync brings the messages
// back (at-least-once), and once Sync returned they stay deleted.
func TestDeleteLeasedUnsynced(t *testing.T) {
	pf := newPowerFixture(t, time.Hour)
	pf.create("q", nil)
	pf.send("q", body("a"), body("b"))
	d := pf.recv("q", 2, time.Minute)
	if len(d) != 2 {
		t.Fatalf("received %d", len(d))
	}
	errs, err := pf.e.DeleteLeasedUnsynced("q", []string{d[0].ReceiptHandle, d[1].ReceiptHandle})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("DeleteLeasedUnsynced: %v %v", errs, err)
	}
	if info, _ := pf.e.GetQueue("q"); info.InFlight != 0 || info.Visible != 0 {
		t.Fatalf("the acks did not take effect at once: %+v", info)
	}
	if !pf.ps.pendingSync() {
		t.Fatal("the acks were synced: nothing is left to lose")
	}
	pf.powerCut()
	if got := pf.recv("q", 10, time.Minute); len(got) != 2 {
		t.Fatalf("after a power cut before any sync, received %v; want both back", bodies(got))
	}

	// Now acked again, and synced: they stay deleted.
	pf.clk.Advance(2 * time.Minute)
	d = pf.recv("q", 2, time.Minute)
	if len(d) != 2 {
		t.Fatalf("received %d again", len(d))
	}
	if _, err := pf.e.DeleteLeasedUnsynced("q", []string{d[0].ReceiptHandle, d[1].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if err := pf.e.Sync(); err != nil {
		t.Fatal(err)
	}
	pf.powerCut()
	pf.clk.Advance(2 * time.Minute)
	if got := pf.recv("q", 10, time.Minute); len(got) != 0 {
		t.Fatalf("after Sync and a power cut, received %v; want nothing", bodies(got))
	}
}

// TestUnsyncedAckSyncedWithinInterval: an ack written without a sync, with
// nothing written after it, is made durable by the background sync
// (guarantees.md: at the latest SyncInterval plus one fsync later).
func TestUnsyncedAckSyncedWithinInterval(t *testing.T) {
	pf := newPowerFixture(t, 10*time.Millisecond)
	pf.create("q", nil)
	pf.send("q", body("a"))
	d := pf.recv("q", 1, time.Minute)
	if len(d) != 1 {
		t.Fatalf("received %d", len(d))
	}
	// The receive's lease is synced first: the syncer is idle when the
	// ack comes, and only the ack's write can wake it.
	poll.CheckFor(t, 20*time.Second, poll.True("the lease's background sync", func() bool { return !pf.ps.pendingSync() }))
	if _, err := pf.e.DeleteLeasedUnsynced("q", []string{d[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	poll.CheckFor(t, 20*time.Second, poll.True("the ack's background sync", func() bool { return !pf.ps.pendingSync() }))
	pf.powerCut()
	pf.clk.Advance(2 * time.Minute)
	if got := pf.recv("q", 10, time.Minute); len(got) != 0 {
		t.Fatalf("the ack was lost although the background sync ran: received %v", bodies(got))
	}
}
