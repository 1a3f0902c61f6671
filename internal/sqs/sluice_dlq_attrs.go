package sqs

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/engine"
)

// Sluice's dead-letter practice queue attributes (docs/dlq-contract.md).
// Like SluiceRetryPolicy they are returned by GetQueueAttributes only when
// set (and with All), so AWS-exact clients see nothing new.
//
//   - SluiceRequeuePolicy: head, tail or delayed: where a failed delivery
//     returned with AMQP nack/reject(requeue=true) goes (DLQ-10). "" is
//     head.
//   - SluiceCrashLoopPolicy: {"limit":3,"windowSeconds":60}: deliveries
//     that end without a verdict (a lease that runs out with no failure
//     report) limit times within the window dead-letter the message with
//     reason consumer_crash (DLQ-110). "" turns it off (the SQS default:
//     AWS has no such rule).
//   - SluiceRetentionPeriod: seconds, 60 to 2592000 (30 days): retention
//     beyond MessageRetentionPeriod's 14-day maximum, for dead-letter
//     queues (DLQ-80). MessageRetentionPeriod then reads 1209600.
const (
	attrSluiceRequeuePolicy   = "SluiceRequeuePolicy"
	attrSluiceCrashLoopPolicy = "SluiceCrashLoopPolicy"
	attrSluiceRetentionPeriod = "SluiceRetentionPeriod"
	// SluiceRetryBudget: a percentage 1–100 ("" or 0: none): redeliveries
	// after failures (leases that ran out, nacks) beyond that share of
	// first deliveries are delayed (DLQ-40).
	attrSluiceRetryBudget = "SluiceRetryBudget"
	// SluiceUnknownFailure: retry or deadletter ("" = retry): what an
	// AMQP nack/reject with requeue=true means on this queue (DLQ-20).
	attrSluiceUnknownFailure = "SluiceUnknownFailure"
)

// parseSluiceDLQAttr validates one of the attributes above and returns its
// edit.
func parseSluiceDLQAttr(name, v string) (func(*engine.QueueConfig), *apiError) {
	switch name {
	case attrSluiceRequeuePolicy:
		switch v {
		case "", engine.RequeueHead, engine.RequeueTail, engine.RequeueDelayed:
		default:
			return nil, errParam(v, name, "Use head, tail or delayed.")
		}
		if v == engine.RequeueHead {
			v = ""
		}
		return func(c *engine.QueueConfig) { c.Requeue = v }, nil
	case attrSluiceCrashLoopPolicy:
		if v == "" {
			return func(c *engine.QueueConfig) { c.CrashLimit, c.CrashWindow = 0, 0 }, nil
		}
		var p struct {
			Limit         *int     `json:"limit"`
			WindowSeconds *float64 `json:"windowSeconds"`
		}
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil || dec.More() {
			return nil, errParam(v, name, `The policy must be a JSON object such as {"limit":3,"windowSeconds":60}.`)
		}
		limit, window := engine.DefaultCrashLimit, engine.DefaultCrashWindow
		if p.Limit != nil {
			limit = *p.Limit
		}
		if limit < 1 || limit > 1000 {
			return nil, errParam(v, name, "limit must be between 1 and 1000.")
		}
		if p.WindowSeconds != nil {
			w := *p.WindowSeconds
			if !(w >= 1 && w <= float64(engine.MaxVisibility/time.Second)) {
				return nil, errParam(v, name, "windowSeconds must be between 1 and 43200.")
			}
			window = time.Duration(w * float64(time.Second))
		}
		return func(c *engine.QueueConfig) { c.CrashLimit, c.CrashWindow = limit, window }, nil
	case attrSluiceUnknownFailure:
		switch v {
		case "", engine.UnknownRetry, engine.UnknownDeadLetter:
		default:
			return nil, errParam(v, name, "Use retry or deadletter.")
		}
		if v == engine.UnknownRetry {
			v = ""
		}
		return func(c *engine.QueueConfig) { c.UnknownFailure = v }, nil
	case attrSluiceRetryBudget:
		n := int64(0)
		if v != "" {
			var ok bool
			n, ok = parseStrictInt(v)
			if !ok || n < 0 || n > 100 {
				return nil, errParam(v, name, "Use a percentage from 0 (none) to 100.")
			}
		}
		return func(c *engine.QueueConfig) { c.RetryBudgetPercent = int(n) }, nil
	default: // attrSluiceRetentionPeriod
		n, ok := parseStrictInt(v)
		if !ok || n < int64(engine.MinRetention/time.Second) || n > int64(engine.MaxExtendedRetention/time.Second) {
			return nil, errParam(v, name, "Use a number of seconds from 60 to 2592000 (30 days).")
		}
		return func(c *engine.QueueConfig) { c.Retention = time.Duration(n) * time.Second }, nil
	}
}

// renderSluiceDLQAttrs adds the attributes above that are set to m.
func renderSluiceDLQAttrs(cfg *engine.QueueConfig, m map[string]string) {
	if cfg.Requeue != "" {
		m[attrSluiceRequeuePolicy] = cfg.Requeue
	}
	if cfg.CrashLimit > 0 {
		w := cfg.CrashWindow
		if w <= 0 {
			w = engine.DefaultCrashWindow
		}
		m[attrSluiceCrashLoopPolicy] = string(marshalJSON(struct {
			Limit         int     `json:"limit"`
			WindowSeconds float64 `json:"windowSeconds"`
		}{cfg.CrashLimit, w.Seconds()}))
	}
	if cfg.UnknownFailure != "" {
		m[attrSluiceUnknownFailure] = cfg.UnknownFailure
	}
	if cfg.RetryBudgetPercent > 0 {
		m[attrSluiceRetryBudget] = strconv.Itoa(cfg.RetryBudgetPercent)
	}
	if cfg.Retention > engine.MaxRetention {
		m[attrSluiceRetentionPeriod] = strconv.FormatInt(int64(cfg.Retention/time.Second), 10)
	}
}

// warnConfig logs, as warnings, what the advisor's dead-letter checks say
// about a queue just created or given a new RedrivePolicy (DLQ-151): no
// DLQ, a maxReceiveCount outside 3–10, a DLQ now shared by unrelated
// sources. SQS accepts all of these; the warning is for the operator.
func (h *Handler) warnConfig(queue string) {
	for _, f := range advisor.CreationWarnings(h.eng, queue) {
		h.log.Warn("queue configuration warning", "queue", queue, "subject", f.Queue, "check", f.Check, "verdict", string(f.Verdict), "reason", f.Reason)
	}
}
