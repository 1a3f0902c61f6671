package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Hot and cold (Engine v2, ADR 0002 step 3, first part).
//
// A standard queue keeps in memory ("hot") at most about Options.ReadyWindow
// waiting messages and Options.ReadyWindowBytes of their bodies, where
// waiting means visible or delayed by a send's delay (waitingLocked; a
// received message's retry backoff, like a lease, is outside the window).
// A send that finds the waiting messages at either bound makes the queue
// cold: from then on every send, delayed or not, is written to the store
// as before but not inserted into memory; the queue only counts it
// (coldPart), and counts a delayed one by the second its delay ends
// (coldPart.delayed) so that Delayed and Visible stay right. Every message
// with a sequence number below coldPart.from that exists is hot; a message
// at or above it is cold unless it is in q.msgs (a moved copy inserted by
// insertCopies while the window had room, an import into a standard
// queue, a message a receipt handle promoted, or a look-ahead's message),
// was dropped earlier in the same operation (coldPart.gone), or is a moved
// copy not yet inserted (coldPart.pending).
//
// A receive that finds fewer than half a window waiting refills: it reads
// the next cold messages from the store in sequence order from
// coldPart.from (content and state records, decoded exactly as recovery
// does), at most a window at a time, and advances from past what it read.
// When a refill reaches the end of the queue's records the queue is hot
// again. Open loads only the first window of a queue and counts the rest
// from keys and value lengths (store.ScanLengths) without reading them.
// A refill loads a message whose delay has not ended as delayed
// (restoredState): it is never delivered before its delay. It may be
// delivered later than its delay's end when a backlog is ahead of it in
// sequence order: a standard queue promises no order, and a delay is a
// minimum. When the window holds delayed messages and nothing visible, a
// receive looks ahead past it (fifocold.go) for cold messages whose delay
// has ended, and long polls are woken when a cold delay ends
// (nextDelayEnd), so a window of delayed messages does not hold back the
// visible ones behind it.
//
// FIFO queues go cold the same way (every new message goes cold while the
// queue is cold, delayed or not), with one difference: the window bounds
// all of a FIFO queue's visible and delayed messages together, retry
// backoffs included (waitingLocked). So the hot messages are exactly those below cold.from
// (plus promoted messages, moved copies a refill had passed, and a
// look-ahead's messages, which are their groups' first cold ones), and every
// cold message of a group comes after every hot one of that group: a
// group's list in memory is always a prefix of the group, and the group
// lock (a FIFO group whose head is in flight or delayed delivers nothing)
// holds across refills and restarts, since a refill only appends to a
// group's list. A refill reads in sequence order from cold.from; when every
// group in the window is locked, a receive looks further back, bounded,
// for messages of other groups (fifocold.go). Past that bound (four
// windows of records) messages of other groups wait until the window
// moves on, as SQS documents for its own FIFO queues with 120,000
// messages ("FIFO queues scan the first 120,000 messages to determine
// available message groups"). A group at the head that is processed
// always lets the window advance: its deletes bring the window under its
// low water mark. Deduplication entries are separate records (dedupKey,
// dedup.go), on disk for DedupWindow whether their message is hot or cold.

// resolveWindow returns the ready window in force (count, body bytes; 0:
// none) for o.
func resolveWindow(o *Options) (n int, bytes int64) {
	switch {
	case o.ReadyWindow == 0:
		n = DefaultReadyWindow
	case o.ReadyWindow > 0:
		n = o.ReadyWindow
	}
	switch {
	case o.ReadyWindowBytes == 0:
		bytes = DefaultReadyWindowBytes
	case o.ReadyWindowBytes > 0:
		bytes = o.ReadyWindowBytes
	}
	return n, bytes
}

// coldPart is the part of a standard queue's backlog that is only in the
// store. n and bytes count cold messages and the bytes of their content
// records; send, refill, delete and recovery all count a message by the
// length of its content record, so the counts agree however a message
// became cold. Guarded by the queue's lock, except pending.
type coldPart struct {
	on    bool   // some messages at or above from may be only in the store
	from  uint64 // no message below from is cold
	n     int    // cold messages
	bytes int64  // their content records' bytes

	// prioFrom holds, for each band whose priority records may name cold
	// messages (priority.go), the sequence number a scan of that band
	// starts at: every record of the band below it names a message in
	// memory or gone. A hint: a scan that finds none left removes the
	// band.
	prioFrom map[uint8]uint64

	// gone holds the sequence numbers at or above from of hot messages
	// dropped while the queue was cold (dropLocked). Their records are
	// deleted in the operation's batch, which is written only when the
	// operation ends: a refill (or a scan) later in the same operation
	// would otherwise read them as cold messages. Entries below from are
	// pruned by refills and cleared once the operation's batch is
	// written (settled).
	gone map[uint64]struct{}

	// delayed counts the cold messages sent with a delay (DelaySeconds,
	// the queue's or the message's), by the second their delay ends,
	// rounded up, so that the counts can tell them from visible ones
	// (delayedAt) and the scheduler can wake long polls when they end
	// (nextDelayEnd). About one entry per second of MaxDelay. Open
	// rebuilds it from the delay records (delayKey, countColdLocked); a
	// dead-letter or redrive copy has none, and after a restart counts as
	// visible until a refill loads it (it is still not delivered before
	// its delay ends).
	delayed bySecond

	// leased counts the cold messages found at Open in a lease still
	// running (an SQS receive beyond the first window), by the second
	// it ends: they count as in flight until then. Only Open adds to it.
	leased bySecond
	// restored remembers, for each received message Open counted in
	// leased or delayed, where, so that leftCold takes it off exactly.
	// Its size is the number of received messages beyond the first
	// window at Open; it shrinks as they leave the cold part.
	restored map[uint64]restoredCount

	// ready counts the messages added to the cold part that were not
	// delayed, and gen the cold messages that left it (leftCold): with
	// from, what a standard queue's look-ahead that found nothing to load
	// remembers (idle), so that it does not read the same records again
	// until something it skipped may have become receivable.
	ready, gen uint64
	idle       lookAheadIdle

	// pending holds the sequence numbers of copies that dead-letter moves
	// and redrives wrote into this queue's key range but insertCopies has
	// not inserted yet: a refill must not load them (they are receivable
	// only once their batch is durable). Reserved under the source's lock,
	// so it has its own.
	mu      sync.Mutex
	pending map[uint64]struct{}
}

// delaySecond is the key of coldPart.delayed for a delay ending at t.
func delaySecond(t int64) int64 { return (t + int64(time.Second) - 1) / int64(time.Second) }

// bySecond counts cold messages by the second (delaySecond) at which
// something ends for them: a delay, or a lease.
type bySecond map[int64]int

// add counts one more at the second of t. Now and then it forgets the
// seconds that have passed, so that the map holds about as many entries
// as there are seconds ahead (at most MaxDelay's for delays, the 12 h
// visibility cap's for leases and retry backoffs).
func (b *bySecond) add(t, now int64) {
	if *b == nil {
		*b = make(bySecond)
	}
	if len(*b) > 2*int(MaxDelay/time.Second) {
		b.prune(now)
	}
	(*b)[delaySecond(t)]++
}

// remove counts one less at the second of t, if any is counted there.
func (b bySecond) remove(t int64) {
	k := delaySecond(t)
	switch n := b[k]; {
	case n > 1:
		b[k] = n - 1
	case n == 1:
		delete(b, k)
	}
}

// at returns how many are counted at seconds after now.
func (b bySecond) at(now int64) int {
	n := 0
	for k, v := range b {
		if k*int64(time.Second) > now {
			n += v
		}
	}
	return n
}

// prune forgets the seconds at or before now.
func (b bySecond) prune(now int64) {
	for k := range b {
		if k*int64(time.Second) <= now {
			delete(b, k)
		}
	}
}

// addDelayed counts a cold message whose delay ends at visibleAt.
func (c *coldPart) addDelayed(visibleAt, now int64) { c.delayed.add(visibleAt, now) }

// leftCold is told that the cold message m leaves the cold part (loaded or
// deleted). A message sent with a delay, never received, has a visibleAt
// after its enqueuedAt; the entry of one whose delay has ended no longer
// counts. A received one was counted at Open (countColdLocked) by the end
// of its lease (leased) or of its retry backoff (delayed). (A redriven
// copy may look like a delayed send, enqueued long before: it then takes
// one off a second's count that is not its own, which the counts
// tolerate: they are approximate, and the entry ends with its second.)
func (c *coldPart) leftCold(m *message) {
	c.gen++
	if r, ok := c.restored[m.seq]; ok {
		delete(c.restored, m.seq)
		if r.leased {
			c.leased.remove(r.end)
		} else {
			c.delayed.remove(r.end)
		}
		return
	}
	if m.recvCount == 0 && m.visibleAt > m.enqueuedAt {
		c.delayed.remove(m.visibleAt)
	}
}

// restoredCount is where Open counted a received cold message: in leased
// or in delayed, at the second of end.
type restoredCount struct {
	end    int64
	leased bool
}

// restore counts the received cold message seq, whose lease (leased) or
// retry backoff ends at end.
func (c *coldPart) restore(seq uint64, end, now int64, leased bool) {
	if c.restored == nil {
		c.restored = make(map[uint64]restoredCount)
	}
	c.restored[seq] = restoredCount{end: end, leased: leased}
	if leased {
		c.leased.add(end, now)
	} else {
		c.delayed.add(end, now)
	}
}

// leaseShaped reports whether the stored state of m is a visibility lease,
// running or ended (not a connection's, which a restart ends; not a retry
// backoff): restoredState loads it in flight.
func leaseShaped(m *message) bool {
	return m.receipt != 0 && m.leaseAt != 0 && !m.parked && !m.session
}

// delayedAt returns how many cold messages are still delayed at now (at
// most the cold count).
func (c *coldPart) delayedAt(now int64) int { return min(c.delayed.at(now), c.n) }

// leasedAt returns how many cold messages are in flight at now: leases
// found running at Open (at most the cold count, less the delayed ones).
func (c *coldPart) leasedAt(now int64) int { return min(c.leased.at(now), c.n-c.delayedAt(now)) }

// nextDelayEnd returns the earliest end, after now, of a cold message's
// delay or lease (0: none), at which long polls are woken: a message that
// was delayed or leased on disk may be receivable then (a look-ahead or
// refill loads it). It forgets the entries that have ended, which no
// longer count (delayedAt, leasedAt), so that a queue whose cold delays
// and leases have all ended is not woken again for them.
func (c *coldPart) nextDelayEnd(now int64) int64 {
	var t int64
	for _, b := range []bySecond{c.delayed, c.leased} {
		for k := range b {
			e := k * int64(time.Second)
			switch {
			case e <= now:
				delete(b, k)
			case t == 0 || e < t:
				t = e
			}
		}
	}
	return t
}

// settled is told that the queue's operation has written its batch: the
// records of the messages it dropped are deleted in the store (a scan sees
// the latest write), so gone, needed only until then, is cleared. Without
// this, a FIFO queue whose window is stuck behind a locked group would
// keep one entry per message its look-ahead loaded and a consumer deleted
// (fifocold.go) until refills pass them. Called under the queue's lock
// right after the write.
func (c *coldPart) settled() {
	if len(c.gone) != 0 {
		c.gone = nil
	}
}

func (c *coldPart) addPending(seq uint64) {
	c.mu.Lock()
	if c.pending == nil {
		c.pending = make(map[uint64]struct{})
	}
	c.pending[seq] = struct{}{}
	c.mu.Unlock()
}

func (c *coldPart) donePending(seq uint64) {
	c.mu.Lock()
	delete(c.pending, seq)
	c.mu.Unlock()
}

func (c *coldPart) isPending(seq uint64) bool {
	c.mu.Lock()
	_, ok := c.pending[seq]
	c.mu.Unlock()
	return ok
}

// forgetColdLocked makes the queue hot with nothing cold: its records are
// being deleted wholesale (purge, delete).
func (q *queue) forgetColdLocked() {
	q.cold.on, q.cold.from, q.cold.n, q.cold.bytes, q.cold.prioFrom = false, 0, 0, 0, nil
	q.cold.gone, q.cold.delayed, q.cold.leased, q.cold.restored = nil, nil, nil, nil
	q.cold.idle = lookAheadIdle{}
}

// noteDroppedLocked is told that m leaves memory with its records deleted
// in the current batch (see coldPart.gone).
func (q *queue) noteDroppedLocked(m *message) {
	if q.cold.on && m.seq >= q.cold.from {
		if q.cold.gone == nil {
			q.cold.gone = make(map[uint64]struct{})
		}
		q.cold.gone[m.seq] = struct{}{}
	}
}

// notColdLocked reports whether the record at seq (at or above cold.from)
// is not a cold message: hot, dropped in this operation, or a move's copy
// not yet published.
func (q *queue) notColdLocked(seq uint64) bool {
	if q.msgs[seq] != nil {
		return true
	}
	if _, ok := q.cold.gone[seq]; ok {
		return true
	}
	return q.cold.isPending(seq)
}

// goesColdLocked reports whether the new message m stays only in the store:
// while the queue is cold, or when the hot messages the window bounds fill
// it, any new message does, delayed or not, except a priority queue's
// sends of a band above 0, which stay in memory up to twice the window
// (priority.go). On a FIFO queue this keeps every cold message of a group
// after every hot one of that group (see FIFO queues above); on a
// standard queue it keeps a backlog of delayed sends on disk like any
// other.
func (q *queue) goesColdLocked(m *message) bool {
	w, wb := q.eng.window, q.eng.windowB
	if w <= 0 {
		return false
	}
	n, bytes := q.waitingLocked()
	if q.band(m) > 0 {
		// A priority queue keeps a send above the lowest priority in
		// memory, ahead of the cold backlog, while the waiting
		// messages fit in two windows: delivered before the backlog
		// (a refill loads in sequence order), memory still bounded.
		return n >= 2*w || (wb > 0 && bytes >= 2*wb)
	}
	w, wb = q.eng.windowNow()
	return q.cold.on || n >= w || (wb > 0 && bytes >= wb)
}

// waitingLocked returns the number and body bytes of the hot messages that
// the window bounds: the visible ones and the delayed ones a refill may
// load. On a FIFO queue that is every delayed message (a retry backoff
// locks its group, so the window must hold it); on a standard queue it is
// the delayed messages never received (freshDelayed): a received
// message's retry backoff stays in memory outside the window, like a
// lease, and does not hold back the cold messages behind it.
func (q *queue) waitingLocked() (int, int64) {
	n, bytes := q.nState[stateVisible], q.nBytes[stateVisible]
	if q.fifo() {
		n += q.nState[stateDelayed]
		bytes += q.nBytes[stateDelayed]
	} else {
		n += q.nFresh
		bytes += q.nFreshB
	}
	return n, bytes
}

// windowNow returns the ready window in force now (count, body bytes):
// Options.ReadyWindow and ReadyWindowBytes, or, while the index memory
// is at or above Options.ReadyMemoryBudget, the squeezed window. A window
// of 0 (none) stays 0.
func (e *Engine) windowNow() (int, int64) {
	w, wb := e.window, e.windowB
	if e.readyMem > 0 && w > 0 && e.memHeld.Load() >= e.readyMem {
		w = min(w, SqueezedReadyWindow)
		if wb > 0 {
			wb = min(wb, SqueezedReadyWindowBytes)
		}
	}
	return w, wb
}

// windowFull reports whether n messages of bodies bytes fill a window.
func (e *Engine) windowFull(n int, bodies int64) bool {
	w, wb := e.windowNow()
	return n >= max(w, 1) || (wb > 0 && bodies >= wb)
}

// addColdLocked counts a message whose content record (of recLen bytes)
// was written at seq without inserting it into memory; delayed tells
// whether it was sent with a delay (the caller counts that delay:
// coldPart.addDelayed).
func (q *queue) addColdLocked(seq uint64, recLen int, delayed bool) {
	if !q.cold.on {
		q.cold.on, q.cold.from = true, seq
	}
	if !delayed {
		q.cold.ready++
	}
	q.cold.n++
	q.cold.bytes += int64(recLen)
	q.wakeLocked()
}

// lowLocked reports whether the hot visible messages are under the low
// water mark (half a window, by count and by bytes) at which a receive
// refills.
func (q *queue) lowLocked() bool {
	w, wb := q.eng.windowNow()
	n, bytes := q.waitingLocked()
	return n < max(w/2, 1) && (wb <= 0 || bytes < wb/2)
}

// topUpLocked refills a cold queue whose hot visible count is under the low
// water mark, at most maxRefills windows, and brings what it loaded to time
// now (ended leases, retention, TTL) like any other message: cold messages
// past their retention are dropped here, when a receive reaches them.
func (q *queue) topUpLocked(now int64, b *store.Batch) {
	const maxRefills = 16
	if q.promotePrioritiesLocked(b) > 0 {
		q.advanceLocked(now, b)
	}
	for i := 0; i < maxRefills && q.cold.on && q.lowLocked() && q.eng.failed.Load() == nil; i++ {
		if q.refillLocked(now) == 0 && q.cold.on {
			continue
		}
		q.advanceLocked(now, b)
	}
}

// refillLocked loads up to a window of cold messages, in sequence order from
// cold.from, and returns how many it loaded. When it reaches the end of the
// queue's records the queue is hot again. A record that fails to decode
// fails the engine (the store lost data it acknowledged); the queue then
// stays as it was.
func (q *queue) refillLocked(now int64) int {
	if !q.cold.on {
		return 0
	}
	e := q.eng
	var (
		loaded     int   // messages read
		loadedB    int64 // their content records' bytes (coldPart.bytes)
		loadedBody int64 // their bodies' bytes (the window's bound)
		visited    int
		restored   []*message
		groups     []string
	)
	next, stopped, err := q.scanRecords(messageKey(q.id, q.cold.from, kindContent), qidPrefix(prefixMessage, q.id+1), recordScan{
		content: func(seq uint64) (skip, stop bool) {
			if e.windowFull(loaded, loadedBody) || visited >= 4*max(e.window, 1) {
				return false, true
			}
			visited++
			return q.notColdLocked(seq), false // hot, dropped, or a move's copy on its way in
		},
		keepBody: e.keepBodies,
		message: func(m *message, group string, contentLen int) error {
			q.cold.leftCold(m)
			restored = append(restored, m)
			groups = append(groups, group)
			loadedBody += int64(max(m.bodyLen, int32(len(m.body))))
			loadedB += int64(contentLen)
			loaded++
			return nil
		},
	})
	if err != nil {
		_ = e.fail(fmt.Errorf("reading cold messages of queue %q: %w", q.name, err))
		return 0
	}
	for i, m := range restored {
		q.restoreLocked(m, groups[i], now)
	}
	q.cold.n -= loaded
	q.cold.bytes -= loadedB
	if stopped {
		q.cold.from = next
		for s := range q.cold.gone {
			if s < next {
				delete(q.cold.gone, s)
			}
		}
		return loaded
	}
	if q.cold.n != 0 || q.cold.bytes != 0 {
		e.log.Warn("cold message count disagreed with the store; corrected",
			"queue", q.name, "messages", q.cold.n, "bytes", q.cold.bytes)
	}
	q.forgetColdLocked()
	return loaded
}

// promoteColdLocked brings into memory the cold message seq that a receipt
// handle names (a standard queue's message that a restart left cold while
// a consumer held it), so that a delete, a visibility change or a failure
// report by that handle works as for a hot message. It returns nil when
// seq is not a cold message (then the caller's lookup finds nothing, as
// for a message deleted meanwhile). A read failure fails the engine.
func (q *queue) promoteColdLocked(seq uint64) *message {
	var m *message
	q.promoteColdSeqsLocked([]uint64{seq}, func(found *message) { m = found })
	return m
}

// promoteGap is the largest distance between the sequence numbers of two
// cold messages that promoteColdSeqsLocked reads in one store scan: the
// scan passes over the records between them, cheaper than a new
// iterator and seek for each (a pebble iterator's first seek reads its
// blocks again), up to about this many messages.
const promoteGap = 32

// promoteColdSeqsLocked is promoteColdLocked for the cold messages seqs,
// in ascending order: it brings each into memory and calls loaded for it,
// and passes over the ones that are not cold (deleted, or in memory). It
// reads runs of nearby sequence numbers (promoteGap) in one store scan
// each, instead of one per message. A read failure fails the engine.
func (q *queue) promoteColdSeqsLocked(seqs []uint64, loaded func(m *message)) {
	cold := func(seq uint64) bool { return q.cold.on && seq >= q.cold.from && !q.notColdLocked(seq) }
	// Only the cold ones are read: a handle's message may be deleted
	// or in memory, and a queue that is no longer cold has none.
	seqs = slices.DeleteFunc(slices.Clone(seqs), func(seq uint64) bool { return !cold(seq) })
	e := q.eng
	now := e.now()
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j]-seqs[j-1] <= promoteGap {
			j++
		}
		run := seqs[i:j]
		i = j
		k := 0 // run[k] is the next wanted sequence number
		wanted := func(seq uint64) bool {
			for k < len(run) && run[k] < seq {
				k++
			}
			return k < len(run) && run[k] == seq && cold(seq)
		}
		_, _, err := q.scanRecords(messageKey(q.id, run[0], kindContent), messageKey(q.id, run[len(run)-1]+1, kindContent), recordScan{
			content:  func(seq uint64) (skip, stop bool) { return !wanted(seq), false },
			keepBody: e.keepBodies,
			message: func(m *message, group string, contentLen int) error {
				q.cold.leftCold(m)
				q.cold.n--
				q.cold.bytes -= int64(contentLen)
				q.restoreLocked(m, group, now)
				loaded(m)
				return nil
			},
		})
		if err != nil {
			_ = e.fail(fmt.Errorf("reading cold messages %d to %d of queue %q: %w", run[0], run[len(run)-1], q.name, err))
			return
		}
	}
}

// insertMovedLocked inserts a dead-letter or redrive copy whose batch is
// durable (insertCopies): into memory, or, when the queue is cold or its
// window is full, into the cold count (its record is already written).
// A copy whose number a refill has already passed (it skipped it while
// pending) goes into memory: the refill will not come back for it. recLen
// is the length of the content record the copy's batch wrote.
func (q *queue) insertMovedLocked(m *message, groupID string, recLen int) {
	if q.goesColdLocked(m) && (!q.cold.on || m.seq >= q.cold.from) {
		q.addColdLocked(m.seq, recLen, m.state == stateDelayed)
		if m.state == stateDelayed {
			q.cold.addDelayed(m.visibleAt, q.eng.now())
		}
		if band := q.band(m); band > 0 {
			q.notePrioColdLocked(band, m.seq) // its record: writeCopy
		}
		return
	}
	m.group = q.groupLocked(groupID)
	m.noPrioRec = q.band(m) == 0
	q.addLocked(m)
}

// scanColdLocked calls fn, in sequence order, for each cold message with a
// sequence number above after, decoded from its records but not inserted
// into memory: m.group is detached, m.state is what restoreLocked would
// give it at now, and its body is read only with keepBody. contentLen is
// its content record's length (what coldPart counts). fn may stop the scan
// with store.ErrStopScan. Operator paths (DLQ browse, delete-matching, move
// task counts) use it so that their memory stays bounded by what they
// return, not by the backlog; it reads under the queue's lock, so it is
// not for hot paths.
func (q *queue) scanColdLocked(after uint64, now int64, keepBody bool, fn func(m *message, contentLen int) error) error {
	if !q.cold.on {
		return nil
	}
	_, _, err := q.scanRecords(messageKey(q.id, max(after+1, q.cold.from), kindContent), qidPrefix(prefixMessage, q.id+1), recordScan{
		content:  func(seq uint64) (skip, stop bool) { return q.notColdLocked(seq), false },
		keepBody: func() bool { return keepBody },
		message: func(m *message, g string, contentLen int) error {
			m.group = &group{id: g}
			if keepBody {
				m.bodyLen = int32(len(m.body))
			}
			m.state = restoredState(m, now)
			return fn(m, contentLen)
		},
	})
	if errors.Is(err, store.ErrStopScan) {
		return nil
	}
	if err != nil {
		return q.eng.fail(fmt.Errorf("reading cold messages of queue %q: %w", q.name, err))
	}
	return nil
}

// countColdLocked is recovery's count of a queue's messages from
// seq from on, from keys and value lengths only: the queue's first window
// is loaded, the rest is cold. It checks what it can without the values
// (key shape, a state record after its content) and raises nextSeq. The
// cold messages whose send delay has not ended at now count as delayed,
// from their delay records (delayKey, read by scanDelays), which are few
// and small: the content records are not read.
func (q *queue) countColdLocked(from uint64, now int64, delays []pendingDelay, audit *recoveryAudit) error {
	var lastContent uint64
	haveContent := false
	var received []uint64 // cold messages with a state record
	err := q.eng.st.ScanLengths(messageKey(q.id, from, kindContent), qidPrefix(prefixMessage, q.id+1), func(k []byte, n int) error {
		if len(k) != 14 {
			return fmt.Errorf("%w: message key %x", errCorrupt, k)
		}
		seq := binary.BigEndian.Uint64(k[5:])
		switch k[13] {
		case kindContent:
			if !q.cold.on {
				q.cold.on, q.cold.from = true, seq
			}
			q.cold.n++
			q.cold.bytes += int64(n)
			lastContent, haveContent = seq, true
			// Both walks are in sequence order: a delay record
			// whose message is gone is passed over.
			for len(delays) > 0 && delays[0].seq < seq {
				delays = delays[1:]
			}
			if len(delays) > 0 && delays[0].seq == seq {
				q.cold.addDelayed(delays[0].visibleAt, now)
				delays = delays[1:]
			}
		case kindState:
			if !haveContent || lastContent != seq {
				audit.stateWithoutContent(k, q.name, seq)
			} else {
				received = append(received, seq)
			}
		default:
			return fmt.Errorf("%w: message key kind %x", errCorrupt, k[13])
		}
		if seq >= q.nextSeq.Load() {
			q.nextSeq.Store(seq + 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return q.countReceivedColdLocked(received, now)
}

// countReceivedColdLocked reads the state records of the cold messages
// that were received (small records, one point read each; their number is
// that of the received messages beyond the first window, not the
// backlog's) and counts those whose lease or retry backoff has not ended
// at now as in flight or delayed, as they will be once loaded: a running
// lease until it ends; a lease that ended while the broker was down, on a
// queue with a retry policy, until the backoff that follows it ends (the
// backoff is a function of the message id, which costs a read of its
// content record); a backoff already under way until it ends. A
// connection's lease ends with the restart: not counted.
func (q *queue) countReceivedColdLocked(seqs []uint64, now int64) error {
	for _, seq := range seqs {
		v, err := q.eng.st.Get(messageKey(q.id, seq, kindState))
		if err != nil {
			return fmt.Errorf("reading the state of cold message %d of queue %q: %w", seq, q.name, err)
		}
		var m message
		if err := decodeState(&m, v); err != nil {
			return fmt.Errorf("cold message %d of queue %q: %w", seq, q.name, err)
		}
		switch {
		case m.session:
		case leaseShaped(&m) && m.visibleAt > now:
			q.cold.restore(seq, m.visibleAt, now, true)
		case leaseShaped(&m) && q.cfg.Retry != nil:
			c, err := q.eng.st.Get(messageKey(q.id, seq, kindContent))
			if err != nil {
				return fmt.Errorf("reading cold message %d of queue %q: %w", seq, q.name, err)
			}
			if len(c) < 17 {
				return fmt.Errorf("%w: cold message %d of queue %q", errCorrupt, seq, q.name)
			}
			copy(m.id[:], c[1:17])
			if end := m.visibleAt + int64(q.cfg.Retry.Backoff(m.id, int(m.recvCount))); end > now {
				q.cold.restore(seq, end, now, false)
			}
		case !leaseShaped(&m) && m.visibleAt > now:
			q.cold.restore(seq, m.visibleAt, now, false)
		}
	}
	return nil
}

// pendingDelay is a delay record read at recovery.
type pendingDelay struct {
	seq       uint64
	visibleAt int64
}

// scanDelays reads every delay record once, for recovery and Repair
// alike. It returns, per queue known knows, the records whose delay has
// not ended at now, in sequence order (countColdLocked merges them with
// its walk of the cold part; their number is bounded by the delayed sends
// of the last MaxDelay still queued), and classifies the records of
// queues it does not know (leftovers of a deleted queue, or records of a
// queue id never allocated). Known queues' records are deleted with their
// messages.
func scanDelays(st store.Store, known func(qid uint32) bool, now int64, a *recoveryAudit) (map[uint32][]pendingDelay, error) {
	out := make(map[uint32][]pendingDelay)
	err := st.Scan([]byte{prefixDelay}, func(k, v []byte) error {
		if len(k) != 13 {
			return fmt.Errorf("%w: delay key %x", errCorrupt, k)
		}
		qid := binary.BigEndian.Uint32(k[1:])
		if !known(qid) {
			a.unknownQueue(k, qid)
			return nil
		}
		at, n := binary.Varint(v)
		if n <= 0 {
			return fmt.Errorf("%w: delay record %x", errCorrupt, k)
		}
		if at > now {
			out[qid] = append(out[qid], pendingDelay{seq: binary.BigEndian.Uint64(k[5:]), visibleAt: at})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the delay records: %w", err)
	}
	return out, nil
}
