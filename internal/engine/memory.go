package engine

// Memory accounting. The engine keeps the index entry of every message it
// holds in memory (and its body while the body budget allows): every
// in-flight message and every received one waiting out a retry backoff,
// and up to about a window of each queue's waiting messages, fewer once
// the windows together pass Options.ReadyMemoryBudget (cold messages,
// cold.go, cost nothing here). It counts what it holds so that the server can refuse
// new messages before the process runs out of memory (see
// Engine.MemoryHeld and the server's memory_high_watermark).
//
// The count is an estimate from the sizes of the fields, not a
// measurement: per message MessageOverhead plus the encoded size of
// everything but the body (attributes, deduplication id, group, sender,
// trace header, AMQP envelope, failure context), plus the body while it is
// in memory; per FIFO deduplication entry in the young set (dedup.go:
// written, not yet known readable through the store) DedupEntryOverhead
// plus its id and group. Entries past the young set are only on disk and
// cost nothing here.

const (
	// MessageOverhead is what one message costs in the index beyond its
	// variable-length fields: the message struct, its map entry, its
	// slots in the timer and expiry heaps and list links, rounded up.
	MessageOverhead = 320
	// DedupEntryOverhead is what one young FIFO deduplication entry
	// costs beyond its id and group: the struct, its map entry and its
	// slot in the young set's write order.
	DedupEntryOverhead = 128
)

// MemoryHeld returns the bytes the engine accounts for: the index entries
// of every message with their attributes and envelopes, bodies held in
// memory, and young deduplication entries. It is cheap (two atomic loads).
func (e *Engine) MemoryHeld() int64 {
	return e.memHeld.Load() + e.memBodies.Load()
}

// messageHeld is m's accounted size without its body.
func messageHeld(m *message) int32 {
	return int32(MessageOverhead + contentSizeHint(m) - len(m.body))
}

func dedupHeld(ent *dedupEntry) int64 {
	return int64(DedupEntryOverhead + len(ent.id) + len(ent.group))
}

// accountLocked adds n bytes of index to q's and the engine's count.
func (q *queue) accountLocked(n int64) {
	q.memHeld += n
	q.eng.memHeld.Add(n)
}

// releaseBodyLocked takes m's body, held in memory, out of q's and the
// engine's counts; the caller drops m or its body.
func (q *queue) releaseBodyLocked(m *message) {
	n := int64(len(m.body))
	q.eng.memBodies.Add(-n)
	q.memBody -= n
}

// unaccountAllLocked removes everything q holds from the engine's counts
// (q's messages and dedup entries are being dropped wholesale).
func (q *queue) unaccountAllLocked() {
	q.eng.memHeld.Add(-q.memHeld)
	q.eng.memBodies.Add(-q.memBody)
	q.memHeld, q.memBody = 0, 0
}
