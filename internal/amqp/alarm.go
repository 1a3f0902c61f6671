package amqp

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// alarm is the server's resource alarm, RabbitMQ's memory and disk alarms
// in one: while it is raised, a connection that publishes is no longer
// read (TCP back-pressure holds the publisher), and connections that
// advertised the connection.blocked capability are told why.
type alarm struct {
	mu     sync.Mutex
	reason string
	clear  chan struct{} // closed when the raised alarm clears; nil when none
}

// SetAlarm raises the resource alarm with reason (for example "low on
// disk" or "memory high watermark"), or clears it when reason is "". While
// it is raised:
//
//   - a connection that sends basic.publish is not read any further (the
//     frame already read waits too) until the alarm clears or the server
//     closes, as RabbitMQ blocks publishing connections; nothing is
//     dropped and nothing is refused;
//   - every connection whose client advertised the connection.blocked
//     capability is sent connection.blocked with the reason, and
//     connection.unblocked once the alarm clears (within a second: the
//     connection's keepalive tick delivers both).
//
// Connections that only consume are not blocked: consuming is what clears
// the alarm.
func (s *Server) SetAlarm(reason string) {
	a := &s.alarm
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case reason != "" && a.clear == nil:
		a.clear = make(chan struct{})
	case reason == "" && a.clear != nil:
		close(a.clear)
		a.clear = nil
	}
	a.reason = reason
}

// alarmState returns the raised alarm's reason and a channel closed when
// it clears; "" and nil when none is raised.
func (s *Server) alarmState() (string, <-chan struct{}) {
	a := &s.alarm
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.clear == nil {
		return "", nil
	}
	return a.reason, a.clear
}

// isPublish reports whether a method frame's payload is basic.publish.
func isPublish(payload []byte) bool {
	return len(payload) >= 4 && binary.BigEndian.Uint16(payload) == wire.ClassBasic &&
		binary.BigEndian.Uint16(payload[2:]) == wire.MethodBasicPublish
}

// waitAlarm holds the reader while the resource alarm is raised; false
// means the server is closing and the connection should end.
func (c *conn) waitAlarm() bool {
	_, clear := c.s.alarmState()
	if clear == nil {
		return true
	}
	// Not a silent peer: the reader stopped on purpose, so the missed
	// heartbeat check must wait.
	c.readBusy.Store(true)
	defer c.readBusy.Store(false)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-clear:
			return true
		case <-c.s.quit:
			return false
		case <-poll.C:
			if c.closing.Load() {
				return true // the reader only waits for close-ok now
			}
		}
	}
}

// updateBlocked sends connection.blocked or connection.unblocked to a
// client that asked for them when the alarm (or a storage failure, which
// never clears) changed since the last call.
func (c *conn) updateBlocked() {
	reason, _ := c.s.alarmState()
	if c.s.eng.Failed() != nil {
		reason = "storage failed"
	}
	switch {
	case reason != "" && c.blocked.CompareAndSwap(false, true):
		// Fails only once the writer has failed, and the connection is closing then.
		_ = c.sendNow(0, &wire.ConnectionBlocked{Reason: reason})
	case reason == "" && c.blocked.CompareAndSwap(true, false):
		// Fails only once the writer has failed, and the connection is closing then.
		_ = c.sendNow(0, &wire.ConnectionUnblocked{})
	}
}
