package sqs

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Sluice's extensions of the SQS API. Both are opt-in, so clients that do
// not know them see plain SQS.
//
//   - Sluice system attributes on received messages: the dead-letter and
//     failure context and the redrive history the engine keeps. They are
//     system attributes (the Attributes map), never user MessageAttributes,
//     so they cannot change MD5OfMessageAttributes, which SDKs verify and
//     which SQS keeps identical on a dead-lettered copy. They are returned
//     only when asked for by exact name or by the "Sluice*" wildcard; "All"
//     does not include them.
//   - The SluiceRetryPolicy queue attribute: broker-side backoff before a
//     message whose lease ended is delivered again.

// Sluice system attribute names.
const (
	sysSluiceDeadLetterReason     = "SluiceDeadLetterReason"     // max_receives, terminal, …
	sysSluiceDeadLetterTimestamp  = "SluiceDeadLetterTimestamp"  // epoch ms
	sysSluiceAttempts             = "SluiceAttempts"             // receive count when dead-lettered
	sysSluiceLastReceiveTimestamp = "SluiceLastReceiveTimestamp" // epoch ms, last receive before dead-lettering
	sysSluiceErrorClass           = "SluiceErrorClass"
	sysSluiceErrorMessage         = "SluiceErrorMessage"
	sysSluiceErrorTrace           = "SluiceErrorTrace"
	sysSluiceConsumerID           = "SluiceConsumerId"
	sysSluiceConsumerVersion      = "SluiceConsumerVersion"
	sysSluiceOriginalMessageID    = "SluiceOriginalMessageId" // MessageId before the last redrive
	sysSluiceRedriveCount         = "SluiceRedriveCount"

	// sluiceAttrPrefix is the common prefix; sluiceWildcard selects every
	// Sluice attribute.
	sluiceAttrPrefix = "Sluice"
	sluiceWildcard   = "Sluice*"
)

// addSluiceAttributes adds to m the Sluice system attributes of d that
// names selects: exact names, or "Sluice*" for all. "All" is deliberately
// not enough. Attributes the message does not have are left out.
func addSluiceAttributes(m map[string]string, d *engine.Delivery, names []string) {
	if d.DeadLetter == nil && d.LastFailure == nil && d.Redrive == nil {
		return
	}
	var want map[string]bool
	all := false
	for _, n := range names {
		if !strings.HasPrefix(n, sluiceAttrPrefix) {
			continue
		}
		if n == sluiceWildcard {
			all = true
			break
		}
		if want == nil {
			want = map[string]bool{}
		}
		want[n] = true
	}
	if !all && want == nil {
		return
	}
	add := func(k, v string) {
		if v != "" && (all || want[k]) {
			m[k] = v
		}
	}
	ms := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatInt(t.UnixMilli(), 10)
	}
	if dl := d.DeadLetter; dl != nil {
		add(sysSluiceDeadLetterReason, dl.Reason)
		add(sysSluiceDeadLetterTimestamp, ms(dl.DeadLetteredAt))
		if dl.Attempts > 0 {
			add(sysSluiceAttempts, strconv.Itoa(dl.Attempts))
		}
		add(sysSluiceLastReceiveTimestamp, ms(dl.LastReceiveAt))
	}
	if f := d.LastFailure; f != nil {
		add(sysSluiceErrorClass, f.ErrorClass)
		add(sysSluiceErrorMessage, f.Message)
		add(sysSluiceErrorTrace, f.Trace)
		add(sysSluiceConsumerID, f.ConsumerID)
		add(sysSluiceConsumerVersion, f.ConsumerVersion)
	}
	if r := d.Redrive; r != nil {
		add(sysSluiceOriginalMessageID, r.OriginalMessageID)
		if r.Count > 0 {
			add(sysSluiceRedriveCount, strconv.Itoa(r.Count))
		}
	}
}

// The SluiceRetryPolicy queue attribute: a JSON object
//
//	{"strategy":"full-jitter","baseSeconds":1,"capSeconds":30}
//
// strategy is full-jitter (the default), decorrelated, exponential or
// fixed; baseSeconds (default 1) and capSeconds (required: an uncapped
// backoff is refused) are positive numbers of seconds, fractions allowed
// (millisecond resolution), with base ≤ cap ≤ 43200. Numeric strings are
// accepted as in RedrivePolicy. "" removes the policy.
const attrSluiceRetryPolicy = "SluiceRetryPolicy"

const maxRetrySeconds = float64(engine.MaxVisibility / time.Second)

// parseRetryPolicy validates a SluiceRetryPolicy value; nil means none.
func parseRetryPolicy(raw string) (*engine.RetryPolicy, *apiError) {
	if raw == "" {
		return nil, nil
	}
	bad := func(reason string) *apiError { return errParam(raw, attrSluiceRetryPolicy, reason) }
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m == nil {
		return nil, bad(`The policy must be a JSON object such as {"strategy":"full-jitter","baseSeconds":1,"capSeconds":30}.`)
	}
	for _, k := range sortedKeys(m) {
		switch k {
		case "strategy", "baseSeconds", "capSeconds":
		default:
			return nil, bad("Unknown key " + strconv.Quote(k) + "; the keys are strategy, baseSeconds and capSeconds.")
		}
	}
	p := &engine.RetryPolicy{Strategy: engine.RetryFullJitter, Base: time.Second}
	if s, ok := m["strategy"]; ok {
		if json.Unmarshal(s, &p.Strategy) != nil {
			return nil, bad("strategy must be a string.")
		}
		switch p.Strategy {
		case engine.RetryFullJitter, engine.RetryDecorrelated, engine.RetryExponential, engine.RetryFixed:
		default:
			return nil, bad("Unknown strategy " + strconv.Quote(p.Strategy) + "; use full-jitter, decorrelated, exponential or fixed.")
		}
	}
	if b, ok := m["baseSeconds"]; ok {
		d, ok := retrySeconds(b)
		if !ok {
			return nil, bad("baseSeconds must be a number of seconds greater than 0 and at most 43200.")
		}
		p.Base = d
	}
	c, ok := m["capSeconds"]
	if !ok {
		return nil, bad("capSeconds is required: an uncapped backoff keeps consumers waiting long after an outage.")
	}
	if p.Cap, ok = retrySeconds(c); !ok {
		return nil, bad("capSeconds must be a number of seconds greater than 0 and at most 43200.")
	}
	if p.Cap < p.Base {
		return nil, bad("capSeconds must not be less than baseSeconds.")
	}
	return p, nil
}

// retrySeconds reads a JSON number or numeric string of seconds in
// (0, 43200], rounded to the millisecond.
func retrySeconds(raw json.RawMessage) (time.Duration, bool) {
	raw = bytes.TrimSpace(raw)
	s := string(raw)
	if len(raw) > 0 && raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > maxRetrySeconds {
		return 0, false
	}
	d := time.Duration(math.Round(f*1000)) * time.Millisecond
	return d, d > 0
}

// renderRetryPolicy is the canonical form GetQueueAttributes returns and
// CreateQueue compares.
func renderRetryPolicy(p *engine.RetryPolicy) string {
	return string(marshalJSON(struct {
		Strategy string  `json:"strategy"`
		Base     float64 `json:"baseSeconds"`
		Cap      float64 `json:"capSeconds"`
	}{p.Strategy, p.Base.Seconds(), p.Cap.Seconds()}))
}
