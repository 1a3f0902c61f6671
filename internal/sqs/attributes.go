package sqs

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Queue attributes (reference §2) ↔ engine.QueueConfig.
//
// Attributes that the engine does not interpret are kept in
// QueueConfig.Extra under their SQS names: Policy, KmsMasterKeyId,
// KmsDataKeyReusePeriodSeconds and SqsManagedSseEnabled.

// Attribute names.
const (
	attrAll                       = "All"
	attrDelaySeconds              = "DelaySeconds"
	attrMaximumMessageSize        = "MaximumMessageSize"
	attrMessageRetentionPeriod    = "MessageRetentionPeriod"
	attrReceiveWaitTimeSeconds    = "ReceiveMessageWaitTimeSeconds"
	attrVisibilityTimeout         = "VisibilityTimeout"
	attrPolicy                    = "Policy"
	attrRedrivePolicy             = "RedrivePolicy"
	attrRedriveAllowPolicy        = "RedriveAllowPolicy"
	attrKmsMasterKeyID            = "KmsMasterKeyId"
	attrKmsDataKeyReusePeriod     = "KmsDataKeyReusePeriodSeconds"
	attrSqsManagedSseEnabled      = "SqsManagedSseEnabled"
	attrFifoQueue                 = "FifoQueue"
	attrContentBasedDedup         = "ContentBasedDeduplication"
	attrDeduplicationScope        = "DeduplicationScope"
	attrFifoThroughputLimit       = "FifoThroughputLimit"
	attrQueueArn                  = "QueueArn"
	attrApproxMessages            = "ApproximateNumberOfMessages"
	attrApproxMessagesNotVisible  = "ApproximateNumberOfMessagesNotVisible"
	attrApproxMessagesDelayed     = "ApproximateNumberOfMessagesDelayed"
	attrCreatedTimestamp          = "CreatedTimestamp"
	attrLastModifiedTimestamp     = "LastModifiedTimestamp"
	defaultKmsDataKeyReusePeriod  = "300"
	defaultFifoThroughputLimit    = "perQueue"
	msgSSEMutuallyExclusive       = "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."
	msgQueueNameInvalid           = "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
	msgFIFOQueueNameInvalid       = "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length."
	msgQueueExistsDifferentValues = "A queue already exists with the same name and a different value for attribute "
)

// readableAttribute reports whether GetQueueAttributes knows name.
func readableAttribute(name string) bool {
	switch name {
	case attrAll, attrDelaySeconds, attrMaximumMessageSize, attrMessageRetentionPeriod,
		attrReceiveWaitTimeSeconds, attrVisibilityTimeout, attrPolicy, attrRedrivePolicy,
		attrRedriveAllowPolicy, attrKmsMasterKeyID, attrKmsDataKeyReusePeriod,
		attrSqsManagedSseEnabled, attrFifoQueue, attrContentBasedDedup, attrDeduplicationScope,
		attrFifoThroughputLimit, attrQueueArn, attrApproxMessages, attrApproxMessagesNotVisible,
		attrApproxMessagesDelayed, attrCreatedTimestamp, attrLastModifiedTimestamp,
		attrSluiceRetryPolicy, attrSluiceRequeuePolicy, attrSluiceCrashLoopPolicy, attrSluiceRetentionPeriod, attrSluiceRetryBudget, attrSluiceUnknownFailure:
		return true
	}
	return false
}

func durationAttr(name string) (lo, hi int64, field func(*engine.QueueConfig) *time.Duration, ok bool) {
	switch name {
	case attrDelaySeconds:
		return 0, int64(engine.MaxDelay / time.Second), func(c *engine.QueueConfig) *time.Duration { return &c.Delay }, true
	case attrMessageRetentionPeriod:
		return int64(engine.MinRetention / time.Second), int64(engine.MaxRetention / time.Second), func(c *engine.QueueConfig) *time.Duration { return &c.Retention }, true
	case attrReceiveWaitTimeSeconds:
		return 0, int64(engine.MaxWait / time.Second), func(c *engine.QueueConfig) *time.Duration { return &c.ReceiveWait }, true
	case attrVisibilityTimeout:
		return 0, int64(engine.MaxVisibility / time.Second), func(c *engine.QueueConfig) *time.Duration { return &c.Visibility }, true
	}
	return 0, 0, nil, false
}

// parseStrictInt parses a decimal integer attribute value.
func parseStrictInt(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// parseAttributes validates the attributes of a CreateQueue or
// SetQueueAttributes request for queue name (fifo says its type) and
// returns a function that applies them to a configuration. All checks,
// including the dead-letter queue lookup, happen here, so the returned
// function cannot fail and is safe to run inside engine.UpdateQueue.
func (c *call) parseAttributes(attrs map[string]string, name string, fifo bool) (func(*engine.QueueConfig), *apiError) {
	var edits []func(*engine.QueueConfig)
	for _, k := range sortedKeys(attrs) {
		v := attrs[k]
		if lo, hi, field, ok := durationAttr(k); ok {
			n, ok := parseStrictInt(v)
			if !ok || n < lo || n > hi {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { *field(cfg) = time.Duration(n) * time.Second })
			continue
		}
		switch k {
		case attrMaximumMessageSize:
			n, ok := parseStrictInt(v)
			if !ok || n < engine.MinMaxMessageSize || n > engine.MaxMaxMessageSize {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.MaxMessageSize = int(n) })
		case attrKmsDataKeyReusePeriod:
			n, ok := parseStrictInt(v)
			if !ok || n < 60 || n > 86400 {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, setExtra(k, strconv.FormatInt(n, 10)))
		case attrKmsMasterKeyID:
			if v != "" && attrs[attrSqsManagedSseEnabled] == "true" {
				return nil, newErr(kindInvalidAttrName, msgSSEMutuallyExclusive)
			}
			if v == "" {
				edits = append(edits, setExtra(k, ""))
			} else {
				edits = append(edits, setExtra(k, v), setExtra(attrSqsManagedSseEnabled, "false"))
			}
		case attrSqsManagedSseEnabled:
			b, ok := parseBool(v)
			if !ok {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, setExtra(k, b))
			if b == "true" {
				edits = append(edits, setExtra(attrKmsMasterKeyID, ""))
			}
		case attrPolicy:
			if v != "" && !isJSONObject(v) {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, setExtra(k, v))
		case attrRedrivePolicy:
			p, err := c.parseRedrivePolicy(v, name, fifo)
			if err != nil {
				return nil, err
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.DeadLetter = p })
		case attrRedriveAllowPolicy:
			p, err := c.parseRedriveAllowPolicy(v)
			if err != nil {
				return nil, err
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.RedriveAllow = p })
		case attrSluiceRetryPolicy:
			p, err := parseRetryPolicy(v)
			if err != nil {
				return nil, err
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.Retry = p })
		case attrFifoQueue:
			// A standard queue knows no FifoQueue attribute, not even
			// "false" at creation; a FIFO queue accepts its own type
			// again as a no-op (AWS-recorded).
			if !fifo {
				return nil, errUnknownAttribute(k)
			}
			if b, _ := parseBool(v); b != "true" {
				return nil, newErr(kindInvalidAttrValue, "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.")
			}
		case attrContentBasedDedup:
			if !fifo {
				return nil, errUnknownAttribute(k)
			}
			b, ok := parseBool(v)
			if !ok {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.ContentBasedDedup = b == "true" })
		case attrDeduplicationScope:
			if !fifo {
				return nil, newErr(kindInvalidAttrName, "You can specify the DeduplicationScope only when FifoQueue is set to true.")
			}
			var scope engine.DedupScope
			switch v {
			case "queue":
				scope = engine.DedupScopeQueue
			case "messageGroup":
				scope = engine.DedupScopeMessageGroup
			default:
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.DedupScope = scope })
		case attrFifoThroughputLimit:
			if !fifo {
				return nil, newErr(kindInvalidAttrName, "You can specify the FifoThroughputLimit only when FifoQueue is set to true.")
			}
			if v != "perQueue" && v != "perMessageGroupId" {
				return nil, errInvalidAttrValue(k)
			}
			edits = append(edits, func(cfg *engine.QueueConfig) { cfg.FifoThroughputLimit = v })
		case attrSluiceRequeuePolicy, attrSluiceCrashLoopPolicy, attrSluiceRetentionPeriod, attrSluiceRetryBudget, attrSluiceUnknownFailure:
			edit, err := parseSluiceDLQAttr(k, v)
			if err != nil {
				return nil, err
			}
			edits = append(edits, edit)
		default:
			// Unknown names and the read-only ones (QueueArn, …) alike.
			return nil, errUnknownAttribute(k)
		}
	}
	return func(cfg *engine.QueueConfig) {
		for _, e := range edits {
			e(cfg)
		}
	}, nil
}

// parseBool accepts SQS's boolean attribute spellings and returns the
// canonical "true" or "false".
func parseBool(v string) (string, bool) {
	switch strings.ToLower(v) {
	case "true":
		return "true", true
	case "false":
		return "false", true
	}
	return "", false
}

// setExtra sets (or, for "", removes) an uninterpreted attribute.
func setExtra(k, v string) func(*engine.QueueConfig) {
	return func(cfg *engine.QueueConfig) {
		if v == "" {
			delete(cfg.Extra, k)
			return
		}
		if cfg.Extra == nil {
			cfg.Extra = map[string]string{}
		}
		cfg.Extra[k] = v
	}
}

func isJSONObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}

// queueNameFromARN reads arn:aws:sqs:<region>:<account>:<name> and checks
// that it names a queue of this server.
func (h *Handler) queueNameFromARN(arn string) (string, bool) {
	region, account, name, ok := splitQueueARN(arn)
	if !ok || region != h.region || account != h.account || !engine.ValidQueueName(name) {
		return "", false
	}
	return name, true
}

// splitQueueARN splits a queue ARN, arn:<partition>:sqs:<region>:<account>:<name>
// with a partition starting "aws" and a non-empty name. ok is false for any
// other shape; region, account and name are not checked.
func splitQueueARN(arn string) (region, account, name string, ok bool) {
	p := strings.Split(arn, ":")
	if len(p) != 6 || p[0] != "arn" || !strings.HasPrefix(p[1], "aws") || p[2] != "sqs" || p[5] == "" {
		return "", "", "", false
	}
	return p[3], p[4], p[5], true
}

// redriveTargetKey is the RedrivePolicy member naming the dead-letter queue.
const redriveTargetKey = "deadLetterTargetArn"

// redrivePolicyMembers decodes a RedrivePolicy's members, keyed exactly as
// written; nil when raw is not a JSON object.
func redrivePolicyMembers(raw string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &m) != nil {
		return nil
	}
	return m
}

// parseRedrivePolicy validates a RedrivePolicy for source queue src:
// {"deadLetterTargetArn": "<arn>", "maxReceiveCount": N}, both keys
// required, N 1–1000 as a number or a numeric string. "" removes the policy
// (nil). The dead-letter queue must exist, be of the source's type, and
// allow the source in its RedriveAllowPolicy.
func (c *call) parseRedrivePolicy(raw, src string, fifo bool) (*engine.DeadLetterPolicy, *apiError) {
	if raw == "" {
		return nil, nil
	}
	bad := func(reason string) *apiError { return errParam(raw, attrRedrivePolicy, reason) }
	m := redrivePolicyMembers(raw)
	if m == nil {
		return nil, bad("Invalid value for RedrivePolicy: the policy is not a JSON object.")
	}
	arnRaw, ok := m[redriveTargetKey]
	if !ok {
		return nil, bad("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
	}
	countRaw, ok := m["maxReceiveCount"]
	if !ok {
		return nil, bad("Redrive policy does not contain mandatory attribute: maxReceiveCount.")
	}
	var arn string
	if json.Unmarshal(arnRaw, &arn) != nil {
		return nil, bad("Invalid value for deadLetterTargetArn.")
	}
	count, ok := parseCount(countRaw)
	if !ok || count < 1 || count > 1000 {
		return nil, bad("Invalid value for maxReceiveCount: " + string(countRaw) + ", valid values are from 1 to 1000 both inclusive.")
	}
	dlq, ok := c.h.queueNameFromARN(arn)
	if !ok {
		return nil, bad("Dead letter target does not exist.")
	}
	if err := c.authorize(dlq); err != nil {
		return nil, err
	}
	info, err := c.h.eng.GetQueue(dlq)
	if errors.Is(err, engine.ErrQueueNotFound) {
		ee, ok := c.h.eng.(QueuesElsewhere)
		if !ok || !c.h.eng.QueueElsewhere(dlq) {
			return nil, bad("Dead letter target does not exist.")
		}
		// A cluster with shards: the target lives on another shard, to
		// which this source's dead letters move (ADR 0015 step 5).
		if info, err = ee.GetQueueElsewhere(dlq); errors.Is(err, engine.ErrQueueNotFound) {
			return nil, bad("Dead letter target does not exist.")
		}
	}
	if err != nil {
		return nil, mapEngineErr(err, errDetail{queue: dlq})
	}
	if info.Config.FIFO != fifo {
		return nil, bad("Dead-letter queue must be same type of queue as the source.")
	}
	if ap := info.Config.RedriveAllow; ap != nil && dlq != src {
		allowed := ap.Permission == "allowAll"
		if ap.Permission == "byQueue" {
			for _, s := range ap.SourceQueues {
				allowed = allowed || s == src
			}
		}
		if !allowed {
			return nil, bad("Queue " + c.h.queueARN(dlq) + " does not allow this queue to use it as a dead-letter queue.")
		}
	}
	return &engine.DeadLetterPolicy{Target: dlq, MaxReceiveCount: int(count)}, nil
}

// parseCount reads a JSON number or numeric string as an integer.
func parseCount(raw json.RawMessage) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	var s string
	if len(raw) > 0 && raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
	} else {
		s = string(raw)
	}
	return parseStrictInt(strings.TrimSpace(s))
}

// parseRedriveAllowPolicy validates a RedriveAllowPolicy:
// {"redrivePermission": "allowAll"|"denyAll"|"byQueue", "sourceQueueArns": [...]},
// with 1–10 source ARNs exactly when the permission is byQueue. "" removes
// the policy (nil: allow all).
func (c *call) parseRedriveAllowPolicy(raw string) (*engine.RedriveAllowPolicy, *apiError) {
	if raw == "" {
		return nil, nil
	}
	bad := func(reason string) *apiError { return errParam(raw, attrRedriveAllowPolicy, reason) }
	var doc struct {
		RedrivePermission *string   `json:"redrivePermission"`
		SourceQueueArns   *[]string `json:"sourceQueueArns"`
	}
	if err := json.Unmarshal([]byte(raw), &doc); err != nil || !isJSONObject(raw) {
		return nil, bad("Invalid value for RedriveAllowPolicy: the policy is not a valid JSON object.")
	}
	if doc.RedrivePermission == nil {
		return nil, bad("Redrive allow policy does not contain mandatory attribute: redrivePermission.")
	}
	p := &engine.RedriveAllowPolicy{Permission: *doc.RedrivePermission}
	switch p.Permission {
	case "allowAll", "denyAll":
		if doc.SourceQueueArns != nil && len(*doc.SourceQueueArns) > 0 {
			return nil, bad("Only use sourceQueueArns when redrivePermission is set to byQueue.")
		}
	case "byQueue":
		if doc.SourceQueueArns == nil || len(*doc.SourceQueueArns) == 0 {
			return nil, bad("You must specify sourceQueueArns when redrivePermission is set to byQueue.")
		}
		if len(*doc.SourceQueueArns) > 10 {
			return nil, bad("Maximum number of sourceQueueArns is 10.")
		}
		for _, arn := range *doc.SourceQueueArns {
			name, ok := c.h.queueNameFromARN(arn)
			if !ok {
				return nil, bad("Invalid value for sourceQueueArns: " + arn + ".")
			}
			p.SourceQueues = append(p.SourceQueues, name)
		}
	default:
		return nil, bad("Invalid value for redrivePermission. Valid values are allowAll, denyAll and byQueue.")
	}
	return p, nil
}

// queueAttributes renders every attribute of a queue as GetQueueAttributes
// "All" returns it (values are strings; timestamps in epoch seconds).
func (h *Handler) queueAttributes(info *engine.QueueInfo) map[string]string {
	cfg := &info.Config
	m := map[string]string{
		attrApproxMessages:           strconv.Itoa(info.Visible),
		attrApproxMessagesNotVisible: strconv.Itoa(info.InFlight),
		attrApproxMessagesDelayed:    strconv.Itoa(info.Delayed),
		attrCreatedTimestamp:         strconv.FormatInt(info.CreatedAt.Unix(), 10),
		attrLastModifiedTimestamp:    strconv.FormatInt(info.ModifiedAt.Unix(), 10),
		attrQueueArn:                 h.queueARN(info.Name),
	}
	for k, v := range h.configAttributes(cfg) {
		m[k] = v
	}
	return m
}

// configAttributes renders the settable attributes of a configuration.
// CreateQueue compares these to decide whether an existing queue matches.
func (h *Handler) configAttributes(cfg *engine.QueueConfig) map[string]string {
	secs := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }
	m := map[string]string{
		attrDelaySeconds:           secs(cfg.Delay),
		attrMaximumMessageSize:     strconv.Itoa(sqsMaxMessageSize(cfg)),
		attrMessageRetentionPeriod: secs(min(cfg.Retention, engine.MaxRetention)),
		attrReceiveWaitTimeSeconds: secs(cfg.ReceiveWait),
		attrVisibilityTimeout:      secs(cfg.Visibility),
		attrSqsManagedSseEnabled:   "false",
	}
	for _, k := range []string{attrPolicy, attrKmsMasterKeyID, attrKmsDataKeyReusePeriod, attrSqsManagedSseEnabled} {
		if v := cfg.Extra[k]; v != "" {
			m[k] = v
		}
	}
	// The reuse period belongs to the KMS key: without a key neither is
	// listed (AWS lists no Kms attribute after KmsMasterKeyId="").
	if m[attrKmsMasterKeyID] == "" {
		delete(m, attrKmsDataKeyReusePeriod)
	} else if m[attrKmsDataKeyReusePeriod] == "" {
		m[attrKmsDataKeyReusePeriod] = defaultKmsDataKeyReusePeriod
	}
	// An AMQP dead-letter exchange (Routed) or a policy without a receive
	// limit has no SQS RedrivePolicy equivalent; SQS clients see none.
	if p := cfg.DeadLetter; p != nil && !p.Routed && p.Target != "" && p.MaxReceiveCount > 0 {
		m[attrRedrivePolicy] = string(marshalJSON(struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     int    `json:"maxReceiveCount"`
		}{h.queueARN(p.Target), p.MaxReceiveCount}))
	}
	if p := cfg.RedriveAllow; p != nil {
		doc := struct {
			RedrivePermission string   `json:"redrivePermission"`
			SourceQueueArns   []string `json:"sourceQueueArns,omitempty"`
		}{RedrivePermission: p.Permission}
		for _, s := range p.SourceQueues {
			doc.SourceQueueArns = append(doc.SourceQueueArns, h.queueARN(s))
		}
		m[attrRedriveAllowPolicy] = string(marshalJSON(doc))
	}
	if cfg.Retry != nil {
		m[attrSluiceRetryPolicy] = renderRetryPolicy(cfg.Retry)
	}
	renderSluiceDLQAttrs(cfg, m)
	if cfg.FIFO {
		m[attrFifoQueue] = "true"
		m[attrContentBasedDedup] = strconv.FormatBool(cfg.ContentBasedDedup)
		m[attrDeduplicationScope] = "queue"
		if cfg.DedupScope == engine.DedupScopeMessageGroup {
			m[attrDeduplicationScope] = "messageGroup"
		}
		m[attrFifoThroughputLimit] = cfg.FifoThroughputLimit
		if m[attrFifoThroughputLimit] == "" {
			m[attrFifoThroughputLimit] = defaultFifoThroughputLimit
		}
	}
	return m
}

// cloneConfig copies a configuration deeply enough to edit it.
func cloneConfig(cfg engine.QueueConfig) engine.QueueConfig {
	if cfg.Extra != nil {
		extra := make(map[string]string, len(cfg.Extra))
		for k, v := range cfg.Extra {
			extra[k] = v
		}
		cfg.Extra = extra
	}
	if cfg.DeadLetter != nil {
		p := *cfg.DeadLetter
		cfg.DeadLetter = &p
	}
	if cfg.RedriveAllow != nil {
		p := *cfg.RedriveAllow
		p.SourceQueues = append([]string(nil), p.SourceQueues...)
		cfg.RedriveAllow = &p
	}
	if cfg.Retry != nil {
		p := *cfg.Retry
		cfg.Retry = &p
	}
	return cfg
}
