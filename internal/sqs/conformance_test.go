package sqs_test

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The conformance suite of issue 12: behaviours recorded against real AWS
// (LocalStack's AWS-validated snapshots of tests/aws/services/sqs), each
// checked over both wire protocols: AWS JSON 1.0 through aws-sdk-go-v2 and
// Query through a plain form POST. A proto runs the few operations the
// checks need and reports failures as a protoErr.

// protoErr is a failed request as either protocol reports it.
type protoErr struct {
	status    int
	code, msg string
}

func (e *protoErr) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.msg) }

type recvMsg struct {
	Handle, Body string
	Attrs        map[string]string // system attributes
	MsgAttrs     map[string]string // user attributes (string values)
	MD5OfAttrs   string
}

type batchEntry struct {
	id, body     string
	group, dedup string // "" = absent
}

type batchFailure struct{ id, code, msg string }

type sendOpts struct {
	group, dedup string
	attrs        map[string]string // String attributes
	traceHeader  string            // X-Amzn-Trace-Id request header
}

type recvOpts struct {
	max, vis    int // 0: absent
	sysNames    []string
	msgAttrName []string
}

type proto interface {
	String() string
	create(e *env, name string, attrs map[string]string) (string, error)
	setAttrs(e *env, q string, attrs map[string]string) error
	getAttrs(e *env, q string, names ...string) (map[string]string, error)
	send(e *env, q, body string, o sendOpts) error
	sendBatch(e *env, q string, entries []batchEntry) (ok []string, failed []batchFailure, err error)
	receive(e *env, q string, o recvOpts) ([]recvMsg, error)
	changeVis(e *env, q, handle string, vis int) error
	del(e *env, q, handle string) error
}

var protos = []proto{jsonProto{}, queryProto{}}

// forBoth runs check once per protocol, each with a fresh broker.
func forBoth(t *testing.T, check func(t *testing.T, e *env, p proto)) {
	for _, p := range protos {
		t.Run(p.String(), func(t *testing.T) { check(t, newEnv(t), p) })
	}
}

// must(v, err)(t) returns v, failing t on err.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks a protoErr's status, code and message (contained).
func wantErr(t *testing.T, err error, status int, code, msg string) {
	t.Helper()
	var pe *protoErr
	if !errors.As(err, &pe) {
		t.Fatalf("want %d %s, got %v", status, code, err)
	}
	if pe.status != status || pe.code != code || !strings.Contains(pe.msg, msg) {
		t.Fatalf("got %v, want %d %s %q", pe, status, code, msg)
	}
}

func bodiesOf(ms []recvMsg) string {
	var b []string
	for _, m := range ms {
		b = append(b, m.Body)
	}
	return "[" + strings.Join(b, " ") + "]"
}

// ---- AWS JSON 1.0 through aws-sdk-go-v2 ----

type jsonProto struct{}

func (jsonProto) String() string { return "json" }

func sdkErr(err error) error {
	if err == nil {
		return nil
	}
	pe := &protoErr{}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		pe.code, pe.msg = ae.ErrorCode(), ae.ErrorMessage()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		pe.status = re.HTTPStatusCode()
	}
	if pe.code == "" {
		return err
	}
	return pe
}

func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func (jsonProto) create(e *env, name string, attrs map[string]string) (string, error) {
	out, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	if err != nil {
		return "", sdkErr(err)
	}
	return *out.QueueUrl, nil
}

func (jsonProto) setAttrs(e *env, q string, attrs map[string]string) error {
	_, err := e.cli.SetQueueAttributes(e.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &q, Attributes: attrs})
	return sdkErr(err)
}

func (jsonProto) getAttrs(e *env, q string, names ...string) (map[string]string, error) {
	var an []types.QueueAttributeName
	for _, n := range names {
		an = append(an, types.QueueAttributeName(n))
	}
	out, err := e.cli.GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &q, AttributeNames: an})
	if err != nil {
		return nil, sdkErr(err)
	}
	return out.Attributes, nil
}

func sdkAttrs(attrs map[string]string) map[string]types.MessageAttributeValue {
	if len(attrs) == 0 {
		return nil
	}
	m := map[string]types.MessageAttributeValue{}
	for k, v := range attrs {
		m[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return m
}

func (jsonProto) send(e *env, q, body string, o sendOpts) error {
	var opts []func(*sqs.Options)
	if o.traceHeader != "" {
		opts = append(opts, func(so *sqs.Options) {
			so.APIOptions = append(so.APIOptions, smithyhttp.AddHeaderValue("X-Amzn-Trace-Id", o.traceHeader))
		})
	}
	_, err := e.cli.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: &body,
		MessageGroupId: optStr(o.group), MessageDeduplicationId: optStr(o.dedup), MessageAttributes: sdkAttrs(o.attrs)}, opts...)
	return sdkErr(err)
}

func (jsonProto) sendBatch(e *env, q string, entries []batchEntry) ([]string, []batchFailure, error) {
	var in []types.SendMessageBatchRequestEntry
	for _, b := range entries {
		in = append(in, types.SendMessageBatchRequestEntry{Id: aws.String(b.id), MessageBody: aws.String(b.body),
			MessageGroupId: optStr(b.group), MessageDeduplicationId: optStr(b.dedup)})
	}
	out, err := e.cli.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: &q, Entries: in})
	if err != nil {
		return nil, nil, sdkErr(err)
	}
	var ok []string
	var failed []batchFailure
	for _, s := range out.Successful {
		ok = append(ok, *s.Id)
	}
	for _, f := range out.Failed {
		failed = append(failed, batchFailure{*f.Id, *f.Code, aws.ToString(f.Message)})
	}
	return ok, failed, nil
}

func (jsonProto) receive(e *env, q string, o recvOpts) ([]recvMsg, error) {
	in := &sqs.ReceiveMessageInput{QueueUrl: &q, MaxNumberOfMessages: int32(o.max), VisibilityTimeout: int32(o.vis),
		MessageAttributeNames: o.msgAttrName}
	for _, n := range o.sysNames {
		in.MessageSystemAttributeNames = append(in.MessageSystemAttributeNames, types.MessageSystemAttributeName(n))
	}
	out, err := e.cli.ReceiveMessage(e.ctx, in)
	if err != nil {
		return nil, sdkErr(err)
	}
	var ms []recvMsg
	for _, m := range out.Messages {
		r := recvMsg{Handle: *m.ReceiptHandle, Body: *m.Body, Attrs: m.Attributes, MD5OfAttrs: aws.ToString(m.MD5OfMessageAttributes)}
		for k, v := range m.MessageAttributes {
			if r.MsgAttrs == nil {
				r.MsgAttrs = map[string]string{}
			}
			r.MsgAttrs[k] = aws.ToString(v.StringValue)
		}
		ms = append(ms, r)
	}
	return ms, nil
}

func (jsonProto) changeVis(e *env, q, handle string, vis int) error {
	_, err := e.cli.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &q, ReceiptHandle: &handle, VisibilityTimeout: int32(vis)})
	return sdkErr(err)
}

func (jsonProto) del(e *env, q, handle string) error {
	_, err := e.cli.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: &handle})
	return sdkErr(err)
}

// ---- Query (form POST, XML) ----

type queryProto struct{}

func (queryProto) String() string { return "query" }

// call posts a Query request to path (default "/") with extra headers and
// decodes a successful response into out (nil: ignore the body).
func (queryProto) call(e *env, path string, v url.Values, hdr http.Header, out any) error {
	e.t.Helper()
	if path == "" {
		path = "/"
	}
	v.Set("Version", "2012-11-05")
	req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, body := e.do(req)
	if resp.StatusCode != 200 {
		var qe queryError
		if err := xml.Unmarshal([]byte(body), &qe); err != nil {
			return fmt.Errorf("status %d, body %s", resp.StatusCode, body)
		}
		return &protoErr{resp.StatusCode, qe.Error.Code, qe.Error.Message}
	}
	if out != nil {
		if err := xml.Unmarshal([]byte(body), out); err != nil {
			return fmt.Errorf("decoding %s: %v", body, err)
		}
	}
	return nil
}

type xmlNameValue struct{ Name, Value string }

func setMap(v url.Values, prefix, key, val string, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		v.Set(fmt.Sprintf("%s.%d.%s", prefix, i+1, key), k)
		v.Set(fmt.Sprintf("%s.%d.%s", prefix, i+1, val), m[k])
	}
}

func (p queryProto) create(e *env, name string, attrs map[string]string) (string, error) {
	v := url.Values{"Action": {"CreateQueue"}, "QueueName": {name}}
	setMap(v, "Attribute", "Name", "Value", attrs)
	var out struct{ CreateQueueResult struct{ QueueUrl string } }
	if err := p.call(e, "", v, nil, &out); err != nil {
		return "", err
	}
	return out.CreateQueueResult.QueueUrl, nil
}

func (p queryProto) setAttrs(e *env, q string, attrs map[string]string) error {
	v := url.Values{"Action": {"SetQueueAttributes"}, "QueueUrl": {q}}
	setMap(v, "Attribute", "Name", "Value", attrs)
	return p.call(e, "", v, nil, nil)
}

func (p queryProto) getAttrs(e *env, q string, names ...string) (map[string]string, error) {
	v := url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {q}}
	for i, n := range names {
		v.Set(fmt.Sprintf("AttributeName.%d", i+1), n)
	}
	var out struct {
		GetQueueAttributesResult struct{ Attribute []xmlNameValue }
	}
	if err := p.call(e, "", v, nil, &out); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, a := range out.GetQueueAttributesResult.Attribute {
		m[a.Name] = a.Value
	}
	return m, nil
}

func (p queryProto) send(e *env, q, body string, o sendOpts) error {
	v := url.Values{"Action": {"SendMessage"}, "QueueUrl": {q}, "MessageBody": {body}}
	if o.group != "" {
		v.Set("MessageGroupId", o.group)
	}
	if o.dedup != "" {
		v.Set("MessageDeduplicationId", o.dedup)
	}
	i := 0
	for _, k := range sortedStrings(o.attrs) {
		i++
		v.Set(fmt.Sprintf("MessageAttribute.%d.Name", i), k)
		v.Set(fmt.Sprintf("MessageAttribute.%d.Value.DataType", i), "String")
		v.Set(fmt.Sprintf("MessageAttribute.%d.Value.StringValue", i), o.attrs[k])
	}
	var hdr http.Header
	if o.traceHeader != "" {
		hdr = http.Header{"X-Amzn-Trace-Id": {o.traceHeader}}
	}
	return p.call(e, "", v, hdr, nil)
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (p queryProto) sendBatch(e *env, q string, entries []batchEntry) ([]string, []batchFailure, error) {
	v := url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {q}}
	for i, b := range entries {
		pre := fmt.Sprintf("SendMessageBatchRequestEntry.%d.", i+1)
		v.Set(pre+"Id", b.id)
		v.Set(pre+"MessageBody", b.body)
		if b.group != "" {
			v.Set(pre+"MessageGroupId", b.group)
		}
		if b.dedup != "" {
			v.Set(pre+"MessageDeduplicationId", b.dedup)
		}
	}
	var out struct {
		SendMessageBatchResult struct {
			SendMessageBatchResultEntry []struct{ Id string }
			BatchResultErrorEntry       []struct{ Id, Code, Message string }
		}
	}
	if err := p.call(e, "", v, nil, &out); err != nil {
		return nil, nil, err
	}
	var ok []string
	var failed []batchFailure
	for _, s := range out.SendMessageBatchResult.SendMessageBatchResultEntry {
		ok = append(ok, s.Id)
	}
	for _, f := range out.SendMessageBatchResult.BatchResultErrorEntry {
		failed = append(failed, batchFailure{f.Id, f.Code, f.Message})
	}
	return ok, failed, nil
}

func (p queryProto) receive(e *env, q string, o recvOpts) ([]recvMsg, error) {
	v := url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {q}}
	if o.max > 0 {
		v.Set("MaxNumberOfMessages", strconv.Itoa(o.max))
	}
	if o.vis > 0 {
		v.Set("VisibilityTimeout", strconv.Itoa(o.vis))
	}
	for i, n := range o.sysNames {
		v.Set(fmt.Sprintf("MessageSystemAttributeName.%d", i+1), n)
	}
	for i, n := range o.msgAttrName {
		v.Set(fmt.Sprintf("MessageAttributeName.%d", i+1), n)
	}
	var out struct {
		ReceiveMessageResult struct {
			Message []struct {
				ReceiptHandle, Body, MD5OfMessageAttributes string
				Attribute                                   []xmlNameValue
				MessageAttribute                            []struct {
					Name  string
					Value struct{ StringValue string }
				}
			}
		}
	}
	if err := p.call(e, "", v, nil, &out); err != nil {
		return nil, err
	}
	var ms []recvMsg
	for _, m := range out.ReceiveMessageResult.Message {
		r := recvMsg{Handle: m.ReceiptHandle, Body: m.Body, MD5OfAttrs: m.MD5OfMessageAttributes}
		for _, a := range m.Attribute {
			if r.Attrs == nil {
				r.Attrs = map[string]string{}
			}
			r.Attrs[a.Name] = a.Value
		}
		for _, a := range m.MessageAttribute {
			if r.MsgAttrs == nil {
				r.MsgAttrs = map[string]string{}
			}
			r.MsgAttrs[a.Name] = a.Value.StringValue
		}
		ms = append(ms, r)
	}
	return ms, nil
}

func (p queryProto) changeVis(e *env, q, handle string, vis int) error {
	return p.call(e, "", url.Values{"Action": {"ChangeMessageVisibility"}, "QueueUrl": {q}, "ReceiptHandle": {handle},
		"VisibilityTimeout": {strconv.Itoa(vis)}}, nil, nil)
}

func (p queryProto) del(e *env, q, handle string) error {
	return p.call(e, "", url.Values{"Action": {"DeleteMessage"}, "QueueUrl": {q}, "ReceiptHandle": {handle}}, nil, nil)
}

// addPermissionInput and queryValues make the same AddPermission request in
// each protocol.
func addPermissionInput(q string) *sqs.AddPermissionInput {
	return &sqs.AddPermissionInput{QueueUrl: &q, Label: aws.String("crossaccountpermission"),
		AWSAccountIds: []string{account}, Actions: []string{"ReceiveMessage"}}
}

func queryValues(action, q string) url.Values {
	return url.Values{"Action": {action}, "QueueUrl": {q}, "Label": {"crossaccountpermission"},
		"AWSAccountId.1": {account}, "ActionName.1": {"ReceiveMessage"}}
}

// Tag actions, per protocol (the proto interface keeps to what every
// check needs; these are only used by the tag checks).

func tagQueue(e *env, p proto, q string, tags map[string]string) error {
	if p.String() == "json" {
		_, err := e.cli.TagQueue(e.ctx, &sqs.TagQueueInput{QueueUrl: &q, Tags: tags})
		return sdkErr(err)
	}
	v := url.Values{"Action": {"TagQueue"}, "QueueUrl": {q}}
	setMap(v, "Tag", "Key", "Value", tags)
	return queryProto{}.call(e, "", v, nil, nil)
}

func untagQueue(e *env, p proto, q string, keys ...string) error {
	if p.String() == "json" {
		_, err := e.cli.UntagQueue(e.ctx, &sqs.UntagQueueInput{QueueUrl: &q, TagKeys: keys})
		return sdkErr(err)
	}
	v := url.Values{"Action": {"UntagQueue"}, "QueueUrl": {q}}
	for i, k := range keys {
		v.Set(fmt.Sprintf("TagKey.%d", i+1), k)
	}
	return queryProto{}.call(e, "", v, nil, nil)
}

func listQueueTags(e *env, p proto, q string) (map[string]string, error) {
	if p.String() == "json" {
		out, err := e.cli.ListQueueTags(e.ctx, &sqs.ListQueueTagsInput{QueueUrl: &q})
		if err != nil {
			return nil, sdkErr(err)
		}
		return out.Tags, nil
	}
	var out struct {
		ListQueueTagsResult struct {
			Tag []struct{ Key, Value string }
		}
	}
	if err := (queryProto{}).call(e, "", url.Values{"Action": {"ListQueueTags"}, "QueueUrl": {q}}, nil, &out); err != nil {
		return nil, err
	}
	var m map[string]string
	for _, t := range out.ListQueueTagsResult.Tag {
		if m == nil {
			m = map[string]string{}
		}
		m[t.Key] = t.Value
	}
	return m, nil
}

func createWithTags(e *env, p proto, name string, tags map[string]string) (string, error) {
	if p.String() == "json" {
		out, err := e.cli.CreateQueue(e.ctx, &sqs.CreateQueueInput{QueueName: &name, Tags: tags})
		if err != nil {
			return "", sdkErr(err)
		}
		return *out.QueueUrl, nil
	}
	v := url.Values{"Action": {"CreateQueue"}, "QueueName": {name}}
	setMap(v, "Tag", "Key", "Value", tags)
	var out struct{ CreateQueueResult struct{ QueueUrl string } }
	if err := (queryProto{}).call(e, "", v, nil, &out); err != nil {
		return "", err
	}
	return out.CreateQueueResult.QueueUrl, nil
}
