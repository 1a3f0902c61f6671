package amqp

import (
	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Per-connection byte caps on content the broker holds for a client before
// it becomes a message in a queue: bodies still arriving frame by frame
// (partial bodies, on any number of channels) and publishes waiting in an
// uncommitted transaction. Without them one connection could hold
// gigabytes: 1,500 channels each stalled one byte short of a 1 MB body, or
// 1,500 uncommitted 1 MB publishes. (The broker-wide memory alarm, which
// blocks publishers with connection.blocked, is separate.)
//
//   - Partial bodies over MaxPartialBytesPerConnection: the connection is
//     closed with 506 RESOURCE_ERROR. A client holding that much content
//     half-sent is misbehaving, and closing the connection frees it all.
//   - Transactional publishes over MaxTxBytesPerConnection: the channel
//     that went over is closed with 406 PRECONDITION_FAILED, which rolls
//     its transaction back; the connection and its other channels go on.
//     Nothing of the refused transaction reaches a queue.
//
// Counting: the reader goroutine owns conn.partial (it adds each body
// frame and subtracts a body once complete); conn.txHeld is shared by the
// channel goroutines, each of which also keeps its own share (txBytes) to
// give back at commit, rollback or when the channel ends.

// Defaults for the caps.
const (
	DefaultMaxPartialBytesPerConnection = 16 << 20
	DefaultMaxTxBytesPerConnection      = 32 << 20
)

// holdPartial accounts n more bytes of partial bodies on the connection,
// or closes the connection (506) and reports false when that would pass
// the cap. Reader goroutine only.
func (c *conn) holdPartial(n int) bool {
	max := int64(c.s.opts.MaxPartialBytesPerConnection)
	if max < 0 {
		return true
	}
	if c.partial+int64(n) > max {
		// Channels that closed mid-body left their bytes counted:
		// recount before refusing.
		c.partial = c.countPartial()
	}
	if c.partial+int64(n) > max {
		c.s.log.Warn("amqp connection over its partial body cap", "conn", c.name, "held", c.partial, "max", max)
		c.hardClose(hardErrorf(wire.ResourceError, "connection holds more than %d bytes of partially received message bodies", max))
		return false
	}
	c.partial += int64(n)
	return true
}

// releasePartial gives back a body that is complete (or discarded).
// Reader goroutine only.
func (c *conn) releasePartial(n int) {
	c.partial = max(c.partial-int64(n), 0)
}

// countPartial sums the bodies being assembled on open channels.
func (c *conn) countPartial() int64 {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	var n int64
	for _, ch := range c.channels {
		if ch.pending != nil && !ch.closing.Load() {
			n += int64(len(ch.pending.body))
		}
	}
	return n
}

// holdTx accounts a publish joining the channel's transaction, or refuses
// it (406, which closes the channel and so rolls the transaction back)
// when the connection's transactions would pass the cap. Channel
// goroutine only.
func (ch *channel) holdTx(cmd *command) error {
	n := int64(len(cmd.body) + len(cmd.rawProps))
	max := int64(ch.c.s.opts.MaxTxBytesPerConnection)
	if held := ch.c.txHeld.Add(n); max >= 0 && held > max {
		ch.c.txHeld.Add(-n)
		return errorf(wire.PreconditionFailed, "uncommitted publishes on this connection exceed %d bytes; commit smaller transactions", max)
	}
	ch.txBytes += n
	return nil
}

// releaseTx gives back the channel's share of transaction bytes (at
// commit, rollback and when the channel ends). Channel goroutine only.
func (ch *channel) releaseTx() {
	ch.c.txHeld.Add(-ch.txBytes)
	ch.txBytes = 0
}
