package engine

import (
	"container/heap"
	"github.com/sluicemq/sluice/internal/store"
	"sync"
	"sync/atomic"
)

// Message states. A message is in exactly one; the queue keeps a counter per
// state so the approximate counts are O(1).
const (
	stateDelayed  uint8 = iota // not yet visible: DelaySeconds running, never received
	stateVisible               // ready to be received
	stateInFlight              // leased by a receive until visibleAt
)

// message is one message in memory. Times are Unix nanoseconds (0 = unset),
// which keeps the struct small: the memory budget is under 300 bytes per
// queued message beyond the body.
type message struct {
	seq         uint64
	id          [16]byte
	body        []byte
	attrs       []Attribute
	group       *group
	dedupID     string
	sender      string
	sentAt      int64 // when the producer sent it (SentTimestamp)
	enqueuedAt  int64 // when it entered this queue; retention counts from here
	visibleAt   int64 // end of the delay or of the current lease
	firstRecvAt int64
	leaseAt     int64  // start of the current lease (for the 12 h visibility cap)
	ttlAt       int64  // when a message TTL ends it (0: no TTL)
	receipt     uint64 // random number of the current lease; 0 = never received
	recvCount   int32
	state       uint8
	// parked is set when the message waits out a delay chosen after it
	// was received (a retry backoff or RetryAfter, or visibility 0)
	// rather than a lease: when the wait ends it becomes visible without
	// another backoff.
	parked bool
	// session is set while the current lease belongs to a connection
	// (ReceiveRequest.Session: an AMQP delivery) rather than to a
	// visibility timeout: such a lease dies with the engine that granted
	// it, so a restart or a failover makes the message visible at once.
	session bool
	// hasMD5 says bodyMD5 holds the body's MD5 as given at send
	// (Message.BodyMD5), returned with every delivery.
	hasMD5  bool
	bodyMD5 [16]byte
	// delayRec says a delay record (delayKey) may exist for the message:
	// it was sent with a delay. dropLocked deletes it.
	delayRec bool
	// stateRec is what this process knows of the message's state record
	// (stateRecUnknown for messages it did not create), so that the end
	// of its life deletes it as cheaply as is safe (dropLocked).
	stateRec uint8
	// maybeDelivered says the message may have been delivered to a
	// connection of an earlier run (its sequence number is below the
	// session mark found at open) though its records show no receive:
	// deliveries report it Redelivered.
	maybeDelivered bool
	// prio is the priority it was sent with (Message.Priority); its
	// queue orders by it only with a MaxPriority (queue.band).
	prio uint8
	// noPrioRec says the message has no priority record (prioKey): it
	// was sent or copied into memory without one (band 0), or the record
	// was deleted. Unset for a message read from the store, which may
	// have one.
	noPrioRec bool
	ext       *messageExt // failure context and history; nil for most messages

	timerIdx  int32 // index in queue.timers, -1 when absent
	expiryIdx int32 // slot in queue.expiry's in-order slice, -1 when absent
	lateIdx   int32 // index in queue.expiry's out-of-order heap, -1 when absent
	ttlIdx    int32 // index in queue.ttl, -1 when absent
	// bodyLen is len(body) even when the body is not in memory: beyond
	// the engine's body budget, body is nil and the body is read from the
	// store when needed (bodyLocked).
	bodyLen int32
	held    int32 // bytes accounted for it besides its body (memory.go)
	prev    *message
	next    *message // the group's list
}

func (m *message) groupID() string { return m.group.id }

// messageExt is the rarely present part of a message: what consumers
// reported and where it has been. Kept out of line so that healthy messages
// pay one pointer for it.
type messageExt struct {
	trace     string // AWSTraceHeader
	dlqSource string // queue it was dead-lettered from
	envelope  []byte // protocol metadata (AMQP properties), opaque here
	failure   *FailureRecord
	dead      *DeadLetterInfo
	redrive   *RedriveInfo
	// crashes are the times (Unix ns) of the latest deliveries that ended
	// without a verdict, at most the queue's CrashLimit (see Abandon).
	crashes []int64
}

func (m *message) traceHeader() string {
	if m.ext == nil {
		return ""
	}
	return m.ext.trace
}

func (m *message) deadLetterSource() string {
	if m.ext == nil {
		return ""
	}
	return m.ext.dlqSource
}

func (m *message) envelope() []byte {
	if m.ext == nil {
		return nil
	}
	return m.ext.envelope
}

func (m *message) extension() *messageExt {
	if m.ext == nil {
		m.ext = &messageExt{}
	}
	return m.ext
}

// list is an intrusive doubly linked list of messages.
type list struct {
	head, tail *message
	n          int
	// bands indexes a priority queue's standard group list (nil
	// otherwise): see bandTails.
	bands *bandTails
}

// bandTails indexes a list kept ordered by band, highest first (a
// priority queue's ready messages of one group): last[b] is the list's
// last message of band b (nil: none), so that an insert finds its place
// without walking past the messages of lower bands.
type bandTails struct {
	max  uint8
	last []*message // max+1 entries
}

func newBandTails(maxPrio uint8) *bandTails {
	return &bandTails{max: maxPrio, last: make([]*message, int(maxPrio)+1)}
}

func (t *bandTails) band(m *message) uint8 { return min(m.prio, t.max) }

// above returns the last message of the lowest non-empty band at or above
// b (nil: there is none, so a message of band b goes first).
func (t *bandTails) above(b uint8) *message {
	for c := int(b); c <= int(t.max); c++ {
		if t.last[c] != nil {
			return t.last[c]
		}
	}
	return nil
}

// inserted notes that m has just been linked in its place.
func (t *bandTails) inserted(m *message) {
	if b := t.band(m); m.next == nil || t.band(m.next) != b {
		t.last[b] = m
	}
}

// removing notes that m is about to be unlinked.
func (t *bandTails) removing(m *message) {
	if b := t.band(m); t.last[b] == m {
		if m.prev != nil && t.band(m.prev) == b {
			t.last[b] = m.prev
		} else {
			t.last[b] = nil
		}
	}
}

func (l *list) pushBack(m *message) {
	m.prev, m.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = m
	} else {
		l.head = m
	}
	l.tail = m
	l.n++
}

// insertSorted places m by seq, scanning from the tail (new messages almost
// always belong at the end).
func (l *list) insertSorted(m *message) {
	at := l.tail
	for at != nil && at.seq > m.seq {
		at = at.prev
	}
	l.insertAfter(at, m)
}

// band is m's priority as q orders its ready messages: its priority capped
// at q's maximum, so always 0 on a queue without priorities.
func (q *queue) band(m *message) uint8 { return min(m.prio, q.maxPrio) }

// pushBand appends m to a standard group's list of ready messages after
// every message of its band or a higher one (queue.band), so the list stays
// ordered highest band first and by arrival within a band. On a queue
// without priorities (no bandTails) it is pushBack.
func (l *list) pushBand(m *message) {
	t := l.bands
	if t == nil {
		l.pushBack(m)
		return
	}
	l.insertAfter(t.above(t.band(m)), m)
	t.inserted(m)
}

// insertBand places m, new to memory, in a standard group's list of ready
// messages: by sequence number within its band on a priority queue,
// scanning back from the band's last message (a send belongs at its end;
// a message loaded from the store may be older than ones of its band
// already in memory), and at the end on other queues.
func (l *list) insertBand(m *message) {
	t := l.bands
	if t == nil {
		l.pushBack(m)
		return
	}
	b := t.band(m)
	at := t.above(b)
	for at != nil && t.band(at) == b && at.seq > m.seq {
		at = at.prev
	}
	l.insertAfter(at, m)
	t.inserted(m)
}

// insertAfter places m after at (at the front when at is nil).
func (l *list) insertAfter(at, m *message) {
	if at == nil {
		m.prev, m.next = nil, l.head
		if l.head != nil {
			l.head.prev = m
		} else {
			l.tail = m
		}
		l.head = m
		l.n++
		return
	}
	m.prev, m.next = at, at.next
	if at.next != nil {
		at.next.prev = m
	} else {
		l.tail = m
	}
	at.next = m
	l.n++
}

// insertFromFront places m by seq within its band (queue.band), scanning from
// the head: a requeued message goes back to its original position, which
// is near the front of its band.
func (l *list) insertFromFront(m *message) {
	if t := l.bands; t != nil {
		b := t.band(m)
		var prev *message // the last of the higher bands, if any
		if b < t.max {
			prev = t.above(b + 1)
		}
		for {
			next := l.head
			if prev != nil {
				next = prev.next
			}
			if next == nil || t.band(next) != b || next.seq > m.seq {
				break
			}
			prev = next
		}
		l.insertAfter(prev, m)
		t.inserted(m)
		return
	}
	at := l.head
	for at != nil && at.seq < m.seq {
		at = at.next
	}
	if at == nil {
		l.pushBack(m)
		return
	}
	m.prev, m.next = at.prev, at
	if at.prev != nil {
		at.prev.next = m
	} else {
		l.head = m
	}
	at.prev = m
	l.n++
}

func (l *list) remove(m *message) {
	if l.bands != nil {
		l.bands.removing(m)
	}
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		l.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		l.tail = m.prev
	}
	m.prev, m.next = nil, nil
	l.n--
}

// group is a message group.
//
// On a FIFO queue its list holds every message of the group in sequence
// order, whatever its state. A receive may take the visible messages at the
// front of the list, up to the first one that is in flight or delayed: no
// message is delivered while an earlier one of its group is in flight or
// waiting, but a visible message is never hidden by a later one in flight
// (SQS: after ChangeMessageVisibility(0) on m1 while m2 is leased, m1 is
// delivered again).
//
// On a standard queue every message belongs to a group (id "" when the
// producer gave none) and the list holds only the group's visible messages.
// Receives take one message from each available group in turn, so a
// producer flooding one group cannot starve the others (SQS fair queues).
type group struct {
	id      string
	msgs    list
	members int // messages of the queue in this group, in any state
	// available: in queue.available (its head is visible).
	available  bool
	prev, next *group
}

// groupList is the FIFO queue of available groups.
type groupList struct{ head, tail *group }

func (l *groupList) pushBack(g *group) {
	g.prev, g.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = g
	} else {
		l.head = g
	}
	l.tail = g
}

func (l *groupList) pushFront(g *group) {
	g.prev, g.next = nil, l.head
	if l.head != nil {
		l.head.prev = g
	} else {
		l.tail = g
	}
	l.head = g
}

func (l *groupList) remove(g *group) {
	if g.prev != nil {
		g.prev.next = g.next
	} else {
		l.head = g.next
	}
	if g.next != nil {
		g.next.prev = g.prev
	} else {
		l.tail = g.prev
	}
	g.prev, g.next = nil, nil
}

// msgHeap is a container/heap of messages that keeps each message's
// position in the message itself, so a message can be fixed or removed in
// O(log n). K says what orders the heap and which index field it uses.
type msgHeap[K heapKind] []*message

// heapKind is the ordering and index field of one msgHeap.
type heapKind interface {
	less(a, b *message) bool
	index(m *message) *int32
}

func (h msgHeap[K]) Len() int           { return len(h) }
func (h msgHeap[K]) Less(i, j int) bool { var k K; return k.less(h[i], h[j]) }
func (h msgHeap[K]) Swap(i, j int) {
	var k K
	h[i], h[j] = h[j], h[i]
	*k.index(h[i]) = int32(i)
	*k.index(h[j]) = int32(j)
}
func (h *msgHeap[K]) Push(x any) {
	var k K
	m := x.(*message)
	*k.index(m) = int32(len(*h))
	*h = append(*h, m)
}
func (h *msgHeap[K]) Pop() any {
	var k K
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	*k.index(m) = -1
	return m
}

// byVisibleAt orders delayed and in-flight messages by the end of their
// delay or lease.
type byVisibleAt struct{}

func (byVisibleAt) less(a, b *message) bool { return a.visibleAt < b.visibleAt }
func (byVisibleAt) index(m *message) *int32 { return &m.timerIdx }

// byEnqueuedAt orders all messages by when they entered the queue, for
// retention.
type byEnqueuedAt struct{}

func (byEnqueuedAt) less(a, b *message) bool {
	if a.enqueuedAt != b.enqueuedAt {
		return a.enqueuedAt < b.enqueuedAt
	}
	return a.seq < b.seq
}
func (byEnqueuedAt) index(m *message) *int32 { return &m.expiryIdx }

// byTTL orders messages with a TTL by when it ends.
type byTTL struct{}

func (byTTL) less(a, b *message) bool { return a.ttlAt < b.ttlAt }
func (byTTL) index(m *message) *int32 { return &m.ttlIdx }

type (
	timerHeap = msgHeap[byVisibleAt]
	ttlHeap   = msgHeap[byTTL]
)

// dedupEntry is a FIFO deduplication entry: a young one (in memory until
// its write settles, dedup.go) or one read from its D record. Young
// entries of the same id in different groups chain through next.
type dedupEntry struct {
	id        string
	group     string
	msgID     [16]byte
	seq       uint64
	expiresAt int64
	ord       uint64 // young: its place in write order (queue.dedupOrd)
	next      *dedupEntry
}

// attemptEntry remembers a FIFO ReceiveRequestAttemptId.
type attemptEntry struct {
	expiresAt  int64
	deliveries []Delivery
	leases     []lease
}

type lease struct {
	seq       uint64
	receipt   uint64
	visibleAt int64
}

// counters are the queue's activity counters; atomics so metrics can read
// them without the queue lock.
type counters struct {
	sent, received, redelivered, deleted, deadLettered, expired, dropped atomic.Uint64
}

// queue is one queue's state. Fields after mu are guarded by it; functions
// ending in Locked expect it held.
type queue struct {
	id     uint32
	name   string
	isFIFO bool // immutable: a queue's type never changes
	// maxPrio is cfg.MaxPriority on a standard queue (0 on a FIFO queue):
	// see band. Immutable, set by newQueue (updateQueue refuses a change),
	// so dead-letter copies read it under another queue's lock.
	maxPrio uint8
	eng     *Engine // for dead-lettering from timers and limits

	// allow mirrors cfg.RedriveAllow (nil: allowAll) so that a source
	// queue can check it without taking this queue's lock.
	allow atomic.Pointer[RedriveAllowPolicy]
	// snap is an immutable copy of cfg, replaced on every change, for
	// lock-free reads on the send path.
	snap atomic.Pointer[QueueConfig]

	// nextSeq is the next sequence number. It is atomic so a dead-letter
	// move can reserve a number in its target without the target's lock.
	nextSeq atomic.Uint64

	// sessMark is the queue's session mark as written to the store
	// (sessionMarkKey): every message delivered to a connection has a
	// lower sequence number. sessMarkOpen is the mark found when the
	// engine opened: a message read from the store below it that has
	// never been received may have been delivered to a connection of an
	// earlier run, and is marked maybeDelivered. Both under mu.
	sessMark, sessMarkOpen uint64

	mu         sync.Mutex
	cfg        QueueConfig
	tags       map[string]string
	createdAt  int64
	modifiedAt int64
	deleted    bool
	lastPurge  int64
	// purges counts PurgeQueue calls (written under mu, read by
	// dead-letter moves under their source's lock: see insertCopies).
	purges atomic.Uint64

	msgs      map[uint64]*message
	groups    map[string]*group
	available groupList // groups a receive may take from now
	timers    timerHeap
	expiry    expiryOrder
	ttl       ttlHeap
	nState    [3]int
	nBytes    [3]int64 // body bytes per state, for MaxLengthBytes

	// nFresh and nFreshB count the delayed messages never received (a
	// send's delay, not a retry backoff: freshDelayed) and their body
	// bytes: with the visible ones, what a standard queue's ready window
	// bounds (waitingLocked).
	nFresh  int
	nFreshB int64

	// cold is the part of a standard queue's backlog that is only in the
	// store (cold.go).
	cold coldPart

	// peak is the most messages held since the queue last drained; a
	// queue that drains after a large peak releases its index memory.
	peak int
	// memHeld and memBody are this queue's shares of the engine's
	// memHeld and memBodies (memory.go), so that dropping the queue's
	// messages wholesale (purge, delete) can return them.
	memHeld, memBody int64

	// outbox holds the copies (pendingCopy) decided under the lock;
	// Engine.unlockAndInsertCopies inserts them into their targets' memory.
	outbox []pendingCopy
	// transferOut: a transfer (transfer.go) was written in the batch
	// under the lock; the unlock tells the mover (Engine.TransferReady),
	// once that batch is in the store, so that its read finds it.
	transferOut bool

	// FIFO deduplication (dedup.go): the young set, by id and in write
	// order; the ordinal of the latest entry written and of the latest
	// one known readable through the store; the ordinal of the last
	// purge (lookups wait for the store until it has settled); when the
	// next E record expires (0: none known), the E key the next sweep
	// starts at (nil: the queue's first), and when to look at the young
	// set again.
	dedup           map[string]*dedupEntry
	dedupYoung      []*dedupEntry
	dedupOrd        uint64
	dedupSettledOrd atomic.Uint64
	dedupBarrier    uint64
	dedupExpireAt   int64
	dedupSweptTo    []byte
	dedupTrimAt     int64
	attempts        map[string]*attemptEntry

	// waitCh is closed (and replaced) when a message may have become
	// receivable; long polls park on it. nil while nobody waits.
	waitCh chan struct{}

	// schedAt is the earliest wake-up already requested from the engine's
	// scheduler (0: none).
	schedAt int64

	stats counters
	// retainExpiredUnreported and ttlExpiredUnreported count messages
	// expired by retention and by their TTL (no dead-letter target) and
	// not yet reported to the observer and the log; guarded by mu.
	retainExpiredUnreported, ttlExpiredUnreported int

	budget retryBudget // guarded by mu; not persisted

	// room is what dead-letter moves and redrives read of this queue's
	// length limits without its lock (see room.go).
	room roomHints
}

func newQueue(e *Engine, id uint32, name string, cfg QueueConfig) *queue {
	q := &queue{
		id:     id,
		name:   name,
		isFIFO: cfg.FIFO,
		eng:    e,
		msgs:   make(map[uint64]*message),
		groups: make(map[string]*group),
		dedup:  make(map[string]*dedupEntry),
	}
	if !cfg.FIFO {
		q.maxPrio = uint8(cfg.MaxPriority)
	}
	q.setConfigLocked(cfg)
	return q
}

func (q *queue) fifo() bool { return q.isFIFO }

// setConfigLocked installs a new configuration. What other queues read
// under their own lock is not written here: maxPrio is fixed by newQueue,
// the rest is read through snap.
func (q *queue) setConfigLocked(cfg QueueConfig) {
	q.cfg = cfg
	q.allow.Store(cfg.RedriveAllow)
	c := cloneConfig(cfg)
	q.snap.Store(&c)
}

// accepts reports whether this queue's RedriveAllowPolicy lets source use
// it as a dead-letter queue. Safe without the lock.
func (q *queue) accepts(source string) bool {
	p := q.allow.Load()
	if p == nil {
		return true
	}
	switch p.Permission {
	case "denyAll":
		return false
	case "byQueue":
		for _, s := range p.SourceQueues {
			if s == source {
				return true
			}
		}
		return false
	}
	return true
}

// wakeLocked tells long polls that something may be receivable.
func (q *queue) wakeLocked() {
	if q.waitCh != nil {
		close(q.waitCh)
		q.waitCh = nil
	}
}

func (q *queue) waitChanLocked() <-chan struct{} {
	if q.waitCh == nil {
		q.waitCh = make(chan struct{})
	}
	return q.waitCh
}

func (q *queue) groupLocked(id string) *group {
	g := q.groups[id]
	if g == nil {
		g = &group{id: id}
		if q.maxPrio > 0 {
			g.msgs.bands = newBandTails(q.maxPrio)
		}
		q.groups[id] = g
	}
	return g
}

// dropDeliveredBodyLocked lets go of m's body, m having just been
// delivered, while the bodies in memory take half of the body budget or
// more. A delivered body is needed again only if m is delivered again (a
// visibility timeout or a requeue: a failure path), and then it is read
// back from its content record like any body beyond the budget
// (bodyLocked); a waiting message's body is certainly needed soon. So
// under pressure the budget goes to the waiting messages, and a consumer
// that holds many messages in flight does not leave the queues' windows
// to be read back one point read at a time. Below half the budget
// nothing changes: a redelivery finds its body in memory.
func (q *queue) dropDeliveredBodyLocked(m *message) {
	e := q.eng
	if m.body == nil || e.bodyBudget < 0 || 2*e.memBodies.Load() < e.bodyBudget {
		return
	}
	q.releaseBodyLocked(m)
	m.body = nil // m.bodyLen stays: bodyLocked reads it back
}

// addLocked inserts a message that is new to memory (sent, recovered or
// dead-lettered in). m.state must be set: delayed/in-flight messages go to
// the timer heap.
func (q *queue) addLocked(m *message) {
	q.msgs[m.seq] = m
	if len(q.msgs) > q.peak {
		q.peak = len(q.msgs)
	}
	m.timerIdx, m.expiryIdx, m.lateIdx, m.ttlIdx = -1, -1, -1, -1
	m.held = messageHeld(m)
	q.accountLocked(int64(m.held))
	if m.body != nil {
		m.bodyLen = int32(len(m.body))
		if !q.eng.admitBody(len(m.body)) {
			m.body = nil // on disk only; the content record was written first
		} else {
			q.memBody += int64(len(m.body))
		}
	}
	q.expiry.push(m)
	if m.ttlAt != 0 {
		heap.Push(&q.ttl, m)
	}
	q.nState[m.state]++
	q.nBytes[m.state] += int64(m.bodyLen)
	q.countFreshLocked(m, 1)
	if m.state != stateVisible {
		heap.Push(&q.timers, m)
	}
	g := m.group
	g.members++
	if q.fifo() {
		g.msgs.insertSorted(m)
	} else if m.state == stateVisible {
		g.msgs.insertBand(m)
	}
	q.updateGroupLocked(g)
	if m.state == stateVisible {
		q.wakeLocked()
	}
}

// What the engine knows of a message's state record (message.stateRec).
const (
	stateRecUnknown uint8 = iota // recovered, loaded or copied: it may exist and have been set many times
	stateRecNone                 // created by this process and never received: there is none
	stateRecOnce                 // set exactly once since the message was created
	stateRecMany                 // set more than once
)

// writeStateLocked writes m's state record (receive count, lease, failure
// context) in b and notes that it did.
func (q *queue) writeStateLocked(m *message, b *store.Batch) {
	b.Set(messageKey(q.id, m.seq, kindState), encodeState(m))
	switch m.stateRec {
	case stateRecNone:
		m.stateRec = stateRecOnce
	case stateRecOnce:
		m.stateRec = stateRecMany
	}
}

// dropLocked removes m from memory and deletes its records in b: the end
// of a message's life (delete, expiry, purge, or a move elsewhere).
//
// A content record is written once per sequence number (sequence numbers
// are never reused; the one rewrite, of a moved copy whose target was
// purged, follows the purge's range delete), so it is single-deleted:
// pebble drops the record and its delete together when they meet, and a
// message consumed before its memtable is flushed leaves nothing on disk.
// The state record is single-deleted when this process wrote it exactly
// once, not deleted at all when it never wrote one for a message it
// created, and deleted otherwise.
func (q *queue) dropLocked(m *message, b *store.Batch) {
	q.noteDroppedLocked(m)
	q.removeLocked(m)
	b.SingleDelete(messageKey(q.id, m.seq, kindContent))
	if m.delayRec {
		b.SingleDelete(delayKey(q.id, m.seq))
	}
	q.dropPrioRecordLocked(m, b)
	switch m.stateRec {
	case stateRecNone:
	case stateRecOnce:
		b.SingleDelete(messageKey(q.id, m.seq, kindState))
	default:
		b.Delete(messageKey(q.id, m.seq, kindState))
	}
}

// removeLocked takes a message out of memory entirely.
func (q *queue) removeLocked(m *message) {
	delete(q.msgs, m.seq)
	q.expiry.remove(m)
	if m.timerIdx >= 0 {
		heap.Remove(&q.timers, int(m.timerIdx))
	}
	if m.ttlIdx >= 0 {
		heap.Remove(&q.ttl, int(m.ttlIdx))
	}
	q.nState[m.state]--
	q.nBytes[m.state] -= int64(m.bodyLen)
	q.countFreshLocked(m, -1)
	q.accountLocked(-int64(m.held))
	if m.body != nil {
		q.releaseBodyLocked(m)
	}
	g := m.group
	wasHead := g.msgs.head == m
	if q.fifo() || m.state == stateVisible {
		g.msgs.remove(m)
	}
	g.members--
	q.updateGroupLocked(g)
	if len(q.msgs) == 0 && q.peak > 1024 {
		q.shrinkLocked()
	}
	if g.members == 0 {
		delete(q.groups, g.id)
	} else if wasHead && q.fifo() {
		// Removing a FIFO group's head (delete, expiry, dead-letter)
		// may release the group.
		q.wakeLocked()
	}
}

// shrinkLocked releases the memory a drained queue still holds: Go maps
// never shrink and heap slices keep their capacity, so a queue that once
// held millions of messages would keep their index allocated while empty.
func (q *queue) shrinkLocked() {
	q.peak = 0
	if len(q.msgs) == 0 {
		q.msgs = make(map[uint64]*message)
	}
	if len(q.timers) == 0 {
		q.timers = nil
	}
	if q.expiry.len() == 0 {
		q.expiry = expiryOrder{}
	}
	if len(q.ttl) == 0 {
		q.ttl = nil
	}
}

// setStateLocked moves a message between states, keeping lists, heaps and
// counters in step. For delayed and in-flight the caller sets visibleAt
// first.
func (q *queue) setStateLocked(m *message, s uint8) {
	old := m.state
	if old == s {
		if s != stateVisible && m.timerIdx >= 0 {
			heap.Fix(&q.timers, int(m.timerIdx))
		}
		return
	}
	q.nState[old]--
	q.nState[s]++
	q.nBytes[old] -= int64(m.bodyLen)
	q.nBytes[s] += int64(m.bodyLen)
	q.countFreshLocked(m, -1)
	m.state = s
	q.countFreshLocked(m, 1)
	switch {
	case s == stateVisible && m.timerIdx >= 0:
		heap.Remove(&q.timers, int(m.timerIdx))
	case s != stateVisible && m.timerIdx < 0:
		heap.Push(&q.timers, m)
	case s != stateVisible:
		heap.Fix(&q.timers, int(m.timerIdx))
	}
	g := m.group
	if !q.fifo() {
		// A standard group lists its visible messages; one whose lease
		// ends goes to the back, so a poison message cannot pin the head.
		if old == stateVisible {
			g.msgs.remove(m)
		}
		if s == stateVisible {
			g.msgs.pushBand(m)
		}
	}
	q.updateGroupLocked(g)
	if s == stateVisible {
		q.wakeLocked()
	}
}

// freshDelayed reports whether m is a delayed message never received: a
// send's (or a recovered send's) delay, which a standard queue's window
// bounds, rather than a received message's retry backoff, which stays in
// memory like a lease. A message's receive count changes only while it is
// visible (take), so the answer changes only with its state.
func freshDelayed(m *message) bool { return m.state == stateDelayed && m.recvCount == 0 }

// countFreshLocked adds sign times m to nFresh and nFreshB if m is
// freshDelayed.
func (q *queue) countFreshLocked(m *message, sign int) {
	if freshDelayed(m) {
		q.nFresh += sign
		q.nFreshB += int64(sign) * int64(m.bodyLen)
	}
}

// updateGroupLocked puts a group in or out of the available list: a FIFO
// group when its head (its oldest message) is visible, a standard group
// when it has a visible message. A FIFO group whose head is in flight or
// delayed is locked, whatever the state of its later messages.
func (q *queue) updateGroupLocked(g *group) {
	var avail bool
	if q.fifo() {
		avail = g.msgs.head != nil && g.msgs.head.state == stateVisible
	} else {
		avail = g.msgs.head != nil
	}
	if avail == g.available {
		return
	}
	g.available = avail
	if avail {
		q.available.pushBack(g)
		q.wakeLocked()
	} else {
		q.available.remove(g)
	}
}

// nextWakeLocked is the earliest time at which a timer of this queue is due
// (0: none).
func (q *queue) nextWakeLocked() int64 {
	var t int64
	if len(q.timers) > 0 {
		t = q.timers[0].visibleAt
	}
	if m := q.expiry.oldest(); m != nil {
		e := m.enqueuedAt + int64(q.cfg.Retention)
		if t == 0 || e < t {
			t = e
		}
	}
	if e := q.dedupWakeLocked(); e != 0 && (t == 0 || e < t) {
		t = e
	}
	if len(q.ttl) > 0 {
		if e := q.ttl[0].ttlAt; t == 0 || e < t {
			t = e
		}
	}
	if q.cold.on && len(q.cold.delayed) != 0 {
		if e := q.cold.nextDelayEnd(q.eng.now()); e != 0 && (t == 0 || e < t) {
			t = e
		}
	}
	return t
}

// info snapshots the queue.
func (q *queue) infoLocked() QueueInfo {
	now := q.eng.now()
	coldDelayed, coldLeased := q.cold.delayedAt(now), q.cold.leasedAt(now)
	info := QueueInfo{
		Name:         q.name,
		Config:       cloneConfig(q.cfg),
		Tags:         cloneMap(q.tags),
		CreatedAt:    fromNanos(q.createdAt),
		ModifiedAt:   fromNanos(q.modifiedAt),
		Visible:      q.nState[stateVisible] + q.cold.n - coldDelayed - coldLeased,
		InFlight:     q.nState[stateInFlight] + coldLeased,
		Delayed:      q.nState[stateDelayed] + coldDelayed,
		Sent:         q.stats.sent.Load(),
		Received:     q.stats.received.Load(),
		Redelivered:  q.stats.redelivered.Load(),
		Deleted:      q.stats.deleted.Load(),
		DeadLettered: q.stats.deadLettered.Load(),
		Expired:      q.stats.expired.Load(),
		Dropped:      q.stats.dropped.Load(),
		Waiting:      int(q.room.waiting.Load()),
	}
	if m := q.expiry.oldest(); m != nil {
		// The oldest by enqueue time; for the oldest-message meter that
		// is what an operator needs.
		info.OldestSentAt = fromNanos(m.enqueuedAt)
	}
	return info
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func cloneConfig(c QueueConfig) QueueConfig {
	if c.DeadLetter != nil {
		d := *c.DeadLetter
		c.DeadLetter = &d
	}
	if c.RedriveAllow != nil {
		r := *c.RedriveAllow
		r.SourceQueues = append([]string(nil), r.SourceQueues...)
		c.RedriveAllow = &r
	}
	c.Extra = cloneMap(c.Extra)
	return c
}
