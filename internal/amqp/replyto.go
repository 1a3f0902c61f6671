package amqp

import (
	"crypto/rand"
	"encoding/base64"
	"strings"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): a client consumes
// the pseudo-queue with no-ack, publishes requests whose reply-to is
// "amq.rabbitmq.reply-to", and the server rewrites it to
// "amq.rabbitmq.reply-to.<token>". A reply published to the default
// exchange with that routing key goes straight to the consumer: it is never
// stored, so it is lost if the requester has gone. Only a reply published
// in the requester's vhost reaches it.

const replyQueue = "amq.rabbitmq.reply-to"

// replyTarget is a channel's reply-to consumer.
type replyTarget struct {
	ch  *channel
	tag string
}

// replyRegistry maps tokens to reply consumers. Its own lock is a leaf.
func (s *Server) registerReply(token string, rt *replyTarget) {
	s.mu.Lock()
	if s.replies == nil {
		s.replies = make(map[string]*replyTarget)
	}
	s.replies[token] = rt
	s.mu.Unlock()
}

func (s *Server) unregisterReply(token string) {
	s.mu.Lock()
	delete(s.replies, token)
	s.mu.Unlock()
}

func (s *Server) lookupReply(token string) *replyTarget {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replies[token]
}

// consumeReplyTo starts a channel's direct reply-to consumer.
func (ch *channel) consumeReplyTo(m *wire.BasicConsume) error {
	if !m.NoAck {
		return errorf(wire.PreconditionFailed, "reply consumer cannot acknowledge")
	}
	ch.mu.Lock()
	if ch.replyTag != "" {
		ch.mu.Unlock()
		return errorf(wire.PreconditionFailed, "reply consumer already set")
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = newConsumerTag()
	}
	b := make([]byte, 18)
	rand.Read(b)
	ch.replyTag, ch.replyToken = tag, base64.RawURLEncoding.EncodeToString(b)
	ch.mu.Unlock()
	ch.c.s.registerReply(ch.replyToken, &replyTarget{ch: ch, tag: tag})
	return ch.reply(m.NoWait, &wire.BasicConsumeOK{ConsumerTag: tag})
}

// cancelReplyTo stops the channel's reply-to consumer if tag names it.
func (ch *channel) cancelReplyTo(tag string) bool {
	ch.mu.Lock()
	if ch.replyTag == "" || ch.replyTag != tag {
		ch.mu.Unlock()
		return false
	}
	token := ch.replyToken
	ch.replyTag, ch.replyToken = "", ""
	ch.mu.Unlock()
	ch.c.s.unregisterReply(token)
	return true
}

// rewriteReplyTo replaces reply-to "amq.rabbitmq.reply-to" in a publish
// by the channel's reply address.
func (ch *channel) rewriteReplyTo(cmd *command) error {
	if cmd.props.ReplyTo != replyQueue {
		return nil
	}
	ch.mu.Lock()
	token := ch.replyToken
	ch.mu.Unlock()
	if token == "" {
		return errorf(wire.PreconditionFailed, "fast reply consumer does not exist")
	}
	cmd.props.ReplyTo = replyQueue + "." + token
	raw, err := encodeProps(&cmd.props)
	if err != nil {
		return err
	}
	cmd.rawProps = raw
	return nil
}

// deliverReply sends a reply published in vhost to
// "amq.rabbitmq.reply-to.<token>" straight to its consumer; false when
// there is none. A consumer in another vhost is none: vhosts are isolated,
// so a token that leaked (or was guessed) cannot carry messages across.
func (s *Server) deliverReply(vhost, key string, m *wire.BasicPublish, cmd *command) bool {
	token, ok := strings.CutPrefix(key, replyQueue+".")
	if !ok {
		return false
	}
	rt := s.lookupReply(token)
	if rt == nil || rt.ch.c.vhost != vhost {
		return false
	}
	ch, c := rt.ch, rt.ch.c
	// The requester's connection may be stalled: never wait for it (this
	// is the replier's channel goroutine). A reply that does not fit is
	// lost, as one to a requester that has gone.
	size := c.contentSize(cmd.rawProps, cmd.body, len(rt.tag)+len(m.Exchange)+len(key))
	if !c.tryReserve(size) {
		return false
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.stopped || ch.closing.Load() || ch.replyToken != token {
		c.unreserve(size)
		return false
	}
	ch.nextTag++
	d := &wire.BasicDeliver{ConsumerTag: rt.tag, DeliveryTag: ch.nextTag, Exchange: m.Exchange, RoutingKey: key}
	b, err := c.appendContent(make([]byte, 0, size), ch.id, d, cmd.rawProps, cmd.body)
	if err != nil {
		c.unreserve(size)
		return false
	}
	return c.enqueue(b, size) == nil
}
