package amqp

import (
	"fmt"
	"unicode/utf8"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// amqpError is a protocol exception: a reply code, RabbitMQ's reply text
// (which starts with the code's name, "NOT_FOUND - …") and the method that
// caused it. hard says whether it closes the connection rather than the
// channel; RabbitMQ does not always follow the spec's classes (it raises
// 540 NOT_IMPLEMENTED on the channel), so each raise site chooses with
// errorf or hardErrorf.
type amqpError struct {
	code     uint16
	text     string
	classID  uint16
	methodID uint16
	hard     bool
}

func (e *amqpError) Error() string { return e.text }

// replyText fits s into a close method's reply-text, a shortstr of at
// most 255 bytes, cut at a UTF-8 boundary. Texts are built from names a
// client chose (a queue name alone may be 255 bytes) and from errors of
// other layers; a longer one could not be encoded, so the close was never
// written and the client waited for it forever.
func replyText(s string) string {
	const max = 255
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// isHard reports whether the error closes the connection.
func (e *amqpError) isHard() bool { return e.hard }

// errorf builds a channel exception whose text is "<NAME> - <formatted>",
// as RabbitMQ writes them.
func errorf(code uint16, format string, args ...any) *amqpError {
	return &amqpError{code: code, text: wire.ReplyText(code) + " - " + fmt.Sprintf(format, args...)}
}

// hardErrorf is errorf for a connection exception.
func hardErrorf(code uint16, format string, args ...any) *amqpError {
	e := errorf(code, format, args...)
	e.hard = true
	return e
}

// rs renders a resource the way RabbitMQ's messages name it:
// "queue 'orders' in vhost '/'".
func rs(kind, name, vhost string) string {
	return fmt.Sprintf("%s '%s' in vhost '%s'", kind, name, vhost)
}

func errNoQueue(vhost, name string) *amqpError {
	return errorf(wire.NotFound, "no %s", rs("queue", name, vhost))
}

// errElsewhere is the 406 for what AMQP does not do with a queue of vhost
// "/" that lives on another shard of a cluster (Options.Elsewhere).
func errElsewhere(what, vhost, name string) *amqpError {
	return errorf(wire.PreconditionFailed, "%s is an SQS queue on another shard of this cluster, which AMQP cannot %s", rs("queue", name, vhost), what)
}

func errNoExchange(vhost, name string) *amqpError {
	return errorf(wire.NotFound, "no %s", rs("exchange", name, vhost))
}

func errLocked(vhost, name string) *amqpError {
	return errorf(wire.ResourceLocked, "cannot obtain exclusive access to locked %s. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.", rs("queue", name, vhost))
}

func errUnknownTag(tag uint64) *amqpError {
	return errorf(wire.PreconditionFailed, "unknown delivery tag %d", tag)
}
