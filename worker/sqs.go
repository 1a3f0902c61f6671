package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sluicemq/sluice/api"
)

// SQSSourceOptions configure an SQSSource.
type SQSSourceOptions struct {
	// Extension selects the Sluice failure-report extension. Default
	// ExtensionAuto.
	Extension ExtensionMode
	// ExtensionEndpoint is the Sluice base URL ("http://host:9324"); the
	// extension is POST {ExtensionEndpoint}/sluice/v1/failures. "": the
	// client's BaseEndpoint; a client without one (Amazon SQS) has no
	// extension.
	ExtensionEndpoint string
	// HTTPClient sends failure reports. nil: the SQS client's HTTP client.
	// Reports are signed with the SQS client's credentials (SigV4, service
	// sqs), which a Sluice with [[sqs_credentials]] accepts for the queues
	// the key may use.
	HTTPClient aws.HTTPClient
	// VisibilityTimeout, when > 0, is asked for on every receive (whole
	// seconds, 1 s–12 h) and is the lease the worker extends. 0: the
	// queue's VisibilityTimeout attribute.
	VisibilityTimeout time.Duration
	// WaitTime is the long-poll time of a receive (≤ 20 s). 0: 20 s.
	WaitTime time.Duration
	// QueueInfoTTL is how long the queue's attributes (visibility timeout,
	// redrive policy, SluiceRetryPolicy) are cached. 0: 1 minute.
	QueueInfoTTL time.Duration
	// Logger receives the source's logs. nil: discard.
	Logger *slog.Logger
}

// ExtensionMode says whether an SQSSource uses Sluice's failure-report
// extension.
type ExtensionMode int

const (
	// ExtensionAuto uses the extension when the endpoint is Sluice and it
	// answers: a queue that does not know the SluiceRetryPolicy attribute
	// is not Sluice, and a failure report that is not answered in the
	// extension's JSON (a 404, an SQS error) turns it off for 5 minutes.
	ExtensionAuto ExtensionMode = iota
	// ExtensionOff never uses it: plain SQS behaviour.
	ExtensionOff
	// ExtensionOn always uses it, and fails reports it cannot make
	// instead of falling back.
	ExtensionOn
)

func (m ExtensionMode) String() string {
	switch m {
	case ExtensionOff:
		return "off"
	case ExtensionOn:
		return "on"
	}
	return "auto"
}

// SQSSource receives from one SQS queue: Amazon SQS or any SQS-compatible
// broker, with Sluice's extensions where it offers them.
//
// What it does with a failed delivery:
//
//   - With the Sluice failure-report extension, it POSTs the failure and
//     its context to {endpoint}/sluice/v1/failures. A terminal failure is
//     dead-lettered at once and the context is kept on the message in the
//     DLQ. A transient one ends the lease; the message comes back after
//     the queue's SluiceRetryPolicy backoff when it has one, else after
//     the worker's own backoff (sent as retryAfterSeconds, so one request
//     both records the context and sets the delay). A failure on the last
//     allowed attempt (maxReceiveCount) is dead-lettered by the report
//     itself.
//   - Without it (Amazon SQS, another broker, or Sluice without the admin
//     API): a transient failure sets the message's visibility to the
//     backoff (ChangeMessageVisibility, whole seconds, rounded up). A
//     terminal failure cannot be dead-lettered directly over SQS, so the
//     message is made visible at once (visibility 0) and, each time it is
//     received again by this source, handed straight back without running
//     the handler, until the broker moves it to the DLQ on the receive
//     that passes maxReceiveCount. The failure context is only logged. A
//     queue without a RedrivePolicy gets ErrNoDeadLetterQueue.
//
// Receives ask for every system and message attribute and, from Sluice,
// for SluiceOriginalMessageId (Message.OriginalID). The lease to extend
// is the receive's VisibilityTimeout or the queue's.
type SQSSource struct {
	c      *sqs.Client
	url    string
	opts   SQSSourceOptions
	http   aws.HTTPClient
	extURL string // failures endpoint, "" when off
	log    *slog.Logger
	now    func() time.Time
	infoMu sync.Mutex
	info   queueInfo

	mu       sync.Mutex
	extState extDetector          // whether the broker has the failure-report extension
	doomed   map[string]time.Time // plain SQS: terminally failed message ids → expiry
}

var _ Source = (*SQSSource)(nil)

// queueInfo is what the source knows about its queue.
type queueInfo struct {
	fetched     time.Time
	lease       time.Duration
	hasDLQ      bool
	sluice      bool // the endpoint knows Sluice's queue attributes
	retryPolicy bool // the queue has a SluiceRetryPolicy
}

const (
	extensionRecheck = 5 * time.Minute
	doomedTTL        = 15 * time.Minute
	doomedMax        = 10000
	failuresPath     = "/sluice/v1/failures"
)

// NewSQSSource returns a Source for the queue at queueURL. It makes no
// request; the queue's attributes are read on the first Receive.
func NewSQSSource(client *sqs.Client, queueURL string, opts SQSSourceOptions) (*SQSSource, error) {
	if client == nil || queueURL == "" {
		return nil, errors.New("worker: an SQS client and a queue URL are required")
	}
	if opts.VisibilityTimeout < 0 || opts.VisibilityTimeout > 12*time.Hour {
		return nil, fmt.Errorf("worker: VisibilityTimeout must be 0–12h, got %v", opts.VisibilityTimeout)
	}
	if opts.WaitTime < 0 || opts.WaitTime > 20*time.Second {
		return nil, fmt.Errorf("worker: WaitTime must be 0–20s, got %v", opts.WaitTime)
	}
	if opts.WaitTime == 0 {
		opts.WaitTime = 20 * time.Second
	}
	if opts.QueueInfoTTL <= 0 {
		opts.QueueInfoTTL = time.Minute
	}
	s := &SQSSource{c: client, url: queueURL, opts: opts, log: opts.Logger, now: time.Now, doomed: map[string]time.Time{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	co := client.Options()
	s.http = opts.HTTPClient
	if s.http == nil {
		s.http = co.HTTPClient
	}
	if s.http == nil {
		s.http = http.DefaultClient
	}
	if co.Credentials != nil && co.Region != "" {
		// Signed like the SQS requests: a Sluice with SigV4 on takes
		// the report from this key, for the queues it may use.
		s.http = &sigv4Doer{next: s.http, creds: co.Credentials, region: co.Region}
	}
	if opts.Extension != ExtensionOff {
		base := opts.ExtensionEndpoint
		if base == "" && co.BaseEndpoint != nil {
			base = *co.BaseEndpoint
		}
		if base != "" {
			u, err := url.Parse(base)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("worker: extension endpoint %q is not an http(s) URL", base)
			}
			s.extURL = strings.TrimRight(base, "/") + failuresPath
		} else if opts.Extension == ExtensionOn {
			return nil, errors.New("worker: ExtensionOn needs an ExtensionEndpoint or a client with a BaseEndpoint")
		}
	}
	return s, nil
}

// queueInfo returns the cached queue attributes, refreshing them when
// they are older than QueueInfoTTL. A failed refresh keeps the old ones.
func (s *SQSSource) queueInfo(ctx context.Context) (queueInfo, error) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	if !s.info.fetched.IsZero() && s.now().Sub(s.info.fetched) < s.opts.QueueInfoTTL {
		return s.info, nil
	}
	out, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		if !s.info.fetched.IsZero() {
			s.log.Warn("could not refresh queue attributes; keeping the old ones", "err", err)
			return s.info, nil
		}
		return queueInfo{}, classifySQSError(err)
	}
	info := queueInfo{fetched: s.now(), lease: 30 * time.Second}
	if v, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)]); err == nil {
		info.lease = time.Duration(v) * time.Second
	}
	if s.opts.VisibilityTimeout > 0 {
		info.lease = s.opts.VisibilityTimeout.Round(time.Second)
	}
	info.hasDLQ = out.Attributes[string(types.QueueAttributeNameRedrivePolicy)] != ""
	// Only Sluice knows this attribute; Amazon SQS refuses the name.
	sl, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.url),
		AttributeNames: []types.QueueAttributeName{"SluiceRetryPolicy"},
	})
	if err == nil {
		info.sluice = true
		info.retryPolicy = sl.Attributes["SluiceRetryPolicy"] != ""
	}
	if s.info.fetched.IsZero() || s.info.sluice != info.sluice || s.info.retryPolicy != info.retryPolicy || s.info.hasDLQ != info.hasDLQ {
		s.log.Info("queue attributes", "queue", s.url, "lease", info.lease, "dead_letter_queue", info.hasDLQ,
			"sluice", info.sluice, "broker_retry_policy", info.retryPolicy)
	}
	s.info = info
	return info, nil
}

// Receive long-polls for up to max messages. A QueueDoesNotExist or
// access error is returned marked Terminal, which stops the worker.
func (s *SQSSource) Receive(ctx context.Context, n int) ([]*Message, error) {
	info, err := s.queueInfo(ctx)
	if err != nil {
		return nil, err
	}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.url),
		MaxNumberOfMessages:         int32(min(max(n, 1), 10)),
		WaitTimeSeconds:             int32(s.opts.WaitTime / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	if info.sluice {
		in.MessageSystemAttributeNames = append(in.MessageSystemAttributeNames, "SluiceOriginalMessageId")
	}
	if s.opts.VisibilityTimeout > 0 {
		in.VisibilityTimeout = int32(info.lease / time.Second)
	}
	out, err := s.c.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, classifySQSError(err)
	}
	msgs := make([]*Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		id := aws.ToString(m.MessageId)
		if s.isDoomed(id) {
			// Plain SQS: a terminal failure already decided; hurry it on
			// towards maxReceiveCount without running the handler again.
			s.changeVisibility(ctx, aws.ToString(m.ReceiptHandle), 0)
			continue
		}
		msgs = append(msgs, toMessage(m, info.lease))
	}
	return msgs, nil
}

func toMessage(m types.Message, lease time.Duration) *Message {
	msg := &Message{
		ID:         aws.ToString(m.MessageId),
		OriginalID: m.Attributes["SluiceOriginalMessageId"],
		Body:       []byte(aws.ToString(m.Body)),
		Attempt:    1,
		Lease:      lease,
		Raw:        m,
		Receipt:    aws.ToString(m.ReceiptHandle),
	}
	if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && n > 0 {
		msg.Attempt = n
	}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		msg.SentAt = time.UnixMilli(ms)
	}
	for k, v := range m.MessageAttributes {
		if v.StringValue != nil {
			if msg.Attributes == nil {
				msg.Attributes = map[string]string{}
			}
			msg.Attributes[k] = *v.StringValue
		}
	}
	return msg
}

func receipt(m *Message) string { s, _ := m.Receipt.(string); return s }

// Ack deletes the message.
func (s *SQSSource) Ack(ctx context.Context, m *Message) error {
	_, err := s.c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(receipt(m))})
	return classifySQSError(err)
}

// Extend sets the message's visibility to its full lease from now.
func (s *SQSSource) Extend(ctx context.Context, m *Message) error {
	return s.changeVisibility(ctx, receipt(m), m.Lease)
}

// Release makes the message visible at once.
func (s *SQSSource) Release(ctx context.Context, m *Message) error {
	return s.changeVisibility(ctx, receipt(m), 0)
}

func (s *SQSSource) changeVisibility(ctx context.Context, handle string, d time.Duration) error {
	secs := int32(min(math.Ceil(d.Seconds()), 43200))
	_, err := s.c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(handle), VisibilityTimeout: secs,
	})
	return classifySQSError(err)
}

// Fail settles a failed delivery; see SQSSource for what it does.
func (s *SQSSource) Fail(ctx context.Context, m *Message, f Failure) (Outcome, error) {
	info, err := s.queueInfo(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if s.useExtension(info) {
		out, present, err := s.report(ctx, m, f, info)
		if present || s.opts.Extension == ExtensionOn {
			return out, err
		}
		if err != nil {
			s.log.Warn("failure report failed; falling back to plain SQS for this message", "msg_id", m.ID, "err", err)
		}
	}
	if f.Terminal {
		if !info.hasDLQ {
			return Outcome{}, ErrNoDeadLetterQueue
		}
		s.doom(m.ID)
		if err := s.changeVisibility(ctx, receipt(m), 0); err != nil {
			return Outcome{}, err
		}
		return Outcome{VisibleAt: s.now()}, nil
	}
	if err := s.changeVisibility(ctx, receipt(m), f.Backoff); err != nil {
		return Outcome{}, err
	}
	return Outcome{VisibleAt: s.now().Add(time.Duration(math.Ceil(f.Backoff.Seconds())) * time.Second)}, nil
}

// useExtension reports whether to try a failure report now.
func (s *SQSSource) useExtension(info queueInfo) bool {
	if s.extURL == "" {
		return false
	}
	if s.opts.Extension == ExtensionOn {
		return true
	}
	if !info.sluice {
		return false
	}
	return s.extState.due(s.now())
}

// ExtensionError is an error answer of the failure-report extension.
type ExtensionError struct {
	Status  int
	Code    string
	Message string
}

func (e *ExtensionError) Error() string {
	return fmt.Sprintf("worker: failure report: %d %s: %s", e.Status, e.Code, e.Message)
}

// report posts a failure report. present says whether the extension
// answered (successfully or with its own error body).
func (s *SQSSource) report(ctx context.Context, m *Message, f Failure, info queueInfo) (Outcome, bool, error) {
	body := api.FailureReport{
		QueueURL: s.url, ReceiptHandle: receipt(m), Terminal: f.Terminal,
		ErrorClass: f.ErrorClass, ErrorMessage: truncate(f.ErrorMessage, MaxErrorMessage), Trace: truncate(f.Trace, MaxTrace),
		ConsumerID: f.ConsumerID, ConsumerVersion: f.ConsumerVersion,
	}
	if !f.Terminal && (f.Hold || !info.retryPolicy) {
		secs := min(f.Backoff.Seconds(), 43200)
		body.RetryAfterSeconds = &secs
	}
	return s.extState.report(ctx, s.http, s.extURL, body, s.log, s.now(), "SQS")
}

// doom remembers a terminally failed message id (plain SQS).
func (s *SQSSource) doom(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.doomed) >= doomedMax {
		for k, exp := range s.doomed {
			if now.After(exp) || len(s.doomed) >= doomedMax {
				delete(s.doomed, k)
			}
		}
	}
	s.doomed[id] = now.Add(doomedTTL)
}

func (s *SQSSource) isDoomed(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.doomed[id]
	if ok && s.now().After(exp) {
		delete(s.doomed, id)
		ok = false
	}
	return ok
}

// classifySQSError maps SQS errors: a stale receipt handle to ErrLeaseLost,
// a missing queue or denied access to a Terminal error.
func classifySQSError(err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return err
	}
	code := ae.ErrorCode()
	switch {
	case code == "MessageNotInflight" || code == "AWS.SimpleQueueService.MessageNotInflight" || code == "ReceiptHandleIsInvalid":
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	case code == "InvalidParameterValue" && (strings.Contains(ae.ErrorMessage(), "receipt handle") || strings.Contains(ae.ErrorMessage(), "not available")):
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	case code == "QueueDoesNotExist" || code == "AWS.SimpleQueueService.NonExistentQueue" ||
		code == "AccessDenied" || code == "InvalidClientTokenId" || code == "InvalidAddress":
		return Terminal(err)
	}
	return err
}
