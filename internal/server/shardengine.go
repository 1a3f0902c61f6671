package server

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// AMQP over a cluster's shards (ADR 0015 step 4, in the manner of step
// 3's smaller router). The AMQP server lives on shard 0's leader. For a
// queue that another shard holds (an SQS queue placed there), its engine
// calls go, through the cluster node (Options.ShardCall), to a node-only
// path of that shard's leader, which runs them on its engine: this file is
// that path's wire and its server side; remote.go is the caller's.
//
// Deliveries to AMQP consumers are leases of that leader's engine bound
// to a connection (ReceiveRequest.Session, ADR 0014). The leader keeps,
// per caller session, the handles it handed out and not yet saw settled;
// a caller keeps its sessions alive (engineKeepalive), and a session not
// heard from for sessionExpiry has its leases returned to the front of
// their queues, as a closed connection's are: a caller that died, or lost
// its leadership of shard 0, loses nothing it held.

// ErrNotElsewhere is Options.ShardCall's answer when no other shard
// holds the queue.
var ErrNotElsewhere = errors.New("server: no other shard holds the queue")

// ErrShardUnreachable is wrapped by Options.ShardCall's and ShardCreate's
// errors when no connection to the called shard's leader could be made
// (refused, timed out, or its node handshake failed: a leader that
// stopped, or is stopping as its leadership moves): nothing of the call
// was sent, and it may be made again to the next leader. A call that
// failed otherwise (cut for a new leader, answered 503 by a node on the
// way) may have run, and is not.
var ErrShardUnreachable = errors.New("server: no connection to the shard's leader could be made")

// ShardEnginePath is the node-only path (Options.ShardViews) on which a
// shard's leader runs engine calls for one of its queues: a POST whose
// body is an engineCall, answered with an engineReply, both in the binary
// wire of enginewire.go (or both in gob, from a caller of an older build).
const ShardEnginePath = "/sluice/internal/shard/engine"

// Bounds of one ShardEnginePath request: what a caller puts in one send
// (it splits a larger batch) and what a leader reads. A message is never
// split; the queues a send can reach are SQS queues, whose messages are at
// most engine.MaxMaxMessageSize (a larger one fails without a call). A
// transfer (transfer.go) may carry an AMQP dead letter up to
// engine.MaxStoredMessageSize, alone in its call when it is over
// ShardSendChunk: the bound lets it through. Only nodes holding the
// cluster secret reach the path.
const (
	ShardSendChunk      = 4 << 20
	maxShardEngineBody  = 2*ShardSendChunk + engine.MaxStoredMessageSize + 1<<20
	maxShardEngineReply = 64 << 20
)

// Session bounds: a caller pings every engineKeepalive; a leader returns
// the leases of a session it has not heard from for sessionExpiry.
const (
	engineKeepalive = 2 * time.Second
	sessionExpiry   = 15 * time.Second
)

// Engine call operations.
const (
	opSend         = "send"
	opReceive      = "receive"
	opDelete       = "delete"
	opDeleteLeased = "delete-leased"
	opRequeue      = "requeue"
	opNack         = "nack"
	opAbandon      = "abandon"
	opReject       = "reject"
	opLeaseEnd     = "lease-end"
	opGetQueue     = "get-queue"
	opPurgeReady   = "purge-ready"
	opDeleteQueue  = "delete-queue"
	opKeepalive    = "keepalive"
	opImport       = "import"  // transfer.go
	opRoute        = "route"   // dead letters to route, to shard 0 (transfer.go)
	opReserve      = "reserve" // a new queue's name, on the shard it hashes to (ReserveNameCall)
	opHoldDeleted  = "hold-deleted"
	opPlaceHeld    = "place-held" // shard 0's placements of a shard's queues (PlacementsCall)
	opPlaceGone    = "place-gone"
	opPlaceDeleted = "place-deleted" // a queue its shard's leader deleted (PlacementDeletedCall)
	opCreate       = "create"        // a queue the AMQP server declares, placed on this shard (createCall)
	opAdoptSources = "adopt-sources" // queues of a shard whose dead letters shard 0 routes (AdoptSourcesCall)
)

// engineCall is one engine call for Queue (enginewire.go).
type engineCall struct {
	Op      string
	Queue   string
	Session string // the caller's session (receive, settlements, keepalive)
	Msgs    []engine.Message
	Handles []string
	Front   bool
	Failure engine.Failure
	// Receive's request (its callbacks and reused array stay with the
	// caller).
	Max                    int
	Visibility, Wait       time.Duration
	VisibilitySet, WaitSet bool
	SessionLease           bool
	// Dead letters from another shard (transfer.go).
	Transfers []engine.Transfer
	// A name reservation (opReserve): the shard the create goes to, and
	// the shard of the called leader; a placement update (opPlaceHeld,
	// opPlaceGone, opPlaceDeleted): the shard whose queue names Handles
	// lists. opPlaceDeleted carries the delete's time in Wait, as a
	// duration since the Unix epoch (the wire has no time field, and one
	// added would break older nodes' decoding of every call).
	Shard, Own int
}

// engineReply is the answer to an engineCall (enginewire.go): Err for the whole
// call, else what its operation returns.
type engineReply struct {
	Err        remoteError
	Errs       []remoteError
	Results    []remoteSendResult
	Deliveries []engine.Delivery
	Info       engine.QueueInfo
	Time       time.Time
	N          int
	// Visible is the queue's ready count when the call ended (its
	// leader's VisibleHint; VisibleOK false: none), which the caller's
	// AMQP publisher flow control reads for a queue elsewhere.
	Visible   int
	VisibleOK bool
}

type remoteSendResult struct {
	MessageID, SequenceNumber string
	Err                       remoteError
}

// remoteError carries an engine error across: the sentinel it wraps (by
// its place in remoteSentinels, 1-based; 0 for none) and its text.
type remoteError struct {
	Sentinel int
	Text     string
}

// remoteSentinels are the engine errors a caller tells apart; any other
// arrives as its text alone.
var remoteSentinels = [...]error{engine.ErrQueueNotFound, engine.ErrQueueFull, engine.ErrDiskFull,
	engine.ErrMemoryHigh, engine.ErrClosed, engine.ErrStorage, engine.ErrNotLeading,
	engine.ErrReceiptHandleInvalid, engine.ErrReceiptHandleExpired, engine.ErrMessageNotInflight,
	engine.ErrMessageNotAvailable, engine.ErrPurgeInProgress, engine.ErrOverLimit,
	engine.ErrUnavailable, engine.ErrQueueDeletedRecently, engine.ErrTooManyQueues,
	engine.ErrQueueElsewhere, engine.ErrNotWritten} // appended only: a node of another build reads the others by index

func toRemoteError(err error) remoteError {
	if err == nil {
		return remoteError{}
	}
	e := remoteError{Text: err.Error()}
	if errors.Is(err, engine.ErrNotLeading) {
		// Before ErrStorage, which the engine wraps it in: the caller
		// tells a leadership change (try the new leader) from a store
		// that failed, and one certain to have written nothing
		// (ErrNotWritten, which err then carries with ErrNotLeading: it
		// may be made again there) from one that may have.
		target := engine.ErrNotLeading
		if errors.Is(err, engine.ErrNotWritten) {
			target = engine.ErrNotWritten
		}
		e.Sentinel = slices.Index(remoteSentinels[:], target) + 1
		return e
	}
	for i, s := range remoteSentinels {
		if s != engine.ErrNotWritten && errors.Is(err, s) { // ErrNotWritten: a leadership change's alone (above)
			e.Sentinel = i + 1
			break
		}
	}
	return e
}

// err is the error e carries: its sentinel wrapped with its text, or nil.
func (e remoteError) err() error {
	switch {
	case e.Sentinel > 0 && e.Sentinel <= len(remoteSentinels) && remoteSentinels[e.Sentinel-1] == engine.ErrNotWritten:
		// Sent for a leadership change alone (toRemoteError).
		return fmt.Errorf("%w: %w (another shard's leader: %s)", engine.ErrNotLeading, engine.ErrNotWritten, e.Text)
	case e.Sentinel > 0 && e.Sentinel <= len(remoteSentinels):
		return fmt.Errorf("%w (another shard's leader: %s)", remoteSentinels[e.Sentinel-1], e.Text)
	case e.Text != "" || e.Sentinel != 0:
		return fmt.Errorf("another shard's leader: %s", e.Text)
	}
	return nil
}

func toRemoteErrors(errs []error) []remoteError {
	out := make([]remoteError, len(errs))
	for i, err := range errs {
		out[i] = toRemoteError(err)
	}
	return out
}

func encodeGob(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeEngineCall reads an engineCall body, in the binary wire
// (enginewire.go) or gob.
func decodeEngineCall(body []byte) (engineCall, error) {
	if isEngineWire(body) {
		return decodeEngineCallWire(body)
	}
	var c engineCall
	err := gob.NewDecoder(bytes.NewReader(body)).Decode(&c)
	return c, err
}

// decodeEngineReply reads an engineReply body, in the binary wire or gob;
// its Err as an error.
func decodeEngineReply(body []byte) (engineReply, error) {
	var r engineReply
	var err error
	if isEngineWire(body) {
		r, err = decodeEngineReplyWire(body)
	} else {
		err = gob.NewDecoder(bytes.NewReader(body)).Decode(&r)
	}
	if err != nil {
		return r, fmt.Errorf("another shard's leader: unreadable answer: %w", err)
	}
	return r, r.Err.err()
}

// leaseSessions are the sessions of the callers a shard's leader handed
// connection leases to, by session id: the handles not yet settled, by
// queue, and when the caller was last heard from.
type leaseSessions struct {
	mu     sync.Mutex
	m      map[string]*leaseSession
	sweeps atomic.Int64 // expired calls, for tests
}

type leaseSession struct {
	seen time.Time
	held map[string]map[string]struct{} // queue → handles
}

// touch notes that session id was heard from now, and returns it.
func (ls *leaseSessions) touchLocked(id string, now time.Time) *leaseSession {
	if ls.m == nil {
		ls.m = make(map[string]*leaseSession)
	}
	s := ls.m[id]
	if s == nil {
		s = &leaseSession{held: make(map[string]map[string]struct{})}
		ls.m[id] = s
	}
	s.seen = now
	return s
}

// hold records handles of queue as session id's.
func (ls *leaseSessions) hold(id, queue string, ds []engine.Delivery, now time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s := ls.touchLocked(id, now)
	hs := s.held[queue]
	if hs == nil {
		hs = make(map[string]struct{}, len(ds))
		s.held[queue] = hs
	}
	for i := range ds {
		hs[ds[i].ReceiptHandle] = struct{}{}
	}
}

// release forgets handles of queue, settled by session id.
func (ls *leaseSessions) release(id, queue string, handles []string, now time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s := ls.touchLocked(id, now)
	if hs := s.held[queue]; hs != nil {
		for _, h := range handles {
			delete(hs, h)
		}
		if len(hs) == 0 {
			delete(s.held, queue)
		}
	}
}

// claim takes handles of queue out of the sessions that hold them — handed
// out by this leader and not yet settled — if every one is held, and
// reports whether they were. Claimed handles are no longer any session's,
// so a session's expiry (which returns what it holds to the queue) cannot
// return one between this check and the ack's delete.
func (ls *leaseSessions) claim(queue string, handles []string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	owners := make([]*leaseSession, len(handles))
	for i, h := range handles {
		for _, s := range ls.m {
			if _, ok := s.held[queue][h]; ok {
				owners[i] = s
				break
			}
		}
		if owners[i] == nil {
			return false
		}
	}
	for i, h := range handles {
		hs := owners[i].held[queue]
		delete(hs, h)
		if len(hs) == 0 {
			delete(owners[i].held, queue)
		}
	}
	return true
}

// touch notes that session id was heard from now.
func (ls *leaseSessions) touch(id string, now time.Time) {
	ls.mu.Lock()
	ls.touchLocked(id, now)
	ls.mu.Unlock()
}

// expired removes the sessions not heard from since before, returning
// what they held, by queue.
func (ls *leaseSessions) expired(before time.Time) map[string][]string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	defer ls.sweeps.Add(1)
	var out map[string][]string
	for id, s := range ls.m {
		if !s.seen.Before(before) {
			continue
		}
		delete(ls.m, id)
		for q, hs := range s.held {
			if out == nil {
				out = make(map[string][]string)
			}
			for h := range hs {
				out[q] = append(out[q], h)
			}
		}
	}
	return out
}

// expireSessions returns, every second until ctx ends, the leases of the
// sessions whose callers went silent to the front of their queues (a
// closed connection's requeue, with its receive count kept).
func (s *Server) expireSessions(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for q, hs := range s.sessions.expired(s.clk.Now().Add(-sessionExpiry)) {
			if _, err := s.eng.Requeue(q, hs, true); err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
				s.log.Warn("cannot return the leases of a silent caller", "queue", q, "leases", len(hs), "err", err)
			}
		}
	}
}

// ReadPeerBody reads the body of an engine call or of its answer, which
// another node of the cluster sent, announcing announced bytes (-1: not
// announced): into one buffer of that length when it is within limit,
// rather than one grown from io.ReadAll's 512 bytes (a receive's answer
// carries a batch of bodies), else growing up to limit+1 bytes, for the
// caller to refuse what is over. A body shorter than announced is an
// error. Allocating the announced length before the bytes arrive is
// acceptable only because the peer passed the internal listener's
// handshake (httpbody's rule for clients is the opposite). The cluster
// reads leaders' answers with it too.
func ReadPeerBody(r io.Reader, announced int64, limit int) ([]byte, error) {
	if announced >= 0 && announced <= int64(limit) {
		b := make([]byte, announced)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(r, int64(limit)+1))
}

// serveShardEngine runs one engineCall on this server's engine.
func (s *Server) serveShardEngine(w http.ResponseWriter, r *http.Request) {
	body, err := ReadPeerBody(r.Body, r.ContentLength, maxShardEngineBody)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxShardEngineBody {
		http.Error(w, "request over its size bound", http.StatusRequestEntityTooLarge)
		return
	}
	c, err := decodeEngineCall(body)
	if err != nil {
		http.Error(w, "unreadable request: "+err.Error(), http.StatusBadRequest)
		return
	}
	reply := s.runEngineCall(r.Context(), c)
	out, err := encodeReplyLike(body, &reply)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ctype := "application/x-gob"
	if isEngineWire(out) {
		ctype = "application/x-sluice-engine"
	}
	w.Header().Set("Content-Type", ctype)
	// Announced, so that the caller reads the answer into a buffer of its
	// size (net/http would chunk one over 2 KiB).
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out) // a broken connection fails the caller's request
}

// encodeReplyLike encodes r in the wire of call, the body it answers: a
// caller of a build before the binary wire reads gob alone.
func encodeReplyLike(call []byte, r *engineReply) ([]byte, error) {
	if isEngineWire(call) {
		return encodeEngineReply(r)
	}
	return encodeGob(*r)
}

// runEngineCall runs c on this server's engine.
func (s *Server) runEngineCall(ctx context.Context, c engineCall) engineReply {
	var r engineReply
	now := s.clk.Now()
	settle := func(errs []error, err error) {
		r.Err, r.Errs = toRemoteError(err), toRemoteErrors(errs)
		if c.Session != "" {
			s.sessions.release(c.Session, c.Queue, c.Handles, now)
		}
	}
	switch c.Op {
	case opSend:
		res, err := s.eng.Send(c.Queue, c.Msgs)
		r.Err = toRemoteError(err)
		if err == nil {
			r.Results = make([]remoteSendResult, len(res))
			for i, x := range res {
				r.Results[i] = remoteSendResult{MessageID: x.MessageID, SequenceNumber: x.SequenceNumber, Err: toRemoteError(x.Err)}
			}
		}
	case opReceive:
		ds, err := s.eng.Receive(ctx, c.Queue, engine.ReceiveRequest{Max: c.Max, Visibility: c.Visibility, VisibilitySet: c.VisibilitySet,
			Wait: c.Wait, WaitSet: c.WaitSet, Session: c.SessionLease})
		if len(ds) > 0 && c.SessionLease {
			if c.Session == "" || ctx.Err() != nil {
				// No caller to keep them, or none left to read them.
				s.returnLeases(c.Queue, ds)
				ds = nil
			} else {
				s.sessions.hold(c.Session, c.Queue, ds, now)
			}
		}
		r.Deliveries, r.Err = ds, toRemoteError(err)
	case opDelete:
		settle(s.eng.Delete(c.Queue, c.Handles))
	case opDeleteLeased:
		if c.Session != "" && !s.sessions.claim(c.Queue, c.Handles) {
			// An ack of a delivery this leader did not hand out, or whose
			// session expired: its lease ended with the leadership (or
			// the session) that granted it, and the message is back in
			// the queue. The engine would answer success without deleting
			// (DeleteLeased), and the caller's client would take its ack
			// for applied; the call fails instead, so the caller's channel
			// closes and the client sees the message again. (Claimed
			// handles, once deleted, are settled: a failed delete fails
			// the engine, and the leases end with its leadership.)
			r.Err = toRemoteError(fmt.Errorf("%w: acknowledged deliveries of %q that this leader did not hand out (another leadership's, or an expired session's): their leases are gone", engine.ErrNotLeading, c.Queue))
			break
		}
		settle(s.eng.DeleteLeased(c.Queue, c.Handles))
	case opRequeue:
		settle(s.eng.Requeue(c.Queue, c.Handles, c.Front))
	case opNack:
		settle(s.eng.Nack(c.Queue, c.Handles))
	case opAbandon:
		settle(s.eng.Abandon(c.Queue, c.Handles))
	case opReject:
		settle(s.eng.Reject(c.Queue, c.Handles, c.Failure))
	case opLeaseEnd:
		if len(c.Handles) == 1 {
			t, err := s.eng.LeaseEnd(c.Queue, c.Handles[0])
			r.Time, r.Err = t, toRemoteError(err)
		}
	case opGetQueue:
		info, err := s.eng.GetQueue(c.Queue)
		r.Info, r.Err = info, toRemoteError(err)
	case opPurgeReady:
		n, err := s.eng.PurgeReady(c.Queue)
		r.N, r.Err = n, toRemoteError(err)
	case opDeleteQueue:
		r.Err = toRemoteError(s.eng.DeleteQueue(c.Queue))
	case opKeepalive:
		s.sessions.touch(c.Session, now)
	case opImport:
		r.Err = toRemoteError(s.eng.ImportTransfers(c.Queue, c.Transfers))
	case opRoute:
		nowhere, err := s.importRouted(c.Transfers)
		r.Err = toRemoteError(err)
		if len(nowhere) > 0 {
			r.Errs = make([]remoteError, len(c.Transfers))
			for _, i := range nowhere {
				r.Errs[i] = remoteError{Text: "routed nowhere"}
			}
		}
	case opCreate:
		created, err := s.createCalled(c)
		if created {
			r.N = 1
		}
		r.Err = toRemoteError(err)
		return r
	case opReserve:
		to, _, err := s.eng.ReserveName(c.Queue, c.Shard, c.Own)
		r.N, r.Err = to, toRemoteError(err)
		return r
	case opHoldDeleted:
		r.Err = toRemoteError(s.eng.HoldDeletedName(c.Queue, c.Shard, c.Own))
		return r
	case opPlaceDeleted:
		if len(c.Handles) != 1 {
			r.Err = remoteError{Text: fmt.Sprintf("%s names %d queues, want 1", c.Op, len(c.Handles))}
			return r
		}
		marked, err := s.eng.MarkPlacementDeleted(c.Shard, c.Handles[0], time.Unix(0, int64(c.Wait)))
		if marked {
			r.N = 1
		}
		r.Err = toRemoteError(err)
		return r
	case opAdoptSources:
		for _, name := range c.Handles {
			if err := s.amqp.AdoptSource(name); err != nil {
				r.Err = toRemoteError(err)
				break
			}
		}
		return r
	case opPlaceHeld, opPlaceGone:
		var u engine.PlacementUpdate
		var err error
		if c.Op == opPlaceHeld {
			u, err = s.eng.UpdatePlacements(c.Shard, c.Handles, nil)
		} else {
			u, err = s.eng.UpdatePlacements(c.Shard, nil, c.Handles)
		}
		if len(u.Elsewhere) > 0 {
			// A name deleted on one shard and made again on another
			// shows here until the first shard's leader reports it
			// gone (its next round); one that stays is a fault.
			s.log.Info("a shard holds queues whose placements name another shard; left as they are until that shard reports them gone",
				"shard", c.Shard, "queues", u.Elsewhere[:min(len(u.Elsewhere), 20)], "count", len(u.Elsewhere))
		}
		r.N, r.Err = u.Written+u.Gone, toRemoteError(err)
		return r
	default:
		r.Err = remoteError{Text: unknownCall + c.Op}
	}
	if c.Queue != "" {
		r.Visible, r.VisibleOK = s.eng.VisibleHint(c.Queue)
	}
	return r
}

// returnLeases puts deliveries no caller will see back at the front of
// their queue.
func (s *Server) returnLeases(queue string, ds []engine.Delivery) {
	hs := make([]string, len(ds))
	for i := range ds {
		hs[i] = ds[i].ReceiptHandle
	}
	if _, err := s.eng.Requeue(queue, hs, true); err != nil && !errors.Is(err, engine.ErrQueueNotFound) {
		s.log.Warn("cannot return leases no caller took", "queue", queue, "err", err)
	}
}

// ReserveNameCall is the body of a ShardEnginePath request that reserves
// queue name, on the leader of own (the shard name hashes to), for a
// create the caller would send to shard (engine.ReserveName: in a cluster
// with shards, two creates of one name must meet on one shard).
func ReserveNameCall(name string, shard, own int) ([]byte, error) {
	return encodeEngineCall(&engineCall{Op: opReserve, Queue: name, Shard: shard, Own: own}), nil
}

// NameCallReply reads the answer to a ReserveNameCall (the shard the
// create is to go to) or a HoldDeletedNameCall (its error alone). A
// leader that does not know the call (a node of an older build, during a
// rolling upgrade) answers ErrUnknownEngineCall.
func NameCallReply(body []byte) (int, error) {
	r, err := decodeEngineReply(body)
	if err != nil && r.Err.Sentinel == 0 && strings.HasPrefix(r.Err.Text, unknownCall) {
		return 0, fmt.Errorf("%w: %s", ErrUnknownEngineCall, r.Err.Text)
	}
	if err != nil {
		return 0, err
	}
	return r.N, nil
}

// unknownCall begins the answer to an engine call a leader does not know
// (every build so far answers it so).
const unknownCall = "unknown engine call "

// ErrUnknownEngineCall is NameCallReply's answer when the leader does not
// know the call: a node of an older build.
var ErrUnknownEngineCall = errors.New("server: the shard's leader does not know this engine call (a node of an older build)")

// PlacementsCall is the body of a ShardEnginePath request to shard 0's
// leader that updates the placements of shard's queues
// (engine.UpdatePlacements, ADR 0016): names are queues shard holds, or,
// with gone, names whose placement names shard but whose queue it does
// not hold; at most engine.MaxPlacementNames. The answer, read with
// NameCallReply, is the number of entries changed.
func PlacementsCall(shard int, names []string, gone bool) []byte {
	op := opPlaceHeld
	if gone {
		op = opPlaceGone
	}
	return encodeEngineCall(&engineCall{Op: op, Shard: shard, Handles: names})
}

// AdoptSourcesCall is the body of a ShardEnginePath request to shard 0's
// leader naming queues of another shard whose dead letters it routes (AMQP
// queues with a dead-letter exchange, engine.DeadLetterPolicy's
// RoutedElsewhere): its AMQP server adopts them (amqp.Server.AdoptSource),
// so that the queues they dead-letter into count as dead-letter queues
// with them as sources (ShardAMQPRoutesPath) before their first dead
// letter. An error (engine.ErrUnavailable while shard 0 restores its
// bindings) means some were not adopted: the caller sends them again.
func AdoptSourcesCall(names []string) []byte {
	return encodeEngineCall(&engineCall{Op: opAdoptSources, Handles: names})
}

// PlacementDeletedCall is the body of a ShardEnginePath request to shard
// 0's leader from the leader of shard, which deleted queue name at
// (engine.MarkPlacementDeleted). The answer, read with NameCallReply, is
// 1 when the entry was marked gone, else 0.
func PlacementDeletedCall(shard int, name string, at time.Time) []byte {
	return encodeEngineCall(&engineCall{Op: opPlaceDeleted, Shard: shard, Handles: []string{name}, Wait: time.Duration(at.UnixNano())})
}

// HoldDeletedNameCall is the body of a ShardEnginePath request that tells
// the leader of own (the shard queue name hashes to) that the queue was
// deleted on shard (engine.HoldDeletedName); the answer is read with
// NameCallReply.
func HoldDeletedNameCall(name string, shard, own int) ([]byte, error) {
	return encodeEngineCall(&engineCall{Op: opHoldDeleted, Queue: name, Shard: shard, Own: own}), nil
}
