package engine

import (
	"fmt"
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

// lookAheadLocked is a FIFO receive's look past the window: it loads
// messages of groups that have nothing in memory from further back in the
// cold part, and returns how many it loaded. The caller calls it only when
// no group in memory is available. A read failure fails the engine.
func (q *queue) lookAheadLocked(now int64) int {
	e := q.eng
	if !q.fifo() || !q.cold.on || e.window <= 0 || e.failed.Load() != nil {
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
	)
	_, _, err := q.scanRecords(messageKey(q.id, q.cold.from, kindContent), end, recordScan{
		content: func(seq uint64) (skip, stop bool) {
			if loaded >= room || (roomB > 0 && loadedBody >= roomB) || visited >= lookAheadWindows*e.window {
				return false, true
			}
			visited++
			return q.notColdLocked(seq), false
		},
		keepBody: e.keepBodies,
		message: func(m *message, g string, contentLen int) error {
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
	for i, m := range restored {
		q.restoreLocked(m, groups[i], now)
	}
	q.cold.n -= loaded
	q.cold.bytes -= loadedB
	return loaded
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
