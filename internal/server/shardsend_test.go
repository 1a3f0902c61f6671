package server

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
)

// TestShardSendErrorsCross: an engine error answered by another shard's
// leader arrives as the same sentinel (what the AMQP front-end tells
// apart: a queue gone is unroutable, a full queue is nacked), with its
// text; an error without a sentinel arrives as its text.
func TestShardSendErrorsCross(t *testing.T) {
	for _, s := range sendSentinels {
		got := toSendError(fmt.Errorf("queue q: %w", s)).err()
		if !errors.Is(got, s) {
			t.Errorf("%v arrived as %v", s, got)
		}
	}
	other := toSendError(&engine.MessageTooLargeError{Size: 9, Limit: 1}).err()
	if other == nil || errors.Is(other, engine.ErrQueueNotFound) || errors.Is(other, engine.ErrQueueFull) {
		t.Errorf("a message too large arrived as %v", other)
	}
	if toSendError(nil).err() != nil {
		t.Error("no error arrived as one")
	}
}

// TestShardSendRoundTrip: a request's messages arrive whole (body,
// envelope, attributes, TTL), and a reply's results and errors in order.
func TestShardSendRoundTrip(t *testing.T) {
	msgs := []engine.Message{
		{Body: []byte("one"), Envelope: []byte{1, 2, 3}, TTL: 5, TTLSet: true,
			Attributes: []engine.Attribute{{Name: "origin", DataType: "String", StringValue: "node-1"}}},
		{Body: []byte("two")},
	}
	body, err := EncodeShardSend("orders", msgs)
	if err != nil {
		t.Fatal(err)
	}
	req, err := decodeShardSend(body)
	if err != nil {
		t.Fatal(err)
	}
	if req.Queue != "orders" || len(req.Msgs) != 2 || string(req.Msgs[0].Body) != "one" || !bytes.Equal(req.Msgs[0].Envelope, []byte{1, 2, 3}) ||
		req.Msgs[0].TTL != 5 || !req.Msgs[0].TTLSet || len(req.Msgs[0].Attributes) != 1 || req.Msgs[0].Attributes[0].StringValue != "node-1" ||
		string(req.Msgs[1].Body) != "two" {
		t.Fatalf("arrived: %+v", req)
	}

	var b bytes.Buffer
	reply := shardSendReply{Results: []shardSendResult{{MessageID: "a"}, {Err: toSendError(engine.ErrQueueFull)}}}
	if err := gob.NewEncoder(&b).Encode(reply); err != nil {
		t.Fatal(err)
	}
	res, err := DecodeShardSendReply(b.Bytes(), 2)
	if err != nil || res[0].MessageID != "a" || res[0].Err != nil || !errors.Is(res[1].Err, engine.ErrQueueFull) {
		t.Fatalf("reply: %+v, %v", res, err)
	}
	if _, err := DecodeShardSendReply(b.Bytes(), 3); err == nil {
		t.Fatal("a reply with 2 results for 3 messages was taken")
	}
	b.Reset()
	if err := gob.NewEncoder(&b).Encode(shardSendReply{Err: toSendError(engine.ErrNotLeading)}); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeShardSendReply(b.Bytes(), 2); !errors.Is(err, engine.ErrNotLeading) {
		t.Fatalf("a refused request arrived as %v", err)
	}
}

// FuzzShardSendDecoders: the node-only send path's decoders take any
// bytes without a panic, and a request they accept encodes again.
func FuzzShardSendDecoders(f *testing.F) {
	body, err := EncodeShardSend("q", []engine.Message{{Body: []byte("x"), Attributes: []engine.Attribute{{Name: "a", DataType: "String", StringValue: "b"}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	var b bytes.Buffer
	_ = gob.NewEncoder(&b).Encode(shardSendReply{Results: []shardSendResult{{MessageID: "m", Err: sendError{Sentinel: 2, Text: "full"}}}})
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if req, err := decodeShardSend(data); err == nil {
			if _, err := EncodeShardSend(req.Queue, req.Msgs); err != nil {
				t.Fatalf("a decoded request does not encode: %v", err)
			}
		}
		for n := range 3 {
			res, err := DecodeShardSendReply(data, n)
			if err == nil && len(res) != n {
				t.Fatalf("%d results for %d messages", len(res), n)
			}
		}
	})
}
