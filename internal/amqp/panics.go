package amqp

import (
	"runtime/debug"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Panics in a connection's goroutines (its reader, its channels, its
// consumers) are contained to that connection: logged with the stack,
// counted (Server.Panics, exported as sluice_amqp_panics_total), and the
// connection is closed with 541 INTERNAL_ERROR. One bug in one code path
// must not take every other client's connection down with the process.

// containPanic is deferred first in a channel or consumer goroutine.
func (c *conn) containPanic(where string) {
	r := recover()
	if r == nil {
		return
	}
	c.s.panics.Add(1)
	c.s.log.Error("amqp: panic contained to its connection", "where", where, "conn", c.name, "panic", r, "stack", string(debug.Stack()))
	// From another goroutine: closing waits on the connection's other
	// goroutines, and this one may hold what they need.
	go c.hardClose(hardErrorf(wire.InternalError, "internal error"))
}

// Panics is the number of panics contained since the server started.
func (s *Server) Panics() uint64 { return s.panics.Load() }

// fail calls the server's failpoint, if a test set one.
func (s *Server) fail(where string, m wire.Method) {
	if f := s.failpoint; f != nil {
		f(where, m)
	}
}
