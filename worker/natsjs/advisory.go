package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicemq/sluice/worker"
	"github.com/sluicemq/sluice/worker/dlq"
)

// maxDeliverAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver event the mover reads.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// MoveMaxDelivered is the backstop for messages the server stopped
// delivering (MaxDeliver reached: workers died on the last attempt and
// on the spare delivery). It listens for the MAX_DELIVERIES advisories
// of o.Stream/o.Consumer until ctx is done and dead-letters each message
// they name: read with GetMsg, published to the DLQ subject with reason
// delivery_exceeded under the same Nats-Msg-Id a worker would use (so a
// copy a worker already wrote collapses in the duplicate window). The
// message stays in a Limits stream, as JetStream keeps max-delivered
// messages; on a WorkQueue stream it is deleted after the publish.
//
// Advisories are core NATS messages, delivered at most once: one sent
// while no mover runs is lost. For a durable capture, add a stream on
// $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.> and consume it instead.
// o is the Source's Options (Stream, Consumer, DLQSubject).
func MoveMaxDelivered(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, o Options) error {
	if o.Stream == "" || o.Consumer == "" {
		return errors.New("natsjs: Stream and Consumer are required")
	}
	if o.DLQSubject == "" {
		o.DLQSubject = "dlq." + o.Stream + "." + o.Consumer
	}
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+o.Stream+"."+o.Consumer, ch)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			var a maxDeliverAdvisory
			if err := json.Unmarshal(m.Data, &a); err != nil || a.StreamSeq == 0 {
				continue
			}
			if err := moveOne(ctx, js, o, a); err != nil && o.Logger != nil {
				o.Logger.Warn("could not dead-letter a max-delivered message", "stream", a.Stream, "seq", a.StreamSeq, "err", err)
			}
		}
	}
}

func moveOne(ctx context.Context, js jetstream.JetStream, o Options, a maxDeliverAdvisory) error {
	st, err := js.Stream(ctx, o.Stream)
	if err != nil {
		return err
	}
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if err != nil {
		return fmt.Errorf("get %d: %w", a.StreamSeq, err)
	}
	id := o.Stream + ":" + strconv.FormatUint(a.StreamSeq, 10)
	attrs := map[string]string{}
	for k, v := range raw.Header {
		if len(v) > 0 {
			attrs[k] = v[0]
		}
	}
	m := &worker.Message{ID: id, OriginalID: attrs[dlq.FieldOriginID], Attempt: a.Deliveries, SentAt: raw.Time}
	f := worker.Failure{ErrorClass: "sluice.DeliveryLimit", ConsumerID: "natsjs-advisory-mover",
		ErrorMessage: fmt.Sprintf("the server stopped after %d deliveries (MaxDeliver) without a settled failure", a.Deliveries)}
	c := dlq.NewContext(m, f, dlq.ReasonOverLimit, id+":"+o.Consumer, o.Stream, dlq.Redrives(attrs), time.Now())
	out := nats.NewMsg(o.DLQSubject)
	out.Data = raw.Data
	for k, v := range raw.Header {
		if !dlq.IsContextField(k) && k != nats.MsgIdHdr {
			out.Header[k] = v
		}
	}
	for k, v := range c.Fields(0) {
		out.Header.Set(k, v)
	}
	out.Header.Set(HeaderSubject, raw.Subject)
	if _, err := js.PublishMsg(ctx, out, jetstream.WithMsgID(id+":"+o.Consumer)); err != nil {
		return err
	}
	if info := st.CachedInfo(); info != nil && info.Config.Retention == jetstream.WorkQueuePolicy {
		return st.DeleteMsg(ctx, a.StreamSeq)
	}
	return nil
}
