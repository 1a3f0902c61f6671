package server

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/engine"
)

// AMQP publishes to queues on other shards of a cluster (ADR 0015 step 4,
// its first part). The AMQP server lives on shard 0's leader; a publish
// through the default exchange whose routing key names an SQS queue on
// another shard is sent, as one request per publish batch, to a node-only
// path of that shard's leader, which appends it with its engine's Send
// and answers once the messages are durable there (on a majority of the
// shard's group). The publisher's confirm follows that answer.

// ShardSendPath is the node-only path (Options.ShardViews) on which a
// shard's leader takes messages for one of its queues: a POST whose body
// is EncodeShardSend's, answered with a body DecodeShardSendReply reads.
const ShardSendPath = "/sluice/internal/shard/send"

// Bounds of one ShardSendPath request: what a sender puts in one (it
// splits a larger batch) and what a leader reads. A message is never split;
// the queues it can reach are SQS queues, whose messages are at most
// engine.MaxMaxMessageSize (a larger one fails without a request).
const (
	ShardSendChunk   = 4 << 20
	maxShardSendBody = 2*ShardSendChunk + 2*engine.MaxMaxMessageSize
)

// shardSendRequest is the body of a ShardSendPath request (gob).
type shardSendRequest struct {
	Queue string
	Msgs  []engine.Message
}

// shardSendReply is the answer of a ShardSendPath request (gob): either
// Err for the whole request, or one result per message.
type shardSendReply struct {
	Err     sendError
	Results []shardSendResult
}

type shardSendResult struct {
	MessageID, SequenceNumber string
	Err                       sendError
}

// sendError carries an engine error across: the sentinel it wraps (by
// its place in sendSentinels, 1-based; 0 for none) and its text.
type sendError struct {
	Sentinel int
	Text     string
}

// sendSentinels are the engine errors a Send may answer that a sender
// tells apart (the AMQP front-end: a queue gone, a full queue, the
// admission refusals); any other arrives as its text alone.
var sendSentinels = [...]error{engine.ErrQueueNotFound, engine.ErrQueueFull, engine.ErrDiskFull,
	engine.ErrMemoryHigh, engine.ErrClosed, engine.ErrStorage, engine.ErrNotLeading}

func toSendError(err error) sendError {
	if err == nil {
		return sendError{}
	}
	e := sendError{Text: err.Error()}
	for i, s := range sendSentinels {
		if errors.Is(err, s) {
			e.Sentinel = i + 1
			break
		}
	}
	return e
}

// err is the error e carries: its sentinel wrapped with its text, or nil.
func (e sendError) err() error {
	switch {
	case e.Sentinel > 0 && e.Sentinel <= len(sendSentinels):
		return fmt.Errorf("%w (another shard's leader: %s)", sendSentinels[e.Sentinel-1], e.Text)
	case e.Text != "" || e.Sentinel != 0:
		return fmt.Errorf("another shard's leader: %s", e.Text)
	}
	return nil
}

// EncodeShardSend returns the body of a ShardSendPath request appending
// msgs to queue.
func EncodeShardSend(queue string, msgs []engine.Message) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(shardSendRequest{Queue: queue, Msgs: msgs}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeShardSend reads an EncodeShardSend body.
func decodeShardSend(body []byte) (shardSendRequest, error) {
	var req shardSendRequest
	err := gob.NewDecoder(bytes.NewReader(body)).Decode(&req)
	return req, err
}

// DecodeShardSendReply reads a ShardSendPath answer for n messages: their
// results, or the error that kept them all out.
func DecodeShardSendReply(body []byte, n int) ([]engine.SendResult, error) {
	var r shardSendReply
	if err := gob.NewDecoder(bytes.NewReader(body)).Decode(&r); err != nil {
		return nil, fmt.Errorf("another shard's leader: unreadable answer: %w", err)
	}
	if err := r.Err.err(); err != nil {
		return nil, err
	}
	if len(r.Results) != n {
		return nil, fmt.Errorf("another shard's leader: %d results for %d messages", len(r.Results), n)
	}
	out := make([]engine.SendResult, n)
	for i, res := range r.Results {
		out[i] = engine.SendResult{MessageID: res.MessageID, SequenceNumber: res.SequenceNumber, Err: res.Err.err()}
	}
	return out, nil
}

// serveShardSend appends a ShardSendPath request's messages to its queue
// in this server's engine and answers when they are durable.
func (s *Server) serveShardSend(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxShardSendBody+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxShardSendBody {
		http.Error(w, "request over its size bound", http.StatusRequestEntityTooLarge)
		return
	}
	req, err := decodeShardSend(body)
	if err != nil {
		http.Error(w, "unreadable request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var reply shardSendReply
	if len(req.Msgs) > 0 {
		res, err := s.eng.Send(req.Queue, req.Msgs)
		reply.Err = toSendError(err)
		if err == nil {
			reply.Results = make([]shardSendResult, len(res))
			for i, r := range res {
				reply.Results[i] = shardSendResult{MessageID: r.MessageID, SequenceNumber: r.SequenceNumber, Err: toSendError(r.Err)}
			}
		}
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(reply); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-gob")
	_, _ = w.Write(b.Bytes()) // a broken connection fails the sender's request
}

// ErrNotElsewhere is Options.ShardSend's answer when no other shard
// holds the queue.
var ErrNotElsewhere = errors.New("server: no other shard holds the queue")

// elsewhere is the amqp.Elsewhere of a server whose Options name the
// queues other shards hold (NameTaken) and reach their leaders
// (ShardSend).
type elsewhere struct {
	holds func(name string) bool
	post  func(ctx context.Context, name string, body []byte) ([]byte, error)
}

func (e elsewhere) Holds(name string) bool { return e.holds(name) }

// Send sends msgs in requests of at most ShardSendChunk bytes of messages
// (a message is never split), one after the other: a request that fails
// fails its messages and those not yet sent (an AMQP publisher has them
// nacked and sends them again), without an error for the whole call once
// one request has gone through.
func (e elsewhere) Send(ctx context.Context, name string, msgs []engine.Message) ([]engine.SendResult, error) {
	out := make([]engine.SendResult, 0, len(msgs))
	for len(msgs) > 0 {
		end, size := 0, 0
		for end < len(msgs) && (end == 0 || size+msgs[end].Size()+len(msgs[end].Envelope) <= ShardSendChunk) {
			size += msgs[end].Size() + len(msgs[end].Envelope)
			end++
		}
		res, err := e.sendChunk(ctx, name, msgs[:end])
		switch {
		case errors.Is(err, engine.ErrQueueNotFound) && len(out) == 0:
			return nil, err
		case err != nil:
			for range msgs {
				out = append(out, engine.SendResult{Err: err})
			}
			return out, nil
		}
		out = append(out, res...)
		msgs = msgs[end:]
	}
	return out, nil
}

// sendChunk sends one ShardSendPath request.
func (e elsewhere) sendChunk(ctx context.Context, name string, msgs []engine.Message) ([]engine.SendResult, error) {
	if len(msgs) == 1 && msgs[0].Size() > engine.MaxMaxMessageSize {
		// Every queue another shard holds is an SQS queue, whose limit is
		// at most this: its engine would refuse the message.
		return []engine.SendResult{{Err: &engine.MessageTooLargeError{Size: msgs[0].Size(), Limit: engine.MaxMaxMessageSize}}}, nil
	}
	body, err := EncodeShardSend(name, msgs)
	if err != nil {
		return nil, err
	}
	reply, err := e.post(ctx, name, body)
	if errors.Is(err, ErrNotElsewhere) {
		return nil, engine.ErrQueueNotFound
	}
	if err != nil {
		return nil, err
	}
	return DecodeShardSendReply(reply, len(msgs))
}

// amqpElsewhere returns the amqp.Elsewhere of opts, or nil.
func amqpElsewhere(opts Options) amqp.Elsewhere {
	if opts.NameTaken == nil || opts.ShardSend == nil {
		return nil
	}
	return elsewhere{holds: opts.NameTaken, post: opts.ShardSend}
}
