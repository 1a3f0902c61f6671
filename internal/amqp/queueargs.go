package amqp

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/engine"
)

// queueSettings are a queue's arguments, validated.
type queueSettings struct {
	ttl           time.Duration
	hasTTL        bool
	expires       time.Duration // 0: never
	maxLen        int
	maxBytes      int64
	overflow      string
	dlx           string
	hasDLX        bool
	dlrk          string
	hasDLRK       bool
	deliveryLimit int // -1: none
	qtype         string
	singleActive  bool // x-single-active-consumer (sac.go)
	maxPriority   int  // x-max-priority; 0: none

	// Sluice's dead-letter practice (docs/amqp-compat.md).
	requeue         string        // x-sluice-requeue: head (""), tail, delayed
	crashLimit      int           // x-sluice-crash-limit; 0: off
	crashWindow     time.Duration // x-sluice-crash-window (ms)
	consumerTimeout time.Duration // x-consumer-timeout (ms); 0: the server's
	retryBudget     int           // x-sluice-retry-budget (percent); 0: none
	unknownFailure  string        // x-sluice-unknown-failure: retry (""), deadletter
}

// defaultDeadLetterLimit is the delivery limit of a queue that names a
// dead-letter exchange without x-delivery-limit: five deliveries (the
// dead-letter practice's default, DLQ-02), as x-delivery-limit 4 would.
const defaultDeadLetterLimit = 4

// maxDeliveryLimit keeps x-delivery-limit+1 within the engine's
// MaxReceiveCount range.
const maxDeliveryLimit = 999

// parseQueueArgs validates a queue.declare's arguments as RabbitMQ does:
// integers of any tag, ranges, known values. Unknown arguments are kept and
// ignored.
func parseQueueArgs(vh, name string, args wire.Table) (queueSettings, *amqpError) {
	s := queueSettings{deliveryLimit: -1, qtype: "classic", crashLimit: engine.DefaultCrashLimit, crashWindow: engine.DefaultCrashWindow}
	bad := func(key, why string) *amqpError {
		return errorf(wire.PreconditionFailed, "invalid arg '%s' for %s: %s", key, rs("queue", name, vh), why)
	}
	intArg := func(key string, min int64) (int64, bool, *amqpError) {
		v, ok := args.Get(key)
		if !ok {
			return 0, false, nil
		}
		n, isInt := asInt(v)
		switch {
		case !isInt:
			return 0, false, bad(key, fmt.Sprintf("{unacceptable_type,%s}", typeName(v)))
		case n < 0 && min >= 0:
			return 0, false, bad(key, fmt.Sprintf("{value_negative,%d}", n))
		case n < min:
			return 0, false, bad(key, fmt.Sprintf("{value_zero,%d}", n))
		}
		return n, true, nil
	}
	strArg := func(key string) (string, bool, *amqpError) {
		v, ok := args.Get(key)
		if !ok {
			return "", false, nil
		}
		str, isStr := v.(string)
		if !isStr {
			return "", false, bad(key, fmt.Sprintf("{unacceptable_type,%s}", typeName(v)))
		}
		return str, true, nil
	}
	if n, ok, err := intArg("x-message-ttl", 0); err != nil {
		return s, err
	} else if ok {
		if n > 1<<32-1 {
			return s, bad("x-message-ttl", fmt.Sprintf("{value_too_large,%d,%d}", n, int64(1<<32-1)))
		}
		s.ttl, s.hasTTL = time.Duration(n)*time.Millisecond, true
	}
	if n, ok, err := intArg("x-expires", 1); err != nil {
		return s, err
	} else if ok {
		s.expires = time.Duration(n) * time.Millisecond
	}
	if n, ok, err := intArg("x-max-length", 0); err != nil {
		return s, err
	} else if ok {
		s.maxLen = int(min(n, 1<<31-1))
	}
	if n, ok, err := intArg("x-max-priority", 0); err != nil {
		return s, err
	} else if ok {
		if n > engine.MaxPriority {
			return s, bad("x-max-priority", fmt.Sprintf("{max_value_exceeded,%d}", n))
		}
		s.maxPriority = int(n)
	}
	if n, ok, err := intArg("x-max-length-bytes", 0); err != nil {
		return s, err
	} else if ok {
		s.maxBytes = n
	}
	if v, ok, err := strArg("x-overflow"); err != nil {
		return s, err
	} else if ok {
		switch v {
		case engine.OverflowDropHead, engine.OverflowRejectPublish, engine.OverflowRejectPublishDLX:
			s.overflow = v
		default:
			return s, bad("x-overflow", fmt.Sprintf("{unacceptable_value,<<\"%s\">>}", v))
		}
	}
	if v, ok, err := strArg("x-dead-letter-exchange"); err != nil {
		return s, err
	} else if ok {
		s.dlx, s.hasDLX = v, true
	}
	if v, ok, err := strArg("x-dead-letter-routing-key"); err != nil {
		return s, err
	} else if ok {
		if !s.hasDLX {
			return s, bad("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")
		}
		s.dlrk, s.hasDLRK = v, true
	}
	if v, ok, err := strArg("x-queue-type"); err != nil {
		return s, err
	} else if ok {
		switch v {
		case "classic", "quorum":
			s.qtype = v
		default:
			return s, bad("x-queue-type", fmt.Sprintf("{unsupported_queue_type,<<\"%s\">>}", v))
		}
	}
	if v, ok := args.Get("x-single-active-consumer"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return s, bad("x-single-active-consumer", fmt.Sprintf("{unacceptable_type,%s}", typeName(v)))
		}
		s.singleActive = b
	}
	if s.qtype == "quorum" {
		s.deliveryLimit = 20 // RabbitMQ 4.0+
	}
	if s.hasDLX {
		// A named dead-letter queue gets a finite budget by default
		// (DLQ-02), not RabbitMQ's unlimited requeues.
		s.deliveryLimit = defaultDeadLetterLimit
	}
	if err := parseSluiceArgs(&s, args, intArg, strArg, bad); err != nil {
		return s, err
	}
	if v, ok := args.Get("x-delivery-limit"); ok {
		n, isInt := asInt(v)
		if !isInt {
			return s, bad("x-delivery-limit", fmt.Sprintf("{unacceptable_type,%s}", typeName(v)))
		}
		switch {
		case n < 0:
			s.deliveryLimit = -1
		case n > maxDeliveryLimit:
			return s, bad("x-delivery-limit", fmt.Sprintf("{value_too_large,%d,%d}", n, maxDeliveryLimit))
		default:
			s.deliveryLimit = int(n)
		}
	}
	return s, nil
}

// parseSluiceArgs reads the per-queue consumer timeout and Sluice's
// dead-letter arguments:
//
//   - x-consumer-timeout (ms, RabbitMQ's queue argument): how long a
//     delivery may stay unacknowledged, 1 s to 11 h 59 m;
//   - x-sluice-requeue: what nack/reject with requeue=true does: head
//     (RabbitMQ's, the default), tail or delayed (the retry backoff);
//   - x-sluice-crash-limit (0 turns quarantine off) and
//     x-sluice-crash-window (ms): crash-loop quarantine;
//   - x-sluice-retry-budget (percent, 0–100): retries allowed per first
//     delivery, the rest delayed;
//   - x-sluice-unknown-failure: retry (default) or deadletter, what a
//     nack with requeue=true means.
func parseSluiceArgs(s *queueSettings, args wire.Table,
	intArg func(string, int64) (int64, bool, *amqpError),
	strArg func(string) (string, bool, *amqpError),
	bad func(key, why string) *amqpError) *amqpError {
	if n, ok, err := intArg("x-consumer-timeout", 1); err != nil {
		return err
	} else if ok {
		d := time.Duration(min(n, int64(engine.MaxVisibility/time.Millisecond))) * time.Millisecond
		if d < time.Second || d > engine.MaxVisibility-time.Minute {
			return bad("x-consumer-timeout", fmt.Sprintf("{value_out_of_range,%d}", n))
		}
		s.consumerTimeout = d
	}
	if v, ok, err := strArg("x-sluice-requeue"); err != nil {
		return err
	} else if ok {
		switch v {
		case engine.RequeueHead, engine.RequeueTail, engine.RequeueDelayed:
			s.requeue = v
		default:
			return bad("x-sluice-requeue", fmt.Sprintf("{unacceptable_value,<<\"%s\">>}", v))
		}
	}
	if n, ok, err := intArg("x-sluice-crash-limit", 0); err != nil {
		return err
	} else if ok {
		if n > 1000 {
			return bad("x-sluice-crash-limit", fmt.Sprintf("{value_too_large,%d,1000}", n))
		}
		s.crashLimit = int(n)
	}
	if v, ok, err := strArg("x-sluice-unknown-failure"); err != nil {
		return err
	} else if ok {
		switch v {
		case engine.UnknownRetry, engine.UnknownDeadLetter:
			s.unknownFailure = v
		default:
			return bad("x-sluice-unknown-failure", fmt.Sprintf("{unacceptable_value,<<\"%s\">>}", v))
		}
	}
	if n, ok, err := intArg("x-sluice-retry-budget", 0); err != nil {
		return err
	} else if ok {
		if n > 100 {
			return bad("x-sluice-retry-budget", fmt.Sprintf("{value_too_large,%d,100}", n))
		}
		s.retryBudget = int(n)
	}
	if n, ok, err := intArg("x-sluice-crash-window", 1); err != nil {
		return err
	} else if ok {
		if n > int64(engine.MaxVisibility/time.Millisecond) {
			return bad("x-sluice-crash-window", fmt.Sprintf("{value_too_large,%d,%d}", n, int64(engine.MaxVisibility/time.Millisecond)))
		}
		s.crashWindow = time.Duration(n) * time.Millisecond
	}
	return nil
}

// timeout is the queue's consumer timeout: its x-consumer-timeout, else
// the server's.
func (s *queueSettings) timeout(server time.Duration) time.Duration {
	if s.consumerTimeout > 0 {
		return s.consumerTimeout
	}
	return server
}

// engineConfig is the engine configuration of an AMQP queue. Messages are
// kept for the engine's longest retention; the visibility timeout is the
// consumer timeout plus a margin (Sluice closes the channel at the
// timeout, before the engine would release the message).
func engineConfig(s queueSettings, consumerTimeout time.Duration) engine.QueueConfig {
	cfg := engine.DefaultQueueConfig()
	// The AMQP front-end enforces Options.MaxMessageSize at publish; the
	// engine's own check is only a backstop at its largest size.
	cfg.MaxMessageSize = engine.MaxStoredMessageSize
	cfg.Retention = engine.MaxRetention
	cfg.Visibility = leaseFor(s.timeout(consumerTimeout))
	cfg.Requeue = s.requeue
	cfg.CrashLimit, cfg.CrashWindow = s.crashLimit, s.crashWindow
	cfg.RetryBudgetPercent = s.retryBudget
	cfg.UnknownFailure = s.unknownFailure
	cfg.MessageTTL, cfg.HasMessageTTL = s.ttl, s.hasTTL
	cfg.MaxLength, cfg.MaxLengthBytes, cfg.Overflow = s.maxLen, s.maxBytes, s.overflow
	cfg.MaxPriority = s.maxPriority
	if s.hasDLX || s.deliveryLimit >= 0 {
		p := &engine.DeadLetterPolicy{Routed: true}
		if s.deliveryLimit >= 0 {
			// RabbitMQ dead-letters when a return makes the delivery
			// count exceed the limit: after limit+1 deliveries.
			p.MaxReceiveCount = s.deliveryLimit + 1
		}
		cfg.DeadLetter = p
	}
	return cfg
}

// leaseFor is the engine lease of a delivered message.
func leaseFor(consumerTimeout time.Duration) time.Duration {
	return min(consumerTimeout+time.Minute, engine.MaxVisibility)
}

// equivalentKeys are the arguments compared on a redeclare (RabbitMQ
// compares a fixed list per queue type; unknown x- keys are not compared).
var equivalentKeys = []string{
	"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-expires", "x-max-length",
	"x-max-length-bytes", "x-max-priority", "x-message-ttl", "x-overflow", "x-queue-mode",
	"x-queue-type", "x-delivery-limit", "x-single-active-consumer", "x-dead-letter-strategy",
}

// checkQueueEquivalent returns RabbitMQ's 406 when a redeclare differs from
// the queue in durable, auto-delete or a compared argument.
func checkQueueEquivalent(q *queue, durable, autoDelete bool, args wire.Table) *amqpError {
	res := rs("queue", q.name, q.vhost)
	if q.durable != durable {
		return errorf(wire.PreconditionFailed, "inequivalent arg 'durable' for %s: received '%t' but current is '%t'", res, durable, q.durable)
	}
	if q.autoDelete != autoDelete {
		return errorf(wire.PreconditionFailed, "inequivalent arg 'auto_delete' for %s: received '%t' but current is '%t'", res, autoDelete, q.autoDelete)
	}
	for _, k := range equivalentKeys {
		cur, hasCur := q.args.Get(k)
		got, hasGot := args.Get(k)
		if k == "x-queue-type" {
			if !hasCur {
				cur, hasCur = "classic", true
			}
			if !hasGot {
				got, hasGot = "classic", true
			}
		}
		if hasCur == hasGot && (!hasCur || valuesEqual(cur, got)) {
			continue
		}
		return errorf(wire.PreconditionFailed, "inequivalent arg '%s' for %s: received %s but current is %s", k, res, fmtArg(got, hasGot), fmtArg(cur, hasCur))
	}
	return nil
}

// fmtArg renders an argument as rabbit_misc:equivalence_fail does.
func fmtArg(v any, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("the value '%s' of type '%s'", fmtValue(v), typeName(v))
}

func fmtValue(v any) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case nil:
		return "undefined"
	}
	return fmt.Sprint(v)
}

// checkExchangeEquivalent returns RabbitMQ's 406 when an exchange redeclare
// differs in type, durable, auto-delete, internal or alternate-exchange.
func checkExchangeEquivalent(vh string, x *exchange, m *wire.ExchangeDeclare) *amqpError {
	res := rs("exchange", x.name, vh)
	field := func(name, got, cur string) *amqpError {
		return errorf(wire.PreconditionFailed, "inequivalent arg '%s' for %s: received '%s' but current is '%s'", name, res, got, cur)
	}
	switch {
	case x.kind != m.Type:
		return field("type", m.Type, x.kind)
	case x.durable != m.Durable:
		return field("durable", fmt.Sprint(m.Durable), fmt.Sprint(x.durable))
	case x.autoDelete != m.AutoDelete:
		return field("auto_delete", fmt.Sprint(m.AutoDelete), fmt.Sprint(x.autoDelete))
	case x.internal != m.Internal:
		return field("internal", fmt.Sprint(m.Internal), fmt.Sprint(x.internal))
	}
	cur, hasCur := x.args.Get("alternate-exchange")
	got, hasGot := m.Arguments.Get("alternate-exchange")
	if hasCur != hasGot || (hasCur && !valuesEqual(cur, got)) {
		return errorf(wire.PreconditionFailed, "inequivalent arg 'alternate-exchange' for %s: received %s but current is %s", res, fmtArg(got, hasGot), fmtArg(cur, hasCur))
	}
	return nil
}

// placeable reports whether a new queue with settings st can be created
// on another shard of a cluster (Placer), where no exchange is: not when
// it expires (x-expires: this server's sweep deletes queues of its own
// topology). A delivery limit, TTLs, length limits, priorities and the
// rest are the engine's there; a dead-letter exchange is this server's:
// that shard's engine sends each dead letter here to be routed
// (engine.ImportRouted, after AdoptSource); what a queue without one
// dead-letters is dropped and counted there as here.
func placeable(st queueSettings) bool { return st.expires == 0 }

// placedSettings returns, for an engine queue of another shard with
// configuration cfg, whether it was declared over AMQP (placedDeclared)
// and the arguments and settings it was declared with (none and the
// defaults for an SQS queue, or when the stored arguments cannot be read
// or are no longer valid, which is logged).
func placedSettings(vh, name string, cfg *engine.QueueConfig, log *slog.Logger) (bool, wire.Table, queueSettings) {
	none, _ := parseQueueArgs(vh, name, nil)
	if !placedDeclared(*cfg) {
		return false, nil, none
	}
	args, err := placedArguments(*cfg)
	if err != nil {
		log.Warn("amqp: a placed queue's stored arguments cannot be read; using defaults", "queue", name, "err", err)
		return true, nil, none
	}
	st, aerr := parseQueueArgs(vh, name, args)
	if aerr != nil {
		log.Warn("amqp: a placed queue's stored arguments are no longer valid; using defaults", "queue", name, "err", aerr.text)
		return true, nil, none
	}
	return true, args, st
}
