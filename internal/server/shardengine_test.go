package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// TestEngineCallErrorsCross: an engine error answered by another shard's
// leader arrives as the same sentinel (what the AMQP front-end tells
// apart: a queue gone, a full queue, a stale handle), with its text; an
// error without a sentinel arrives as its text.
func TestEngineCallErrorsCross(t *testing.T) {
	for _, s := range remoteSentinels {
		if s == engine.ErrNotWritten {
			continue // with ErrNotLeading alone (TestEngineCallLeadershipChangesCross)
		}
		got := toRemoteError(fmt.Errorf("queue q: %w", s)).err()
		if !errors.Is(got, s) {
			t.Errorf("%v arrived as %v", s, got)
		}
	}
	other := toRemoteError(&engine.MessageTooLargeError{Size: 9, Limit: 1}).err()
	if other == nil || errors.Is(other, engine.ErrQueueNotFound) || errors.Is(other, engine.ErrQueueFull) {
		t.Errorf("a message too large arrived as %v", other)
	}
	if toRemoteError(nil).err() != nil {
		t.Error("no error arrived as one")
	}
}

// TestEngineCallLeadershipChangesCross: a leader's engine that no longer
// leads answers with engine.ErrNotLeading wrapped in ErrStorage; the
// caller gets ErrNotLeading (not the store failure it is wrapped in), and
// tells one certain to have written nothing (ErrNotWritten: refused, or
// its proposal dropped), which it sends again to the next leader
// (leaderMoved), from one that may have been written, which it does not.
func TestEngineCallLeadershipChangesCross(t *testing.T) {
	dropped := fmt.Errorf("%w: %w", engine.ErrStorage, fmt.Errorf("%w: proposal dropped (%w)", engine.ErrNotLeading, engine.ErrNotWritten))
	refused := fmt.Errorf("%w: %w (%w)", engine.ErrStorage, errors.New("an earlier failure"), engine.ErrNotWritten)
	lost := fmt.Errorf("%w: %w: lost leadership of term 3 before the write was applied", engine.ErrStorage, engine.ErrNotLeading)
	for _, c := range []struct {
		name          string
		err           error
		leading, safe bool
	}{
		{"a dropped proposal", dropped, true, true},
		{"a write that may be in the log", lost, true, false},
		{"a failed engine's refusal, not a leadership change", refused, false, false},
		{"a store failure", fmt.Errorf("%w: disk", engine.ErrStorage), false, false},
		{"an unreachable leader", fmt.Errorf("dial: refused (%w)", ErrShardUnreachable), false, true},
	} {
		got := c.err
		if !errors.Is(c.err, ErrShardUnreachable) {
			got = toRemoteError(c.err).err()
		}
		if errors.Is(got, engine.ErrNotLeading) != c.leading || leaderMoved(got) != c.safe {
			t.Errorf("%s arrived as %v: not leading %v, sent again %v; want %v, %v",
				c.name, got, errors.Is(got, engine.ErrNotLeading), leaderMoved(got), c.leading, c.safe)
		}
	}
}

// TestEngineCallRoundTrip: a call's messages arrive whole (body, envelope,
// attributes, TTL), and a reply's results, deliveries and errors.
func TestEngineCallRoundTrip(t *testing.T) {
	msgs := []engine.Message{
		{Body: []byte("one"), Envelope: []byte{1, 2, 3}, TTL: 5, TTLSet: true,
			Attributes: []engine.Attribute{{Name: "origin", DataType: "String", StringValue: "node-1"}}},
		{Body: []byte("two")},
	}
	body, err := encodeGob(engineCall{Op: opSend, Queue: "orders", Msgs: msgs, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeEngineCall(body)
	if err != nil {
		t.Fatal(err)
	}
	if c.Op != opSend || c.Queue != "orders" || c.Wait != time.Second || len(c.Msgs) != 2 || string(c.Msgs[0].Body) != "one" ||
		!bytes.Equal(c.Msgs[0].Envelope, []byte{1, 2, 3}) || c.Msgs[0].TTL != 5 || !c.Msgs[0].TTLSet ||
		len(c.Msgs[0].Attributes) != 1 || c.Msgs[0].Attributes[0].StringValue != "node-1" || string(c.Msgs[1].Body) != "two" {
		t.Fatalf("arrived: %+v", c)
	}

	out, err := encodeGob(engineReply{Results: []remoteSendResult{{MessageID: "a"}, {Err: toRemoteError(engine.ErrQueueFull)}},
		Deliveries: []engine.Delivery{{MessageID: "m", ReceiptHandle: "h", Body: []byte("b"), ReceiveCount: 2, Redelivered: true,
			LastFailure: &engine.FailureRecord{ErrorClass: "E"}}}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := decodeEngineReply(out)
	if err != nil || rep.Results[0].MessageID != "a" || rep.Results[0].Err.err() != nil || !errors.Is(rep.Results[1].Err.err(), engine.ErrQueueFull) {
		t.Fatalf("reply: %+v, %v", rep, err)
	}
	if d := rep.Deliveries[0]; d.ReceiptHandle != "h" || string(d.Body) != "b" || d.ReceiveCount != 2 || !d.Redelivered || d.LastFailure == nil || d.LastFailure.ErrorClass != "E" {
		t.Fatalf("delivery arrived as %+v", d)
	}
	out, err = encodeGob(engineReply{Err: toRemoteError(engine.ErrNotLeading)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeEngineReply(out); !errors.Is(err, engine.ErrNotLeading) {
		t.Fatalf("a refused call arrived as %v", err)
	}
}

// TestNameCallOfAnOlderLeader: a leader that does not know a name call (a
// node of an older build, which answers every unknown call so) is told
// apart from one that failed it, so that the router lets the create go
// on without a reservation only then; a leader that knows it answers the
// shard, and its errors cross as they are.
func TestNameCallOfAnOlderLeader(t *testing.T) {
	s, stop := run(t, func() Options {
		o := DefaultOptions()
		o.DataDir = t.TempDir()
		o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
		return o
	}(), nil)
	defer stop()
	unknown, err := encodeGob(s.runEngineCall(context.Background(), engineCall{Op: "reserve-v9", Queue: "q"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NameCallReply(unknown); !errors.Is(err, ErrUnknownEngineCall) {
		t.Fatalf("an unknown call answered %v, want ErrUnknownEngineCall", err)
	}
	body, err := ReserveNameCall("fresh", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeEngineCall(body)
	if err != nil {
		t.Fatal(err)
	}
	out, err := encodeGob(s.runEngineCall(context.Background(), c))
	if err != nil {
		t.Fatal(err)
	}
	if to, err := NameCallReply(out); err != nil || to != 2 {
		t.Fatalf("a reservation answered %d, %v; want shard 2", to, err)
	}
	out, err = encodeGob(engineReply{Err: toRemoteError(engine.ErrNotLeading)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NameCallReply(out); !errors.Is(err, engine.ErrNotLeading) || errors.Is(err, ErrUnknownEngineCall) {
		t.Fatalf("a leader that stopped leading answered %v", err)
	}
}

// TestLeaseSessionsExpire: a session not heard from for the expiry gives
// back the handles it holds and not those it settled; a session heard
// from keeps them.
func TestLeaseSessionsExpire(t *testing.T) {
	var ls leaseSessions
	t0 := time.Unix(1000, 0)
	ds := []engine.Delivery{{ReceiptHandle: "a"}, {ReceiptHandle: "b"}, {ReceiptHandle: "c"}}
	ls.hold("s1", "q", ds, t0)
	ls.hold("s2", "q", ds[:1], t0)
	ls.release("s1", "q", []string{"b"}, t0)
	ls.touch("s2", t0.Add(10*time.Second))
	got := ls.expired(t0.Add(5 * time.Second))
	if len(got) != 1 || len(got["q"]) != 2 {
		t.Fatalf("expired: %v, want s1's a and c", got)
	}
	if again := ls.expired(t0.Add(5 * time.Second)); len(again) != 0 {
		t.Fatalf("expired twice: %v", again)
	}
	if last := ls.expired(t0.Add(11 * time.Second)); len(last["q"]) != 1 || last["q"][0] != "a" {
		t.Fatalf("s2 expired with %v", last)
	}
}

// FuzzEngineCallDecoders: the node-only engine path's decoders take any
// bytes without a panic, and a call they accept encodes again.
func FuzzEngineCallDecoders(f *testing.F) {
	body, err := encodeGob(engineCall{Op: opSend, Queue: "q", Msgs: []engine.Message{{Body: []byte("x"),
		Attributes: []engine.Attribute{{Name: "a", DataType: "String", StringValue: "b"}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	out, err := encodeGob(engineReply{Results: []remoteSendResult{{MessageID: "m", Err: remoteError{Sentinel: 2, Text: "full"}}},
		Deliveries: []engine.Delivery{{MessageID: "m", Body: []byte("b")}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(out)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := decodeEngineCall(data); err == nil {
			if _, err := encodeGob(c); err != nil {
				t.Fatalf("a decoded call does not encode: %v", err)
			}
		}
		rep, _ := decodeEngineReply(data)
		for _, r := range rep.Results {
			_ = r.Err.err()
		}
	})
}

// TestShardEngineReturnsASilentCallersLeases: a shard's leader that
// handed connection leases to a caller over ShardEnginePath returns those
// the caller did not settle to their queue once the caller has been silent
// for sessionExpiry (the caller died, or lost shard 0), with the
// redelivered flag; those it acknowledged stay deleted.
func TestShardEngineReturnsASilentCallersLeases(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	s, stop := startShardLeader(t, clk)
	defer stop()
	ctx := context.Background()
	acked := sessionReceive(t, s, 3, 3)[0]
	if r := s.runEngineCall(ctx, engineCall{Op: opDeleteLeased, Queue: "q", Session: "caller-1", Handles: []string{acked.ReceiptHandle}}); r.Err.err() != nil || len(r.Errs) != 1 || r.Errs[0].err() != nil {
		t.Fatalf("ack: %+v", r)
	}
	// Heard from within the expiry: kept.
	clk.Advance(sessionExpiry - time.Second)
	s.runEngineCall(ctx, engineCall{Op: opKeepalive, Queue: "q", Session: "caller-1"})
	clk.Advance(sessionExpiry - time.Second)
	if back := s.sessions.expired(clk.Now().Add(-sessionExpiry)); len(back) != 0 {
		t.Fatalf("a session heard from %v ago gave back %v", sessionExpiry-time.Second, back)
	}
	// Silent past it: the two it held come back, redelivered.
	clk.Advance(2 * time.Second)
	poll.CheckFor(t, 10*time.Second, poll.True("the silent caller's two leases are visible again", func() bool {
		info, err := s.eng.GetQueue("q")
		return err == nil && info.Visible == 2 && info.InFlight == 0
	}))
	ds, err := s.eng.Receive(ctx, "q", engine.ReceiveRequest{Max: 10, WaitSet: true})
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive after the expiry: %d, %v", len(ds), err)
	}
	for _, d := range ds {
		if d.MessageID == acked.MessageID || !d.Redelivered {
			t.Fatalf("after the expiry got %s (redelivered %v); the acknowledged one was %s", d.MessageID, d.Redelivered, acked.MessageID)
		}
	}
}

// TestRemoteKeepaliveKeepsASession: the caller's keepalive reaches the
// queue's leader every engineKeepalive, so a consumer that holds a
// delivery longer than sessionExpiry (a slow handler) keeps its lease: the
// leader, its clock moved past the expiry twice over, returns nothing
// while the pings arrive, and returns the lease once they stop.
func TestRemoteKeepaliveKeepsASession(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	holder, stop := startShardLeader(t, clk)
	defer stop()
	if _, _, err := holder.eng.CreateQueue("slow", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.eng.Send("slow", []engine.Message{{Body: []byte("long job")}}); err != nil {
		t.Fatal(err)
	}
	// The caller: a remoteEngine whose calls run on holder directly (the
	// cluster node's HTTP hop left out).
	pings := make(chan struct{}, 64)
	call := func(ctx context.Context, name, path string, body []byte) ([]byte, error) {
		c, err := decodeEngineCall(body)
		if err != nil {
			return nil, err
		}
		rep := holder.runEngineCall(ctx, c)
		if c.Op == opKeepalive {
			pings <- struct{}{}
		}
		return encodeReplyLike(body, &rep)
	}
	o2 := DefaultOptions()
	o2.DataDir = t.TempDir()
	o2.SQSListen, o2.AMQPListen = "127.0.0.1:0", ""
	caller, stop2 := run(t, o2, nil) // its engine holds no queue "slow"
	defer stop2()
	_, r := newRemoteEngine(caller.eng, Options{NameTaken: func(string) bool { return true }, ShardCall: call}, holder.log)
	if _, err := r.GetQueue("slow"); err != nil {
		t.Fatal(err)
	}
	ds, err := r.Receive(context.Background(), "slow", engine.ReceiveRequest{Max: 1, Visibility: time.Hour, VisibilitySet: true, WaitSet: true, Session: true})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.keepalive(ctx); close(done) }()
	for range 2 {
		clk.Advance(sessionExpiry - time.Second)
		<-pings // a ping after the advance: heard from at the new time
	}
	// The leader's sweeps since (its clock now twice the expiry past the
	// receive) left the lease in flight.
	from := holder.sessions.sweeps.Load()
	poll.CheckFor(t, 10*time.Second, poll.True("two sweeps of the sessions", func() bool { return holder.sessions.sweeps.Load() >= from+2 }))
	if info, err := holder.eng.GetQueue("slow"); err != nil || info.Visible != 0 || info.InFlight != 1 {
		t.Fatalf("a session kept alive lost its lease: %+v, %v", info, err)
	}
	cancel()
	<-done
	clk.Advance(sessionExpiry + time.Second)
	poll.CheckFor(t, 10*time.Second, poll.True("the lease is back once the pings stopped", func() bool {
		info, err := holder.eng.GetQueue("slow")
		return err == nil && info.Visible == 1
	}))
}

// startShardLeader runs a server as a shard's leader runs (ShardViews:
// the node-only paths), on clk, without AMQP.
func startShardLeader(t *testing.T, clk clock.Clock) (*Server, func()) {
	t.Helper()
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	o.ShardViews = true
	return run(t, o, clk)
}

// TestRemoteVisibleHint: for a queue on another shard, the router's
// VisibleHint (what AMQP publisher flow control reads) is the ready count
// its leader reported with its last answer: none before any call, then
// after sends and a receive the queue's count at that leader.
func TestRemoteVisibleHint(t *testing.T) {
	holder, stop := startShardLeader(t, nil)
	defer stop()
	if _, _, err := holder.eng.CreateQueue("hinted", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	call, caller, stop2 := directCaller(t, holder)
	defer stop2()
	_, r := newRemoteEngine(caller.eng, Options{NameTaken: func(string) bool { return true }, ShardCall: call}, holder.log)
	if _, ok := r.VisibleHint("hinted"); ok {
		t.Fatal("a hint for a queue not looked up yet")
	}
	if _, err := r.GetQueue("hinted"); err != nil {
		t.Fatal(err)
	}
	if n, ok := r.VisibleHint("hinted"); !ok || n != 0 {
		t.Fatalf("hint after the lookup: %d, %v; want 0", n, ok)
	}
	msgs := make([]engine.Message, 5)
	for i := range msgs {
		msgs[i] = engine.Message{Body: []byte{byte('a' + i)}}
	}
	if _, err := r.Send("hinted", msgs); err != nil {
		t.Fatal(err)
	}
	if n, ok := r.VisibleHint("hinted"); !ok || n != 5 {
		t.Fatalf("hint after five sends: %d, %v; want 5", n, ok)
	}
	// Messages sent at the leader by others show with the next answer.
	if _, err := holder.eng.Send("hinted", msgs[:2]); err != nil {
		t.Fatal(err)
	}
	ds, err := r.Receive(context.Background(), "hinted", engine.ReceiveRequest{Max: 3, WaitSet: true, Session: true})
	if err != nil || len(ds) != 3 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	if n, ok := r.VisibleHint("hinted"); !ok || n != 4 {
		t.Fatalf("hint after 7 sent and 3 received: %d, %v; want 4", n, ok)
	}
}

// TestShardEngineRefusesAcksOfLeasesItDidNotGrant: an ack (opDeleteLeased
// with a session) of a delivery that this leader's sessions do not hold —
// one a previous leader of the shard handed out, whose lease died with
// that leadership, or one whose session expired — fails as a call
// instead of answering success without deleting: the caller's AMQP
// client would otherwise take that ack for applied, and then see the
// message again (the fault harness caught it: 13 acks proved by basic.qos
// and followed by redeliveries after a leadership transfer of the
// queue's shard). An ack of a delivery a session holds still deletes it,
// under any of the caller's sessions.
func TestShardEngineRefusesAcksOfLeasesItDidNotGrant(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	s, stop := startShardLeader(t, clk)
	defer stop()
	ctx := context.Background()
	held := sessionReceive(t, s, 2, 1)[0]
	// A delivery no session here holds: as a new leader sees one that
	// its predecessor handed out (here, one taken outside the sessions).
	other, err := s.eng.Receive(ctx, "q", engine.ReceiveRequest{Max: 1, WaitSet: true, Session: true})
	if err != nil || len(other) != 1 {
		t.Fatalf("receive outside the sessions: %d, %v", len(other), err)
	}
	r := s.runEngineCall(ctx, engineCall{Op: opDeleteLeased, Queue: "q", Session: "caller-1", Handles: []string{held.ReceiptHandle, other[0].ReceiptHandle}})
	if err := r.Err.err(); !errors.Is(err, engine.ErrNotLeading) {
		t.Fatalf("an ack including a delivery no session holds: %v, want a call error (ErrNotLeading)", err)
	}
	if info, _ := s.eng.GetQueue("q"); info.InFlight != 2 {
		t.Fatalf("the refused ack changed the queue: %+v", info)
	}
	// The held one, acknowledged under the caller's next session: deleted.
	r = s.runEngineCall(ctx, engineCall{Op: opDeleteLeased, Queue: "q", Session: "caller-2", Handles: []string{held.ReceiptHandle}})
	if r.Err.err() != nil || len(r.Errs) != 1 || r.Errs[0].err() != nil {
		t.Fatalf("ack of a held delivery: %+v", r)
	}
	if info, _ := s.eng.GetQueue("q"); info.InFlight != 1 {
		t.Fatalf("after the ack: %+v", info)
	}
	// The ack took the handle out of caller-1's session: its expiry has
	// nothing of it left to return.
	if back := s.sessions.expired(clk.Now().Add(time.Second)); len(back) != 0 {
		t.Fatalf("the expired sessions gave back %v after the ack", back)
	}
}

// sessionReceive creates queue "q" on s's engine, sends it n messages and
// receives max of them as connection leases of session "caller-1", as
// shard 0's router does for an AMQP consumer.
func sessionReceive(t *testing.T, s *Server, n, max int) []engine.Delivery {
	t.Helper()
	if _, _, err := s.eng.CreateQueue("q", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	ms := make([]engine.Message, n)
	for i := range ms {
		ms[i].Body = []byte(strconv.Itoa(i + 1))
	}
	if _, err := s.eng.Send("q", ms); err != nil {
		t.Fatal(err)
	}
	rep := s.runEngineCall(context.Background(), engineCall{Op: opReceive, Queue: "q", Session: "caller-1", Max: max,
		Visibility: time.Hour, VisibilitySet: true, WaitSet: true, SessionLease: true})
	if err := rep.Err.err(); err != nil || len(rep.Deliveries) != max {
		t.Fatalf("receive: %d deliveries, %v", len(rep.Deliveries), err)
	}
	return rep.Deliveries
}

// TestRemoteSendFindsAQueueMadeAgain: a queue of another shard that the
// router forgot (its leader answered "no such queue": deleted there) and
// that was made again is sent to there again, through Send and SendMany,
// instead of being dropped as missing by this shard's engine.
func TestRemoteSendFindsAQueueMadeAgain(t *testing.T) {
	clk := clock.NewFake(time.Now())
	holder, stop := startShardLeader(t, clk)
	defer stop()
	if _, _, err := holder.eng.CreateQueue("again", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	call, caller, stop2 := directCaller(t, holder)
	defer stop2()
	if _, _, err := caller.eng.CreateQueue("local", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	exists := true
	_, r := newRemoteEngine(caller.eng, Options{NameTaken: func(n string) bool { return n == "again" && exists }, ShardCall: call}, holder.log)
	if _, err := r.GetQueue("again"); err != nil {
		t.Fatal(err)
	}
	msg := []engine.Message{{Body: []byte("x")}}
	if err := holder.eng.DeleteQueue("again"); err != nil {
		t.Fatal(err)
	}
	exists = false
	if _, err := r.Send("again", msg); !errors.Is(err, engine.ErrQueueNotFound) {
		t.Fatalf("send to the deleted queue: %v, want ErrQueueNotFound", err)
	}
	clk.Advance(engine.NameReuseDelay + time.Second)
	if _, _, err := holder.eng.CreateQueue("again", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	exists = true
	if res, err := r.Send("again", msg); err != nil || res[0].Err != nil {
		t.Fatalf("send to the queue made again: %v, %+v", err, res)
	}
	// Forgotten again, then a publish routed to it and to a local queue.
	if err := holder.eng.DeleteQueue("again"); err != nil {
		t.Fatal(err)
	}
	exists = false
	if _, err := r.Send("again", msg); !errors.Is(err, engine.ErrQueueNotFound) {
		t.Fatalf("send to the deleted queue: %v", err)
	}
	clk.Advance(engine.NameReuseDelay + time.Second)
	if _, _, err := holder.eng.CreateQueue("again", engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}
	exists = true
	out, err := r.SendMany([]engine.QueueSend{{Queue: "local", Msgs: msg}, {Queue: "again", Msgs: msg}})
	if err != nil || out[0].Err != nil || out[1].Err != nil {
		t.Fatalf("send many: %v, %+v", err, out)
	}
	if info, err := holder.eng.GetQueue("again"); err != nil || info.Visible != 1 {
		t.Fatalf("the queue made again holds %+v, %v; want the one message of the SendMany", info, err)
	}
}

// directCaller starts a server with no queues that plays another shard's
// caller of holder, and returns a ShardCall that runs each call on holder
// directly (the cluster node's HTTP hop left out).
func directCaller(t *testing.T, holder *Server) (call func(ctx context.Context, name, path string, body []byte) ([]byte, error), caller *Server, stop func()) {
	t.Helper()
	call = func(ctx context.Context, name, path string, body []byte) ([]byte, error) {
		c, err := decodeEngineCall(body)
		if err != nil {
			return nil, err
		}
		rep := holder.runEngineCall(ctx, c)
		return encodeReplyLike(body, &rep)
	}
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	caller, stop = run(t, o, nil)
	return call, caller, stop
}

// TestRemoteCallsFindAQueueMadeAgain: after the router forgot a queue of
// another shard (its leader answered "no such queue"), every kind of call
// on the queue made again reaches it, not only a send.
func TestRemoteCallsFindAQueueMadeAgain(t *testing.T) {
	clk := clock.NewFake(time.Now())
	holder, stop := startShardLeader(t, clk)
	defer stop()
	call, caller, stop2 := directCaller(t, holder)
	defer stop2()
	exists := false
	_, r := newRemoteEngine(caller.eng, Options{NameTaken: func(n string) bool { return n == "again" && exists }, ShardCall: call}, holder.log)
	// remake deletes the queue (if any), has r forget it, and makes it
	// again holding one message.
	remake := func() {
		t.Helper()
		if exists {
			if err := holder.eng.DeleteQueue("again"); err != nil {
				t.Fatal(err)
			}
			exists = false
			if _, err := r.PurgeReady("again"); !errors.Is(err, engine.ErrQueueNotFound) {
				t.Fatalf("purge of the deleted queue: %v, want ErrQueueNotFound", err)
			}
			clk.Advance(engine.NameReuseDelay + time.Second)
		}
		if _, _, err := holder.eng.CreateQueue("again", engine.DefaultQueueConfig(), nil); err != nil {
			t.Fatal(err)
		}
		exists = true
		if _, err := holder.eng.Send("again", []engine.Message{{Body: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	remake()
	if _, err := r.GetQueue("again"); err != nil {
		t.Fatal(err)
	}
	remake()
	ds, err := r.Receive(context.Background(), "again", engine.ReceiveRequest{Max: 1, Wait: 0, WaitSet: true})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive from the queue made again: %d deliveries, %v", len(ds), err)
	}
	if errs, err := r.Delete("again", []string{ds[0].ReceiptHandle}); err != nil || errs[0] != nil {
		t.Fatalf("delete: %v, %v", err, errs)
	}
	remake()
	if n, err := r.PurgeReady("again"); err != nil || n != 1 {
		t.Fatalf("purge of the queue made again: %d, %v; want 1", n, err)
	}
	remake()
	if err := r.UpdateQueue("again", func(*engine.QueueConfig) error { return nil }); !errors.Is(err, engine.ErrQueueElsewhere) {
		t.Fatalf("update of the queue made again: %v, want ErrQueueElsewhere", err)
	}
	remake()
	if err := r.DeleteQueue("again"); err != nil {
		t.Fatalf("delete of the queue made again: %v", err)
	}
	if _, err := holder.eng.GetQueue("again"); !errors.Is(err, engine.ErrQueueNotFound) {
		t.Fatalf("the queue made again after its delete: %v", err)
	}
}

// TestRemoteCallsEndWhenTheServerCloses: a call to another shard's leader
// that does not answer (a requeue of an AMQP connection's deliveries, made
// while the server shuts down) ends remoteGrace after the shutdown began
// (here a moment), not after its own 30 s: a leadership of shard 0 whose
// server is closing cannot hold up the node's next one for so long.
func TestRemoteCallsEndWhenTheServerCloses(t *testing.T) {
	call := func(ctx context.Context, _, _ string, body []byte) ([]byte, error) {
		c, err := decodeEngineCall(body)
		if err != nil {
			return nil, err
		}
		if c.Op == opGetQueue {
			return encodeReplyLike(body, &engineReply{Info: engine.QueueInfo{Name: c.Queue}})
		}
		<-ctx.Done() // a leader that does not answer
		return nil, ctx.Err()
	}
	eng, err := engine.Open(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	_, r := newRemoteEngine(eng, Options{NameTaken: func(string) bool { return true }, ShardCall: call}, slog.New(slog.DiscardHandler))
	if _, err := r.GetQueue("far"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Requeue("far", []string{"handle"}, true)
		done <- err
	}()
	defer r.closing(time.Millisecond)()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the requeue ended with %v, want its call cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits 10 s after the shutdown began")
	}
}
