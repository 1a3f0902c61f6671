// Package amqp is Sluice's AMQP 0-9-1 front-end: RabbitMQ clients
// (amqp091-go, amqplib, pika) talk to the engine's queues through it. The
// wire format lives in package wire; this package holds the connection and
// channel state machines, the exchange/binding model (Topology), consumers
// and RabbitMQ's dead-lettering. docs/amqp-compat.md lists what is
// supported and how it differs from RabbitMQ.
//
// # Model
//
// An AMQP queue is an engine queue: queue N of vhost "/" is engine queue
// N, shared with SQS; other vhosts use "amq.vhost/<vhost>/<N>" (see
// engineName). Exchanges, bindings and queue arguments are kept by the
// Topology and persisted as engine metadata (namespaces amqp.exchange,
// amqp.queue, amqp.binding). Every message is stored with an envelope
// (envelope.go) holding its exchange, routing keys and content-header
// property bytes exactly as received, so header tables round-trip tag for
// tag. Every message is persisted (delivery-mode is kept, not acted on).
//
// Acks are engine deletes, nack/reject with requeue are engine requeues to
// the original position, reject without requeue is a terminal failure
// (dead-lettered through the Topology, which implements
// engine.DeadLetterRouter). A publish is confirmed when engine.Send
// returns, which means it is on disk.
//
// # Goroutines
//
//	Server.Serve          one per listener: accepts, starts a connection
//	Server.runExpiry      one: deletes queues whose x-expires ran out (server clock)
//	conn.serve            one per connection: handshake, then the reader; it
//	                      assembles content frames into commands and hands
//	                      them to channel inboxes; handles channel 0 itself
//	conn.keepalive        one per connection: heartbeats (wall clock), missed
//	                      heartbeat detection, consumer timeouts, connection.blocked
//	channel.run           one per open channel: executes its commands in order
//	                      (declares, publishes and confirms, acks, gets)
//	consumer.run          one per basic.consume: long-polls engine.Receive
//	                      for up to the prefetch credit and queues deliveries
//	conn.writeLoop        one per connection: the only socket writer
//
// Every goroutine encodes its frames and queues them on the connection's
// bounded outgoing queue (writer.go); writeLoop writes them with a
// deadline (Options.WriteTimeout) and closes a connection whose client
// stops reading. Nothing holds a lock across a socket write: goroutines
// without locks wait for room in the queue, and those holding one
// (deliveries under channel.mu, after reserving room; basic.cancel during
// a queue delete; connection.close; heartbeats) queue without waiting.
// The reader never waits for a consumer; it waits only when a channel's
// inbox is full or the outgoing queue is (back-pressure).
//
// # Closing
//
// A channel's commands take effect in the order they arrived, whatever
// ends the channel: connection.close (and a socket that just ends) first
// lets every channel run what is already in its inbox (a stop command is
// queued behind it: channel.requestStop, conn.cleanup), then stops consumers,
// requeues unacknowledged deliveries and deletes exclusive and
// auto-delete queues; close-ok is sent only after that, as RabbitMQ does.
// Consecutive publishes and consecutive acks in an inbox are applied as
// batches (flushPublishes, flushAcks); anything else in between applies
// the batch first. Acks are written without waiting for their sync; the
// channel writes a sync barrier before it runs any method whose reply could
// prove them (syncBefore), and the connection before connection.close-ok.
//
// # Locks
//
// Order: Server.adminMu → channel.mu → conn.omu. Topology.mu is a leaf:
// nothing is called while holding it, in particular not the engine, which
// calls RouteDeadLetter (taking Topology.mu) with a queue lock held.
// conn.chMu guards a connection's channel and exclusive-queue maps and is
// never held across another lock.
package amqp
