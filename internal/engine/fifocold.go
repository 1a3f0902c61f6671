package engine

import (
	"fmt"
	"math"
)

// A FIFO queue's look-ahead past its window (cold.go).
//
// A cold FIFO queue's window holds its first messages in sequence order.
// When every group with a message in the window is locked (its head in
// flight or waiting out a delay or retry), a receive would find nothing
// although messages of other groups wait further back. Then the receive
// looks ahead: it reads the cold records in sequence order from cold.from
// and loads the messages of groups that have nothing in memory, each such
// group's from its first cold message on, without gaps, so that a group's
// list in memory stays a prefix of the group (every cold message of a group
// still follows every hot one). A message of a group that has messages in
// memory (locked, since none is available) is skipped, and so is every
// message of a group past the first lookAheadPerGroup; both rules, once
// they skip a group's message, skip all its later ones in the scan. The
// look-ahead reads at most lookAheadWindows windows of records, loads at
// most lookAheadPerGroup messages of one group, and loads only while the
// queue's hot visible and delayed messages are fewer than two windows: the
// messages it loads and leaves locked cannot make memory grow with depth.
// It does not move cold.from: a later refill skips what it loaded (the
// messages are in memory, or were dropped: coldPart.gone).
//
// A standard queue looks ahead too, when its window holds no visible
// message (only delayed ones, whose delays have not ended): it loads the
// cold messages that are not delayed at now, skipping the delayed ones,
// which stay cold (a standard queue's hot messages need not be a prefix of
// anything). The same bounds apply: it reads at most lookAheadWindows
// windows of records and loads only while the hot waiting messages are
// fewer than two windows.
//
// A copy that a dead-letter move or redrive is writing into the queue
// (coldPart.pending) has a group the look-ahead cannot know before the
// copy's record is readable, so the look-ahead reads only up to the lowest
// such sequence number.

const (
	// lookAheadWindows bounds the records one look-ahead reads, in
	// windows (2,048 messages by default: 8,192 messages read).
	lookAheadWindows = 4
	// lookAheadPerGroup is the most messages of one group a look-ahead
	// loads: a full receive batch.
	lookAheadPerGroup = MaxBatch
)

// lookAheadLocked is a receive's look past the window: on a FIFO queue it
// loads messages of groups that have nothing in memory from further back
// in the cold part, on a standard queue messages not delayed at now; it
// returns how many it loaded. The caller calls it only when no group in
// memory is available. A read failure fails the engine.
func (q *queue) lookAheadLocked(now int64) int {
	e := q.eng
	if !q.cold.on || e.window <= 0 || e.failed.Load() != nil {
		return 0
	}
	if !q.fifo() && q.cold.stillIdle(now) {
		return 0
	}
	waiting, waitingB := q.waitingLocked()
	room, roomB := 2*e.window-waiting, int64(0)
	if e.windowB > 0 {
		roomB = 2*e.windowB - waitingB
		if roomB <= 0 {
			return 0
		}
	}
	if room <= 0 {
		return 0
	}
	end := qidPrefix(prefixMessage, q.id+1)
	if low, ok := q.cold.lowestPending(); ok {
		if low <= q.cold.from {
			return 0
		}
		end = messageKey(q.id, low, kindContent)
	}
	var (
		visited    int
		loaded     int
		loadedB    int64 // content records' bytes (coldPart.bytes)
		loadedBody int64 // bodies' bytes (the room's bound)
		restored   []*message
		groups     []string
		fresh      = make(map[string]int) // groups this look-ahead loads, and how many of each
		until      = int64(math.MaxInt64) // the earliest end of a delay skipped (standard queues)
	)
	_, stopped, err := q.scanRecords(messageKey(q.id, q.cold.from, kindContent), end, recordScan{
		content: func(seq uint64) (skip, stop bool) {
			if loaded >= room || (roomB > 0 && loadedBody >= roomB) || visited >= lookAheadWindows*e.window {
				return false, true
			}
			visited++
			return q.notColdLocked(seq), false
		},
		keepBody: e.keepBodies,
		message: func(m *message, g string, contentLen int) error {
			if !q.fifo() {
				if delayedAt(m, now) {
					until = min(until, m.visibleAt)
					return nil // stays cold, and counted as delayed
				}
				q.cold.leftCold(m)
				restored = append(restored, m)
				groups = append(groups, g)
				loaded++
				loadedB += int64(contentLen)
				loadedBody += int64(max(m.bodyLen, int32(len(m.body))))
				return nil
			}
			// Both conditions hold for the rest of the scan once they
			// hold, so a group whose message stays cold here has all
			// its later messages stay cold too: what is loaded of a
			// group is always its first cold messages, without gaps.
			n, isFresh := fresh[g]
			if (!isFresh && q.groups[g] != nil) || n >= lookAheadPerGroup {
				return nil
			}
			fresh[g] = n + 1
			q.cold.leftCold(m)
			restored = append(restored, m)
			groups = append(groups, g)
			loaded++
			loadedB += int64(contentLen)
			loadedBody += int64(max(m.bodyLen, int32(len(m.body))))
			return nil
		},
	})
	if err != nil {
		_ = e.fail(fmt.Errorf("reading cold messages of queue %q: %w", q.name, err))
		return 0
	}
	q.cold.idle = lookAheadIdle{}
	if !q.fifo() && loaded == 0 {
		q.cold.idle = lookAheadIdle{on: true, toEnd: !stopped,
			from: q.cold.from, ready: q.cold.ready, gen: q.cold.gen, until: until}
	}
	for i, m := range restored {
		q.restoreLocked(m, groups[i], now)
	}
	q.cold.n -= loaded
	q.cold.bytes -= loadedB
	return loaded
}

// delayedAt reports whether the message m read from the store would be
// delayed at now once loaded (restoredState), without changing m.
func delayedAt(m *message, now int64) bool {
	c := *m
	return restoredState(&c, now) == stateDelayed
}

// lookAheadIdle is what a standard queue's look-ahead that loaded nothing
// remembers: the records it read are all delayed (or hot), and stay so
// until the earliest of their delays ends (until), the window moves
// (from), a cold message leaves the cold part (gen: the records in reach
// change), or, if it read to the end of the queue's records (toEnd), a
// message that is not delayed is added (ready). Until one of these
// happens a look-ahead would read the same records and load nothing, so
// it does not read them: without this, every send to a queue whose window
// and look-ahead hold only delayed messages would make each parked long
// poll read four windows of records again.
type lookAheadIdle struct {
	on         bool
	toEnd      bool
	from       uint64
	ready, gen uint64
	until      int64
}

// stillIdle reports whether a look-ahead at now would load nothing for
// the reasons c.idle remembers.
func (c *coldPart) stillIdle(now int64) bool {
	i := &c.idle
	return i.on && i.from == c.from && i.gen == c.gen && now < i.until && (!i.toEnd || i.ready == c.ready)
}

// lowestPending returns the lowest sequence number of a copy not yet
// inserted (see coldPart.pending).
func (c *coldPart) lowestPending() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var low uint64
	found := false
	for s := range c.pending {
		if !found || s < low {
			low, found = s, true
		}
	}
	return low, found
}
