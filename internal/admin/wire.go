package admin

import (
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

// Conversions from the engine's views to the wire types of package api
// (github.com/sluicemq/sluice/api), which the CLI and the worker SDK share.

// timePtr returns nil for the zero time, so that unknown times are omitted.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func timeVal(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func duration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func retryPolicyJSON(p *engine.RetryPolicy) *api.RetryPolicy {
	if p == nil {
		return nil
	}
	return &api.RetryPolicy{Strategy: p.Strategy, BaseSeconds: seconds(p.Base), CapSeconds: seconds(p.Cap)}
}

// messageJSON renders an engine view. The view's slices are shared with the
// engine and are only read.
func messageJSON(v *engine.View) api.Message {
	m := api.Message{
		ID:               v.MessageID,
		TraceHeader:      v.TraceHeader,
		SenderID:         v.SenderID,
		SentAt:           timePtr(v.SentAt),
		FirstReceiveAt:   timePtr(v.FirstReceiveAt),
		ReceiveCount:     v.ReceiveCount,
		GroupID:          v.GroupID,
		DedupID:          v.DedupID,
		SequenceNumber:   v.SequenceNumber,
		State:            v.State,
		VisibleAt:        timePtr(v.VisibleAt),
		LastReceivedAt:   timePtr(v.LastReceived),
		DeadLetterSource: v.DeadLetterSource,
		Priority:         int(v.Priority),
		Envelope:         v.Envelope,
	}
	if utf8.Valid(v.Body) {
		m.Body = string(v.Body)
	} else {
		m.Body, m.BodyEncoding = encodeBase64(v.Body), "base64"
	}
	for _, a := range v.Attributes {
		m.Attributes = append(m.Attributes, api.Attribute{Name: a.Name, DataType: a.DataType, StringValue: a.StringValue, BinaryValue: a.BinaryValue})
	}
	if d := v.DeadLetter; d != nil {
		m.DeadLetter = &api.DeadLetterInfo{
			SourceQueue: d.SourceQueue, Reason: d.Reason, Attempts: d.Attempts,
			FirstReceiveAt: timePtr(d.FirstReceiveAt), LastReceiveAt: timePtr(d.LastReceiveAt),
			DeadLetteredAt: timePtr(d.DeadLetteredAt),
		}
	}
	if f := v.LastFailure; f != nil {
		m.LastFailure = &api.FailureRecord{
			ErrorClass: f.ErrorClass, Message: f.Message, Trace: f.Trace,
			ConsumerID: f.ConsumerID, ConsumerVersion: f.ConsumerVersion,
			ReportedAt: timePtr(f.ReportedAt), Attempt: f.Attempt,
		}
	}
	if r := v.Redrive; r != nil {
		m.Redrive = &api.RedriveInfo{OriginalMessageID: r.OriginalMessageID, Count: r.Count, TaskID: r.TaskID, At: timePtr(r.At)}
	}
	return m
}

func filterJSON(f *engine.Filter) *api.Filter {
	out := &api.Filter{
		Reason: f.Reason, ErrorClass: f.ErrorClass, SourceQueue: f.SourceQueue,
		SentAfter: timePtr(f.SentAfter), SentBefore: timePtr(f.SentBefore),
		IDs: f.MessageIDs,
	}
	if f.AttributeName != "" {
		out.Attribute = &api.AttributeFilter{Name: f.AttributeName, Value: f.AttributeValue}
	}
	if out.IsZero() {
		return nil
	}
	return out
}

func taskJSON(t *engine.MoveTask) api.Task {
	out := api.Task{
		ID: t.ID, Source: t.Source, Destination: t.Destination, Rate: t.Rate,
		Status: t.Status, Moved: t.Moved, ToMove: t.ToMove, Returned: t.Returned,
		ReturnedClasses: t.ReturnedClasses, FailureReason: t.FailureReason,
		StopRule: t.StopRule, Refilled: t.Refilled,
		StartedAt: timePtr(t.StartedAt), UpdatedAt: timePtr(t.UpdatedAt),
		Filter:              filterJSON(&t.Filter),
		SafetyWindowSeconds: seconds(t.SafetyWindow), SafetyThreshold: t.SafetyThreshold,
	}
	if out.ReturnedClasses == nil {
		out.ReturnedClasses = []string{}
	}
	return out
}
