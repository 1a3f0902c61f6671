package amqp

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Outgoing frames. Every goroutine of a connection encodes its frames into
// a byte slice and queues it (enqueue); one writer goroutine (writeLoop)
// writes the queue to the socket with a deadline of Options.WriteTimeout.
// Nobody else touches the socket for writing, so no lock is ever held
// across a socket write: a client that stops reading stalls only its own
// writer, which closes the connection when a write passes the deadline.
//
// The queue is bounded (Options.OutgoingBuffer bytes). Producers that may
// wait (a channel's goroutine, the reader, consumers before they take
// their channel's lock) reserve room first and wait while the queue is
// full; producers that hold a lock (a delivery under its channel's lock
// after reserving, basic.cancel sent while a queue is deleted,
// connection.close, heartbeats) queue without waiting. Waiting ends when
// the writer drains the queue or the connection dies.

var errConnClosed = errors.New("amqp: connection closed")

// startWriter starts the writer goroutine.
func (c *conn) startWriter() {
	go c.writeLoop()
}

// reserve waits until n more bytes fit in the outgoing queue (or the queue
// is empty), then counts them as queued. It fails when the connection is
// dead or ctx ends.
func (c *conn) reserve(ctx context.Context, n int) error {
	limit := c.s.opts.OutgoingBuffer
	for {
		c.omu.Lock()
		if c.werr != nil {
			c.omu.Unlock()
			return c.werr
		}
		if c.queued == 0 || c.queued+n <= limit {
			c.queued += n
			c.omu.Unlock()
			return nil
		}
		room := c.room
		c.omu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wdone:
			return errConnClosed
		}
	}
}

// tryReserve is reserve without waiting.
func (c *conn) tryReserve(n int) bool {
	c.omu.Lock()
	defer c.omu.Unlock()
	if c.werr != nil || (c.queued != 0 && c.queued+n > c.s.opts.OutgoingBuffer) {
		return false
	}
	c.queued += n
	return true
}

// unreserve gives back a reservation that was not used.
func (c *conn) unreserve(n int) {
	c.omu.Lock()
	if c.werr == nil {
		c.queued -= n
	}
	c.omu.Unlock()
}

// enqueue queues encoded frames without waiting; reserved is the part of
// them already counted by reserve.
func (c *conn) enqueue(b []byte, reserved int) error {
	if err := c.enqueueQuiet(b, reserved); err != nil {
		return err
	}
	c.kick()
	return nil
}

// enqueueQuiet is enqueue without waking the writer: for a producer that
// queues several frames in a row (a consumer's batch of deliveries) and
// then calls kick once, so that they go out in one write.
func (c *conn) enqueueQuiet(b []byte, reserved int) error {
	return c.enqueuePooled(b, reserved, nil)
}

// enqueuePooled is enqueueQuiet for frames encoded into buf, a buffer
// from Server.bufs (nil: none), which the writer gives back once it has
// written them (or which is given back here if the connection can no
// longer write). The caller must not touch b or buf afterwards.
func (c *conn) enqueuePooled(b []byte, reserved int, buf *[]byte) error {
	c.omu.Lock()
	if c.werr != nil {
		c.omu.Unlock()
		if buf != nil {
			c.s.bufs.put(buf)
		}
		return c.werr
	}
	c.out = append(c.out, b)
	if buf != nil {
		c.outPooled = append(c.outPooled, buf)
	}
	c.queued += len(b) - reserved
	c.omu.Unlock()
	return nil
}

// kick wakes the writer.
func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// write queues frames, waiting for room: for goroutines that hold no lock.
func (c *conn) write(b []byte) error {
	if err := c.reserve(context.Background(), len(b)); err != nil {
		return err
	}
	return c.enqueue(b, len(b))
}

// send writes one method frame, waiting for room (no lock may be held).
func (c *conn) send(channel uint16, m wire.Method) error {
	b, err := appendMethod(nil, channel, m)
	if err != nil {
		return err
	}
	return c.write(b)
}

// sendNow queues one method frame without waiting: for callers holding a
// lock. Only small, rare frames go this way.
func (c *conn) sendNow(channel uint16, m wire.Method) error {
	b, err := appendMethod(nil, channel, m)
	if err != nil {
		return err
	}
	return c.enqueue(b, 0)
}

// holdFrames makes sendOrHold collect frames instead of queueing them,
// until the matching releaseFrames. A queue.delete uses it so that the
// basic.cancel frames for this connection's consumers of the queue and
// the delete-ok go out back to back in one write, as RabbitMQ sends them:
// a client that closes on the cancel must not miss the delete-ok.
func (c *conn) holdFrames() {
	c.heldMu.Lock()
	c.holding++
	c.heldMu.Unlock()
}

// releaseFrames ends one holdFrames and returns the frames collected
// (all of them, whoever held: they are written by the caller).
func (c *conn) releaseFrames() []byte {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	c.holding--
	b := c.held
	c.held = nil
	return b
}

// sendOrHold is sendNow, or, while frames are held, adds the frame to
// them.
func (c *conn) sendOrHold(channel uint16, m wire.Method) error {
	c.heldMu.Lock()
	if c.holding > 0 {
		b, err := appendMethod(c.held, channel, m)
		if err == nil {
			c.held = b
		}
		c.heldMu.Unlock()
		return err
	}
	c.heldMu.Unlock()
	return c.sendNow(channel, m)
}

// writesEnded reports whether the connection can no longer write (its
// writer has ended or is ending).
func (c *conn) writesEnded() bool {
	c.omu.Lock()
	defer c.omu.Unlock()
	return c.werr != nil || c.wclosing
}

// pending reports the bytes queued and not yet written.
func (c *conn) pending() int {
	c.omu.Lock()
	defer c.omu.Unlock()
	return c.queued
}

func appendMethod(dst []byte, channel uint16, m wire.Method) ([]byte, error) {
	return wire.AppendMethodFrame(dst, channel, m)
}

// contentMethodFixed bounds the bytes of a content method's payload
// (basic.deliver, basic.get-ok, basic.return) other than its short
// strings' contents: class and method ids, a delivery tag, a bit octet,
// a message count or reply code, and one length octet per short string.
const contentMethodFixed = 4 + 8 + 1 + 4 + 4

// contentSize is the encoded size of a content method whose short
// strings (consumer tag, exchange, routing key, reply text) hold strs
// bytes, with its header and body frames: the capacity to encode it into,
// and the room it reserves in the outgoing queue. (An underestimate would
// cost a reallocation and a reservation corrected at enqueue, nothing
// else.)
func (c *conn) contentSize(props, body []byte, strs int) int {
	chunk := int(c.frameMax) - wire.FrameOverhead
	bodyFrames := (len(body) + chunk - 1) / chunk
	return wire.FrameOverhead + contentMethodFixed + strs + // the method frame
		wire.FrameOverhead + 12 + len(props) + // the header frame
		bodyFrames*wire.FrameOverhead + len(body)
}

// appendContent encodes a content method, its header (from raw property
// bytes) and its body split for frame_max.
func (c *conn) appendContent(dst []byte, channel uint16, m wire.Method, props, body []byte) ([]byte, error) {
	dst, err := appendMethod(dst, channel, m)
	if err != nil {
		return dst, err
	}
	dst = appendContentHeader(dst, channel, len(body), props)
	chunk := int(c.frameMax) - wire.FrameOverhead
	for len(body) > 0 {
		n := min(chunk, len(body))
		if dst, err = wire.AppendFrame(dst, wire.Frame{Type: wire.FrameBody, Channel: channel, Payload: body[:n]}); err != nil {
			return dst, err
		}
		body = body[n:]
	}
	return dst, nil
}

// writeContent queues a content method (basic.return, get-ok) whose short
// strings hold strs bytes, waiting for room: for goroutines that hold no
// lock.
func (c *conn) writeContent(channel uint16, m wire.Method, strs int, props, body []byte) error {
	b, err := c.appendContent(make([]byte, 0, c.contentSize(props, body, strs)), channel, m, props, body)
	if err != nil {
		return err
	}
	return c.write(b)
}

// writeDeadline is the deadline for the next socket write: WriteTimeout,
// shortened once the connection is being shut down.
func (c *conn) writeDeadline() time.Time {
	d := time.Now().Add(c.s.opts.WriteTimeout)
	if by := c.drainBy.Load(); by != 0 && by < d.UnixNano() {
		return time.Unix(0, by)
	}
	return d
}

// writeLoop writes the queue until the connection is shut down (after
// writing what was queued) or a write fails, which closes the socket.
func (c *conn) writeLoop() {
	defer close(c.wdone)
	// The queue's two lists swap with the writer's at each round: the
	// queue gets the lists this loop emptied last round, and this round's
	// become the spares once written, so no list is allocated anew and
	// the queue and the writer never hold the same array.
	var spareOut [][]byte
	var sparePooled []*[]byte
	for {
		c.omu.Lock()
		bufs, pooled := c.out, c.outPooled
		c.out, c.outPooled = spareOut, sparePooled
		spareOut, sparePooled = bufs[:0], pooled[:0]
		closing := c.wclosing
		c.omu.Unlock()
		if len(bufs) == 0 {
			if closing {
				c.failWrites(errConnClosed)
				return
			}
			<-c.wake
			continue
		}
		n := 0
		for _, b := range bufs {
			n += len(b)
		}
		// Fails only on a closed socket, which the next read or write reports.
		_ = c.nc.SetWriteDeadline(c.writeDeadline())
		if by := c.drainBy.Load(); by != 0 {
			_ = c.nc.SetWriteDeadline(time.Unix(0, by)) // drainSoon may have raced the line above; fails only on a closed socket
		}
		nb := net.Buffers(bufs)
		_, err := nb.WriteTo(c.nc)
		c.omu.Lock()
		c.queued -= n
		close(c.room)
		c.room = make(chan struct{})
		c.omu.Unlock()
		// Written (or failed for good): nothing reads these any more.
		for _, b := range pooled {
			c.s.bufs.put(b)
		}
		clear(pooled)
		clear(bufs)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !c.closing.Load() && c.drainBy.Load() == 0 {
				c.s.log.Warn("amqp: client stopped reading; closing the connection", "conn", c.name,
					"timeout", c.s.opts.WriteTimeout, "queued", c.pending())
			}
			c.failWrites(err)
			_ = c.nc.Close() // closing: its error changes nothing
			return
		}
		c.lastWrite.Store(time.Now().UnixNano())
	}
}

// failWrites makes every later write fail with err and drops the queue.
func (c *conn) failWrites(err error) {
	c.omu.Lock()
	if c.werr == nil {
		c.werr = err
	}
	c.out, c.outPooled = nil, nil
	c.queued = 0
	close(c.room)
	c.room = make(chan struct{})
	c.omu.Unlock()
}

// closeWrites stops accepting frames, lets the writer write what is
// queued (for at most d: a final close-ok must reach the client) and
// waits for it to end.
func (c *conn) closeWrites(d time.Duration) {
	c.drainSoon(d)
	c.omu.Lock()
	c.wclosing = true
	c.omu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.wdone
}

// drainSoon shortens the deadline of the current and later writes to d
// from now.
func (c *conn) drainSoon(d time.Duration) {
	by := time.Now().Add(d)
	for {
		old := c.drainBy.Load()
		if old != 0 && old <= by.UnixNano() {
			return
		}
		if c.drainBy.CompareAndSwap(old, by.UnixNano()) {
			// Fails only on a closed socket, which the next read or write reports.
			_ = c.nc.SetWriteDeadline(by)
			return
		}
	}
}
