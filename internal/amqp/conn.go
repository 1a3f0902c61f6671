package amqp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

const (
	// preLoginFrameMax bounds frames before connection.tune-ok, as
	// RabbitMQ 4.1+ does (large enough for a JWT in start-ok).
	preLoginFrameMax = 8192
	// closeTimeout is how long the server waits for connection.close-ok.
	closeTimeout = 3 * time.Second
	// closeFlush bounds how long an ending connection spends writing what
	// is still queued (a close-ok, a connection.close).
	closeFlush = time.Second
	inboxSize  = 256
)

// conn is one client connection. Its goroutines: serve (the reader, which
// also handles channel 0), keepalive (heartbeats, consumer timeouts,
// connection.blocked), one per open channel, and one per consumer.
type conn struct {
	s    *Server
	nc   net.Conn
	id   uint64
	name string
	r    *bufio.Reader

	// The outgoing queue (writer.go). omu guards out, outPooled, queued,
	// room, werr and wclosing; it is a leaf lock.
	omu       sync.Mutex
	out       [][]byte      // encoded frames waiting for the writer
	outPooled []*[]byte     // the buffers of out from Server.bufs, given back after the write
	queued    int           // bytes in out plus reservations
	room      chan struct{} // closed (and replaced) whenever queued drops
	werr      error         // set when writing has ended; writes fail with it
	wclosing  bool          // shutting down: write what is queued, then end
	wake      chan struct{} // work for the writer (capacity 1)
	wdone     chan struct{} // closed when the writer has ended
	drainBy   atomic.Int64  // when set, the latest deadline for any write

	// Set during the handshake, read-only afterwards.
	frameMax   uint32
	channelMax uint16
	heartbeat  time.Duration
	user       *user
	vhost      string
	capCancel  bool // consumer_cancel_notify
	capBlocked bool // connection.blocked
	capAuth    bool // authentication_failure_close
	// failureHeaders: the client property optFailureHeaders asked for
	// the failure-report headers on every delivery and get-ok.
	failureHeaders bool
	// closedCleanly: the reader ended with the closing handshake
	// (close / close-ok); the peer's remaining input is then drained
	// before the socket closes (drainInput). Reader goroutine only.
	closedCleanly bool

	// heldMu guards holding and held (holdFrames).
	heldMu  sync.Mutex
	holding int
	held    []byte
	counted bool // counted against Options.MaxConnections (from connection.open)
	ip      string

	chMu      sync.Mutex
	channels  map[uint16]*channel
	exclusive map[*queue]struct{}

	closing   atomic.Bool  // connection.close sent by the server
	lastRead  atomic.Int64 // wall-clock nanoseconds of the last inbound frame
	readBusy  atomic.Bool  // the reader is waiting for a channel's inbox
	lastWrite atomic.Int64
	blocked   atomic.Bool
	// unsyncedAcks: a channel wrote acks without a sync (ackUnsynced);
	// connection.close-ok then waits for a sync barrier.
	unsyncedAcks atomic.Bool
	// flowDebt is the queue over its high-water mark that this
	// connection's last routed publishes reached; the reader pays it
	// before the next publish (flow.go).
	flowDebt atomic.Pointer[queue]
	done     chan struct{} // closed when the connection ends

	// Content held for the client (limits.go).
	partial int64        // partial bodies; reader-owned
	txHeld  atomic.Int64 // uncommitted transactional publishes
}

func newConn(s *Server, nc net.Conn) *conn {
	id := s.nextConn.Add(1)
	return &conn{
		s: s, nc: nc, id: id,
		name:      fmt.Sprintf("%s -> %s", nc.RemoteAddr(), nc.LocalAddr()),
		r:         bufio.NewReaderSize(nc, 64<<10),
		room:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		wdone:     make(chan struct{}),
		channels:  make(map[uint16]*channel),
		exclusive: make(map[*queue]struct{}),
		frameMax:  preLoginFrameMax,
		done:      make(chan struct{}),
	}
}

// serve runs the connection: handshake, then the frame loop, then cleanup.
func (c *conn) serve() {
	defer func() {
		if r := recover(); r != nil {
			c.s.panics.Add(1)
			buf := make([]byte, 4096)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.log.Error("amqp: connection panic", "conn", c.name, "panic", r, "stack", string(buf))
		}
		c.closeWrites(closeFlush)
		if c.closedCleanly {
			c.cleanup()
			c.drainInput()
		}
		_ = c.nc.Close() // closing: its error changes nothing
		c.cleanup()
		close(c.done)
	}()
	c.startWriter()
	ok := c.handshake()
	c.s.handshakeOver(c)
	if !ok {
		return
	}
	c.s.log.Debug("amqp: connection opened", "conn", c.name, "user", c.user.name, "vhost", c.vhost)
	go c.keepalive()
	c.loop()
}

// handshake negotiates the connection (spec §2); false ends it.
func (c *conn) handshake() bool {
	// Fails only on a closed socket, which the next read or write reports.
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.opts.HandshakeTimeout))
	if err := wire.ReadProtocolHeader(c.r); err != nil {
		if errors.Is(err, wire.ErrBadProtocolHeader) {
			// Fails only once the writer has failed, and the connection is closing then.
			_ = c.write([]byte(wire.ProtocolHeader))
		}
		return false
	}
	o := &c.s.opts
	caps := wire.Table{}
	for _, k := range []string{"publisher_confirms", "exchange_exchange_bindings", "basic.nack",
		"consumer_cancel_notify", "connection.blocked", "consumer_priorities",
		"authentication_failure_close", "per_consumer_qos", "direct_reply_to"} {
		caps = append(caps, wire.Field{Key: k, Value: true})
	}
	start := &wire.ConnectionStart{
		VersionMajor: 0, VersionMinor: 9,
		ServerProperties: wire.Table{
			{Key: "capabilities", Value: caps},
			{Key: "cluster_name", Value: "sluice"},
			{Key: "copyright", Value: "Sluice authors"},
			{Key: "information", Value: "Sluice, a durable message broker speaking SQS and AMQP 0-9-1"},
			{Key: "platform", Value: runtime.Version()},
			{Key: "product", Value: o.Product},
			{Key: "version", Value: "0.1.0"},
		},
		Mechanisms: "PLAIN AMQPLAIN", Locales: "en_US",
	}
	if c.send(0, start) != nil {
		return false
	}
	m, ok := c.readHandshake()
	if !ok {
		return false
	}
	so, isStartOK := m.(*wire.ConnectionStartOK)
	if !isStartOK {
		return false
	}
	if caps, ok := so.ClientProperties.Get("capabilities"); ok {
		if t, ok := caps.(wire.Table); ok {
			c.capCancel = flagIn(t, "consumer_cancel_notify")
			c.capBlocked = flagIn(t, "connection.blocked")
			c.capAuth = flagIn(t, "authentication_failure_close")
		}
	}
	c.failureHeaders = flagIn(so.ClientProperties, optFailureHeaders)
	if v, ok := so.ClientProperties.Get("connection_name"); ok {
		if s, ok := asString(v); ok {
			c.name = s + " (" + c.name + ")"
		}
	}
	name, password, ok := credentials(so.Mechanism, so.Response)
	var u *user
	var authErr error
	if !ok {
		authErr = fmt.Errorf("unsupported mechanism or malformed response")
	} else {
		u, authErr = c.s.authenticate(name, password, c.nc.RemoteAddr())
	}
	if authErr != nil {
		c.s.log.Warn("amqp: login refused", "conn", c.name, "user", name, "mechanism", so.Mechanism, "err", authErr)
		if c.capAuth {
			// Fails only once the writer has failed, and the connection is closing then.
			_ = c.send(0, &wire.ConnectionClose{ReplyCode: wire.AccessRefused,
				ReplyText: replyText(fmt.Sprintf("ACCESS_REFUSED - Login was refused using authentication mechanism %s. For details see the broker logfile.", so.Mechanism))})
		}
		// Without authentication_failure_close the socket simply closes;
		// amqp091-go reports that as ErrCredentials.
		return false
	}
	c.user = u
	hb := uint16(min(o.Heartbeat/time.Second, 65535))
	if c.send(0, &wire.ConnectionTune{ChannelMax: o.ChannelMax, FrameMax: o.FrameMax, Heartbeat: hb}) != nil {
		return false
	}
	if m, ok = c.readHandshake(); !ok {
		return false
	}
	tune, isTune := m.(*wire.ConnectionTuneOK)
	if !isTune {
		return false
	}
	switch {
	case tune.FrameMax == 0:
		c.frameMax = o.FrameMax
	case tune.FrameMax > o.FrameMax || tune.FrameMax < wire.FrameMinSize:
		c.closeHandshake(hardErrorf(wire.NotAllowed, "frame_max=%d outside the range %d-%d", tune.FrameMax, wire.FrameMinSize, o.FrameMax))
		return false
	default:
		c.frameMax = tune.FrameMax
	}
	c.channelMax = o.ChannelMax
	if tune.ChannelMax != 0 && tune.ChannelMax < c.channelMax {
		c.channelMax = tune.ChannelMax
	}
	c.heartbeat = time.Duration(tune.Heartbeat) * time.Second
	if m, ok = c.readHandshake(); !ok {
		return false
	}
	open, isOpen := m.(*wire.ConnectionOpen)
	if !isOpen {
		return false
	}
	switch {
	case !c.s.countActive(c):
		e := hardErrorf(wire.NotAllowed, "connection refused: node connection limit (%d) is reached", o.MaxConnections)
		e.classID, e.methodID = open.IDs()
		c.closeHandshake(e)
		return false
	case !c.s.vhostExists(open.VirtualHost):
		c.closeHandshake(hardErrorf(wire.NotAllowed, "vhost %s not found", open.VirtualHost))
		return false
	case c.user.perms[open.VirtualHost] == nil:
		c.closeHandshake(hardErrorf(wire.NotAllowed, "access to vhost '%s' refused for user '%s'", open.VirtualHost, c.user.name))
		return false
	}
	c.vhost = open.VirtualHost
	if c.send(0, &wire.ConnectionOpenOK{}) != nil {
		return false
	}
	// Fails only on a closed socket, which the next read or write reports.
	_ = c.nc.SetReadDeadline(time.Time{})
	c.lastRead.Store(time.Now().UnixNano())
	return true
}

func flagIn(t wire.Table, key string) bool {
	v, _ := t.Get(key)
	b, _ := v.(bool)
	return b
}

// readHandshake reads the next method on channel 0, skipping heartbeats.
func (c *conn) readHandshake() (wire.Method, bool) {
	for {
		f, err := wire.ReadFrame(c.r, c.frameMax)
		if err != nil {
			if code := wire.ReplyCodeFor(err); code != 0 {
				c.closeHandshake(hardErrorf(code, "%v", err))
			}
			return nil, false
		}
		switch f.Type {
		case wire.FrameHeartbeat:
			continue
		case wire.FrameMethod:
			if f.Channel != 0 {
				c.closeHandshake(hardErrorf(wire.CommandInvalid, "channel %d used before the connection was opened", f.Channel))
				return nil, false
			}
			m, err := wire.ParseMethod(f.Payload)
			if err != nil {
				c.closeHandshake(hardErrorf(max(wire.ReplyCodeFor(err), wire.SyntaxError), "%v", err))
				return nil, false
			}
			if cl, ok := m.(*wire.ConnectionClose); ok {
				_ = cl
				// Fails only once the writer has failed, and the connection is closing then.
				_ = c.send(0, &wire.ConnectionCloseOK{})
				return nil, false
			}
			return m, true
		default:
			c.closeHandshake(hardErrorf(wire.UnexpectedFrame, "expected method frame during the handshake"))
			return nil, false
		}
	}
}

// closeHandshake sends connection.close during the handshake and waits
// briefly for close-ok.
func (c *conn) closeHandshake(e *amqpError) {
	// Fails only once the writer has failed, and the connection is closing then.
	_ = c.send(0, &wire.ConnectionClose{ReplyCode: e.code, ReplyText: replyText(e.text), ClassID: e.classID, MethodID: e.methodID})
	// Fails only on a closed socket, which the next read or write reports.
	_ = c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
	for {
		f, err := wire.ReadFrame(c.r, c.frameMax)
		if err != nil {
			return
		}
		if f.Type == wire.FrameMethod && f.Channel == 0 {
			if m, err := wire.ParseMethod(f.Payload); err == nil {
				if _, ok := m.(*wire.ConnectionCloseOK); ok {
					return
				}
			}
		}
	}
}

// hardClose raises a connection exception from any goroutine: it sends
// connection.close once; the reader then discards everything but
// close-ok (and ends the connection when it arrives or after a timeout).
func (c *conn) hardClose(e *amqpError) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	// class and method name what failed (basic.ack is 60/80), as the
	// connection.close below does, so that a log shows which call it was.
	c.s.log.Info("amqp: closing connection", "conn", c.name, "code", e.code, "text", e.text, "class", e.classID, "method", e.methodID)
	// Fails only once the writer has failed, and the connection is closing then.
	_ = c.sendNow(0, &wire.ConnectionClose{ReplyCode: e.code, ReplyText: replyText(e.text), ClassID: e.classID, MethodID: e.methodID})
	// Fails only on a closed socket, which the next read or write reports.
	_ = c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
}

// drainInput ends the connection politely after the closing handshake:
// it half-closes the socket (the peer reads EOF after close-ok) and then
// reads and discards whatever the peer still sends until it closes its
// side, for at most closeTimeout. Closing a socket with unread input makes
// the kernel reset the connection, and the client would see ECONNRESET or
// EPIPE instead of its close completing (amqplib's close callback never
// fires); RabbitMQ reads on in the same way.
func (c *conn) drainInput() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
	_, _ = io.Copy(io.Discard, c.r)
}

// forceClose is Server.Close's: close with e, wait briefly for the peer's
// close-ok, then drop the socket.
func (c *conn) forceClose(e *amqpError) {
	c.drainSoon(time.Second)
	c.hardClose(e)
	select {
	case <-c.done:
	case <-time.After(closeTimeout):
		_ = c.nc.Close() // closing: its error changes nothing
		<-c.done
	}
}

// loop reads frames until the connection ends.
func (c *conn) loop() {
	for {
		f, err := wire.ReadFrame(c.r, c.frameMax)
		if err != nil {
			if code := wire.ReplyCodeFor(err); code != 0 && !c.closing.Load() {
				c.hardClose(hardErrorf(code, "%v", err))
				continue
			}
			if err != io.EOF && !c.closing.Load() {
				c.s.log.Debug("amqp: connection read ended", "conn", c.name, "err", err)
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if c.closing.Load() {
			if f.Type == wire.FrameMethod && f.Channel == 0 {
				if m, err := wire.ParseMethod(f.Payload); err == nil {
					switch m.(type) {
					case *wire.ConnectionCloseOK:
						c.closedCleanly = true
						return
					case *wire.ConnectionClose:
						// Fails only once the writer has failed, and the connection is closing then.
						_ = c.send(0, &wire.ConnectionCloseOK{})
						c.closedCleanly = true
						return
					}
				}
			}
			continue
		}
		if f.Type == wire.FrameHeartbeat {
			if f.Channel != 0 {
				c.hardClose(hardErrorf(wire.FrameError, "heartbeat frame on channel %d", f.Channel))
			}
			continue
		}
		if f.Channel == 0 {
			if !c.channelZero(f) {
				return
			}
			continue
		}
		if f.Type == wire.FrameMethod && isPublish(f.Payload) && (!c.waitAlarm() || !c.waitFlow()) {
			return // resource alarm (alarm.go) or flow control (flow.go) until the server closed
		}
		c.channelFrame(f)
	}
}

// channelZero handles a frame on channel 0; false ends the connection.
func (c *conn) channelZero(f wire.Frame) bool {
	if f.Type != wire.FrameMethod {
		c.hardClose(hardErrorf(wire.UnexpectedFrame, "content frame on channel 0"))
		return true
	}
	m, err := wire.ParseMethod(f.Payload)
	if err != nil {
		c.hardClose(hardErrorf(wire.ReplyCodeFor(err), "%v", err))
		return true
	}
	switch m := m.(type) {
	case *wire.ConnectionClose:
		c.s.log.Debug("amqp: client closed connection", "conn", c.name, "code", m.ReplyCode, "text", m.ReplyText)
		// As RabbitMQ: close-ok only once the connection is torn down
		// (every method received before the close applied, consumers
		// gone, unacknowledged messages requeued, exclusive and
		// auto-delete queues deleted), so that a client reconnecting as
		// soon as Close returns finds none of it.
		c.readBusy.Store(true) // not a silent peer: keepalive must wait
		c.cleanup()
		// The acks the channels wrote without a sync are durable before
		// close-ok proves them; if they cannot be, the socket closes
		// without it.
		var syncErr error
		if c.unsyncedAcks.Load() {
			syncErr = c.s.syncAcks()
		}
		c.readBusy.Store(false)
		if syncErr != nil {
			c.s.log.Warn("amqp: acks not durable at connection.close; closing without close-ok", "conn", c.name, "err", syncErr)
			return false
		}
		// Fails only once the writer has failed, and the connection is closing then.
		_ = c.send(0, &wire.ConnectionCloseOK{})
		c.closedCleanly = true
		return false
	case *wire.ConnectionCloseOK:
		c.closedCleanly = true
		return false
	case *wire.ConnectionBlocked, *wire.ConnectionUnblocked:
		return true // clients may echo these; nothing to do
	case *wire.ConnectionUpdateSecret:
		// Sluice's users have passwords that do not expire, like
		// RabbitMQ's internal user database, for which RabbitMQ answers
		// update-secret-ok without checking the secret: the connection
		// stays authenticated as it was, and the new secret is not used
		// (amqplib's and pika's updateSecret tests). Refusing it as a
		// wrong password closed connections of token-refreshing clients.
		c.s.log.Debug("amqp: update-secret accepted (credentials do not expire)", "conn", c.name, "user", c.user.name, "reason", m.Reason)
		// Fails only once the writer has failed, and the connection is closing then.
		_ = c.send(0, &wire.ConnectionUpdateSecretOK{})
		return true
	default:
		cl, id := m.IDs()
		e := hardErrorf(wire.CommandInvalid, "unexpected method %s on channel 0", m.Name())
		e.classID, e.methodID = cl, id
		c.hardClose(e)
		return true
	}
}

// channelFrame routes a frame of a non-zero channel: opens channels,
// assembles content (method, header, body frames) into commands and hands
// them to the channel's goroutine.
func (c *conn) channelFrame(f wire.Frame) {
	c.chMu.Lock()
	ch := c.channels[f.Channel]
	c.chMu.Unlock()
	if ch == nil {
		if f.Type != wire.FrameMethod {
			c.hardClose(hardErrorf(wire.ChannelError, "expected 'channel.open'"))
			return
		}
		m, err := wire.ParseMethod(f.Payload)
		if err != nil {
			c.hardClose(hardErrorf(wire.ReplyCodeFor(err), "%v", err))
			return
		}
		switch m.(type) {
		case *wire.ChannelOpen:
			c.chMu.Lock()
			open := len(c.channels)
			c.chMu.Unlock()
			if f.Channel > c.channelMax || open >= int(c.channelMax) {
				// RabbitMQ's text; channels still waiting for their
				// close-ok count.
				e := hardErrorf(wire.NotAllowed, "number of channels opened (%d) has reached the negotiated channel_max (%d)", open, c.channelMax)
				e.classID, e.methodID = m.IDs()
				c.hardClose(e)
				return
			}
			c.openChannel(f.Channel)
		case *wire.ChannelCloseOK:
			// A late close-ok for a channel already freed: ignore.
		default:
			c.hardClose(hardErrorf(wire.ChannelError, "expected 'channel.open'"))
		}
		return
	}
	if ch.closing.Load() {
		// After channel.close, only close-ok (or a crossing close)
		// matters; every other frame is discarded.
		if f.Type == wire.FrameMethod {
			if m, err := wire.ParseMethod(f.Payload); err == nil {
				switch m.(type) {
				case *wire.ChannelCloseOK:
					c.freeChannel(ch)
				case *wire.ChannelClose:
					c.freeChannel(ch)
					// Fails only once the writer has failed, and the connection is closing then.
					_ = c.send(ch.id, &wire.ChannelCloseOK{})
				}
			}
		}
		return
	}
	switch f.Type {
	case wire.FrameMethod:
		if ch.pending != nil {
			c.hardClose(hardErrorf(wire.UnexpectedFrame, "expected content header for class 60, got non content header frame instead"))
			return
		}
		m, err := wire.ParseMethod(f.Payload)
		if err != nil {
			c.hardClose(hardErrorf(wire.ReplyCodeFor(err), "%v", err))
			return
		}
		cl, id := m.IDs()
		if !wire.ReceivedByServer(cl, id) || cl == wire.ClassConnection {
			e := hardErrorf(wire.CommandInvalid, "unexpected method %s", m.Name())
			e.classID, e.methodID = cl, id
			c.hardClose(e)
			return
		}
		if _, ok := m.(*wire.ChannelOpen); ok {
			e := hardErrorf(wire.ChannelError, "second 'channel.open' seen")
			e.classID, e.methodID = cl, id
			c.hardClose(e)
			return
		}
		if m.HasContent() {
			ch.pending = &command{m: m}
			ch.expectHeader = true
			return
		}
		c.deliverCommand(ch, &command{m: m})
	case wire.FrameHeader:
		if ch.pending == nil || !ch.expectHeader {
			c.hardClose(hardErrorf(wire.UnexpectedFrame, "expected method frame, got non method frame instead"))
			return
		}
		h, err := wire.ParseContentHeader(f.Payload)
		if err != nil {
			c.hardClose(hardErrorf(wire.ReplyCodeFor(err), "%v", err))
			return
		}
		if h.ClassID != wire.ClassBasic {
			c.hardClose(hardErrorf(wire.UnexpectedFrame, "content header for class %d after a basic method", h.ClassID))
			return
		}
		ch.expectHeader = false
		cmd := ch.pending
		cmd.props = h.Properties
		cmd.rawProps = f.Payload[12:]
		if maxBody := uint64(c.s.opts.MaxMessageSize); h.BodySize > maxBody {
			// Refuse before buffering anything; the body frames that
			// follow are discarded with the channel.
			ch.pending = nil
			ch.closing.Store(true)
			c.deliverCommand(ch, &command{fail: errorf(wire.PreconditionFailed, "message size %d is larger than configured max size %d", h.BodySize, maxBody)})
			return
		}
		ch.remaining = h.BodySize
		if h.BodySize == 0 {
			ch.pending = nil
			c.deliverCommand(ch, cmd)
		}
	case wire.FrameBody:
		if ch.pending == nil || ch.expectHeader {
			c.hardClose(hardErrorf(wire.UnexpectedFrame, "expected method frame, got non method frame instead"))
			return
		}
		if uint64(len(f.Payload)) > ch.remaining {
			c.hardClose(hardErrorf(wire.FrameError, "body frames larger than the body size in the content header"))
			return
		}
		if !c.holdPartial(len(f.Payload)) {
			return
		}
		if ch.pending.body == nil && uint64(len(f.Payload)) == ch.remaining {
			// A body in one frame (the common case) is that frame's
			// payload, which wire.ReadFrame allocated for this caller
			// alone: keep it rather than copy it.
			ch.pending.body = f.Payload
		} else {
			ch.pending.body = append(ch.pending.body, f.Payload...)
		}
		ch.remaining -= uint64(len(f.Payload))
		if ch.remaining == 0 {
			cmd := ch.pending
			ch.pending = nil
			c.releasePartial(len(cmd.body))
			c.deliverCommand(ch, cmd)
		}
	}
}

// deliverCommand hands cmd to the channel's goroutine; it blocks while
// the channel's inbox is full (TCP back-pressure on a busy channel).
func (c *conn) deliverCommand(ch *channel, cmd *command) {
	select {
	case ch.inbox <- cmd:
		return
	default:
	}
	c.readBusy.Store(true)
	select {
	case ch.inbox <- cmd:
	case <-ch.quit:
	}
	c.readBusy.Store(false)
	c.lastRead.Store(time.Now().UnixNano())
}

// keepalive sends heartbeats, detects a silent peer, enforces the
// consumer timeout and reports engine storage failure with
// connection.blocked.
func (c *conn) keepalive() {
	tick := time.Second
	if c.heartbeat > 0 {
		tick = min(tick, c.heartbeat/2)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		now := time.Now()
		if c.heartbeat > 0 {
			// Only when nothing is waiting to be written: queued frames
			// show life as well, and a stalled client must not make the
			// queue grow.
			if now.Sub(time.Unix(0, c.lastWrite.Load())) >= c.heartbeat/2 && c.pending() == 0 {
				hb, _ := wire.AppendFrame(nil, wire.Heartbeat())
				// Fails only once the writer has failed, and the connection is closing then.
				_ = c.enqueue(hb, 0)
			}
			if !c.readBusy.Load() && now.Sub(time.Unix(0, c.lastRead.Load())) > 2*c.heartbeat {
				c.s.log.Warn("amqp: missed heartbeats from client", "conn", c.name, "timeout", c.heartbeat)
				_ = c.nc.Close() // closing: its error changes nothing
				return
			}
		}
		c.checkConsumerTimeouts()
		if c.capBlocked {
			c.updateBlocked()
		}
	}
}

// checkConsumerTimeouts closes, with RabbitMQ's 406, every channel holding
// a consumer delivery past its consumer timeout (the queue's
// x-consumer-timeout, else Options.ConsumerTimeout). A consumer extends a
// delivery explicitly by extending its lease: ChangeMessageVisibility
// (SQS) or the admin API on the delivery's x-sluice-receipt handle. The
// timeout then ends with the new lease, so a live consumer is never cut
// off while a crashed one still is.
func (c *conn) checkConsumerTimeouts() {
	now := c.s.clk.Now()
	c.chMu.Lock()
	chans := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chans = append(chans, ch)
	}
	c.chMu.Unlock()
	for _, ch := range chans {
		for _, u := range ch.overdue(now) {
			if end, err := c.s.eng.LeaseEnd(u.queue, u.handle); err == nil && end.After(u.deadline.Add(time.Minute)) {
				// Extended: the engine lease has the one-minute margin
				// of leaseFor; the timeout ends that much earlier.
				ch.extend(u.tag, end.Add(-time.Minute))
				continue
			}
			limit := u.consumer.q.settings.timeout(c.s.opts.ConsumerTimeout)
			ch.failAsync(errorf(wire.PreconditionFailed, "delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. This timeout value can be configured, see consumers doc guide to learn more", ch.id, limit.Milliseconds()))
			break
		}
	}
}

// addExclusive and dropExclusive track the exclusive queues the
// connection owns; they are deleted when it ends.
func (c *conn) addExclusive(q *queue) {
	c.chMu.Lock()
	c.exclusive[q] = struct{}{}
	c.chMu.Unlock()
}

func (c *conn) dropExclusive(q *queue) {
	c.chMu.Lock()
	delete(c.exclusive, q)
	c.chMu.Unlock()
}

// cleanup runs when the connection ends (before close-ok when the client
// closes it): every channel first runs the commands it has already
// received, in order, so acks sent just before connection.close take
// effect; then it closes (its consumers stop and its unacknowledged
// messages go back to their queues, at their original position); then the
// exclusive queues are deleted. The reader calls it, so no further
// commands arrive meanwhile. It may run twice; the second run finds
// nothing to do.
func (c *conn) cleanup() {
	c.chMu.Lock()
	chans := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chans = append(chans, ch)
	}
	c.channels = map[uint16]*channel{}
	c.chMu.Unlock()
	if len(chans) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		for _, ch := range chans {
			ch.requestStop(ctx.Done())
		}
		for _, ch := range chans {
			select {
			case <-ch.ended:
			case <-ctx.Done():
			}
		}
		cancel()
	}
	for _, ch := range chans {
		ch.stop()
	}
	c.chMu.Lock()
	excl := make([]*queue, 0, len(c.exclusive))
	for q := range c.exclusive {
		excl = append(excl, q)
	}
	c.exclusive = map[*queue]struct{}{}
	c.chMu.Unlock()
	if len(excl) == 0 {
		return
	}
	c.s.adminMu.Lock()
	defer c.s.adminMu.Unlock()
	for _, q := range excl {
		if _, err := c.s.deleteQueueLocked(q); err != nil {
			c.s.log.Warn("amqp: cannot delete exclusive queue", "queue", q.name, "err", err)
		}
	}
}
