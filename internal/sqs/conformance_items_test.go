package sqs_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestConformanceAWSRecorded checks, over both protocols, the behaviours of
// issue 12 as AWS recorded them. Each subtest names the LocalStack
// AWS-validated test whose snapshot it follows.
func TestConformanceAWSRecorded(t *testing.T) {
	fifoAttrs := map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}

	// test_fifo_message_group_visibility_after_terminate_visibility_timeout
	t.Run("FIFOVisibleHeadWhileLaterInFlight", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "f.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"}))(t)
			for _, m := range []struct{ body, group string }{{"g1-m1", "1"}, {"g1-m2", "1"}, {"g2-m1", "2"}} {
				mustOK(t, p.send(e, q, m.body, sendOpts{group: m.group}))
			}
			got := must(p.receive(e, q, recvOpts{max: 2}))(t)
			if bodiesOf(got) != "[g1-m1 g1-m2]" {
				t.Fatalf("first receive %s", bodiesOf(got))
			}
			mustOK(t, p.changeVis(e, q, got[0].Handle, 0))
			if again := must(p.receive(e, q, recvOpts{max: 3}))(t); bodiesOf(again) != "[g2-m1 g1-m1]" {
				t.Fatalf("after releasing g1-m1 while g1-m2 is in flight: %s", bodiesOf(again))
			}
		})
	})

	// test_fifo_group_visibility_extends_with_change_message_visibility
	t.Run("FIFOExtendedLeaseHidesOnlyLaterMessages", func(t *testing.T) {
		for pos, want := range []string{"[]", "[foo]", "[foo bar]"} {
			t.Run(fmt.Sprint(pos), func(t *testing.T) {
				forBoth(t, func(t *testing.T, e *env, p proto) {
					q := must(p.create(e, "f.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "1"}))(t)
					for _, b := range []string{"foo", "bar", "baz"} {
						mustOK(t, p.send(e, q, b, sendOpts{group: "1", dedup: b}))
					}
					got := must(p.receive(e, q, recvOpts{max: 5}))(t)
					if len(got) != 3 {
						t.Fatalf("received %s", bodiesOf(got))
					}
					mustOK(t, p.changeVis(e, q, got[pos].Handle, 4))
					e.clk.Advance(2500 * time.Millisecond)
					if again := must(p.receive(e, q, recvOpts{max: 5}))(t); bodiesOf(again) != want {
						t.Fatalf("extended message %d: got %s, want %s", pos, bodiesOf(again), want)
					}
				})
			})
		}
	})

	// test_send_batch_missing_message_group_id_for_fifo_queue,
	// test_send_batch_missing_deduplication_id_for_fifo_queue
	t.Run("FIFOBatchFailsWhole", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "f.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false"}))(t)
			_, _, err := p.sendBatch(e, q, []batchEntry{{id: "a", body: "x", group: "g", dedup: "d1"}, {id: "b", body: "x", dedup: "d2"}})
			wantErr(t, err, 400, "InvalidParameterValue", "The request must contain the parameter MessageGroupId.")
			_, _, err = p.sendBatch(e, q, []batchEntry{{id: "a", body: "x", group: "g", dedup: "d1"}, {id: "b", body: "x", group: "g"}})
			wantErr(t, err, 400, "InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			if got := must(p.receive(e, q, recvOpts{max: 10}))(t); len(got) != 0 {
				t.Fatalf("a failed batch sent %s", bodiesOf(got))
			}
		})
	})

	// test_send_batch_message_size
	t.Run("BatchEntryTooLargeWording", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", map[string]string{"MaximumMessageSize": "1024"}))(t)
			ok, failed, err := p.sendBatch(e, q, []batchEntry{{id: "a", body: strings.Repeat("a", 1024)}, {id: "b", body: strings.Repeat("a", 1025)}})
			mustOK(t, err)
			if fmt.Sprint(ok) != "[a]" || len(failed) != 1 || failed[0].id != "b" || failed[0].code != "InvalidParameterValue" ||
				failed[0].msg != "One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes." {
				t.Fatalf("ok %v failed %+v", ok, failed)
			}
		})
	})

	// test_change_message_visibility_after_visibility_timeout_expiration,
	// test_extend_message_visibility_timeout_set_in_queue
	t.Run("ChangeVisibilityAfterLeaseLapsed", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", map[string]string{"VisibilityTimeout": "1"}))(t)
			mustOK(t, p.send(e, q, "test", sendOpts{}))
			got := must(p.receive(e, q, recvOpts{}))(t)
			e.clk.Advance(2 * time.Second)
			mustOK(t, p.changeVis(e, q, got[0].Handle, 2))
			if again := must(p.receive(e, q, recvOpts{}))(t); len(again) != 0 {
				t.Fatalf("late extension did not hide the message: %s", bodiesOf(again))
			}
			e.clk.Advance(3 * time.Second)
			if again := must(p.receive(e, q, recvOpts{}))(t); bodiesOf(again) != "[test]" {
				t.Fatalf("after the extension: %s", bodiesOf(again))
			}
		})
	})

	// test_terminate_visibility_timeout_after_receive; and a deleted
	// message's handle still fails
	// (test_change_visibility_on_deleted_message_raises_invalid_parameter_value).
	t.Run("EarlierHandleSetsVisibilityZero", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", nil))(t)
			mustOK(t, p.send(e, q, "test", sendOpts{}))
			first := must(p.receive(e, q, recvOpts{}))(t)
			mustOK(t, p.changeVis(e, q, first[0].Handle, 0))
			second := must(p.receive(e, q, recvOpts{vis: 3}))(t)
			if len(second) != 1 {
				t.Fatal("not received again")
			}
			mustOK(t, p.changeVis(e, q, first[0].Handle, 0))
			third := must(p.receive(e, q, recvOpts{}))(t)
			if len(third) != 1 {
				t.Fatal("the earlier handle did not make the message visible")
			}
			mustOK(t, p.del(e, q, third[0].Handle))
			wantErr(t, p.changeVis(e, q, third[0].Handle, 42), 400, "InvalidParameterValue",
				"Message does not exist or is not available for visibility timeout change.")
		})
	})

	// test_receive_message_message_attribute_names_filters
	t.Run("MessageAttributeNameFilters", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", map[string]string{"VisibilityTimeout": "0"}))(t)
			mustOK(t, p.send(e, q, "msg", sendOpts{attrs: map[string]string{"Help.Me": "Me", "Hello": "There", "General": "Kenobi"}}))
			for _, tc := range []struct {
				names []string
				want  string
				md5   string
			}{
				{nil, "[]", ""},
				{[]string{"All"}, "[General Hello Help.Me]", "4c360f3fdafd970e05fae2f149d997f5"},
				{[]string{"*"}, "[General Hello Help.Me]", "4c360f3fdafd970e05fae2f149d997f5"},
				{[]string{".*"}, "[General Hello Help.Me]", "4c360f3fdafd970e05fae2f149d997f5"},
				{[]string{"Foo", "Help"}, "[]", ""},
				{[]string{"Hello", "General"}, "[General Hello]", "fca026605781cb4126a1e9044df24232"},
				{[]string{"Foo", "Hello"}, "[Hello]", "a311262e065454b75da111d535b8dacd"},
				{[]string{"Hel.*"}, "[Hello Help.Me]", "83fee93c1bcd8b9a5a923ffacdc636c7"},
				{[]string{"AWS."}, "[]", ""},
				{[]string{"..foo"}, "[]", ""},
			} {
				got := must(p.receive(e, q, recvOpts{msgAttrName: tc.names}))(t)
				if len(got) != 1 {
					t.Fatalf("%v: %d messages", tc.names, len(got))
				}
				if names := fmt.Sprint(sortedStrings(got[0].MsgAttrs)); names != tc.want || got[0].MD5OfAttrs != tc.md5 {
					t.Fatalf("%v: got %s %q, want %s %q", tc.names, names, got[0].MD5OfAttrs, tc.want, tc.md5)
				}
			}
		})
	})

	// test_send_message_with_invalid_string_attributes
	t.Run("NonASCIIAttributeNames", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", nil))(t)
			mustOK(t, p.send(e, q, "test", sendOpts{attrs: map[string]string{"attr.1øßä": "Valida"}}))
			got := must(p.receive(e, q, recvOpts{msgAttrName: []string{"All"}}))(t)
			if len(got) != 1 || got[0].MsgAttrs["attr.1øßä"] != "Valida" {
				t.Fatalf("got %+v", got)
			}
			for _, bad := range []string{"aWs.-Invalid-attr", "AMAZON.-Invalid-attr", ".-Invalid-attr", "Invalid-!-attr", `Invalid-"-attr`, "Invalid-§-attr", "Invalid-(-attr", "Invalid-?-attr"} {
				err := p.send(e, q, "test", sendOpts{attrs: map[string]string{bad: "Valid"}})
				wantErr(t, err, 400, "InvalidParameterValue", "")
			}
		})
	})

	// test_aws_trace_header_propagation
	t.Run("TraceHeaderBecomesAWSTraceHeader", func(t *testing.T) {
		const trace = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", nil))(t)
			mustOK(t, p.send(e, q, "test", sendOpts{attrs: map[string]string{"timestamp": "1493147359900"}, traceHeader: trace}))
			got := must(p.receive(e, q, recvOpts{sysNames: []string{"SentTimestamp", "AWSTraceHeader"}, msgAttrName: []string{"All"}}))(t)
			if len(got) != 1 || got[0].Attrs["AWSTraceHeader"] != trace || got[0].Attrs["SentTimestamp"] == "" {
				t.Fatalf("got %+v", got)
			}
		})
	})

	// test_create_standard_queue_with_fifo_attribute_raises_error,
	// test_set_unsupported_attribute_standard/_fifo
	t.Run("FifoQueueAttribute", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			_, err := p.create(e, "std", map[string]string{"FifoQueue": "false"})
			wantErr(t, err, 400, "InvalidAttributeName", "Unknown Attribute FifoQueue.")
			std := must(p.create(e, "std", nil))(t)
			for _, v := range []string{"true", "false"} {
				wantErr(t, p.setAttrs(e, std, map[string]string{"FifoQueue": v}), 400, "InvalidAttributeName", "Unknown Attribute FifoQueue.")
			}
			f := must(p.create(e, "f.fifo", fifoAttrs))(t)
			mustOK(t, p.setAttrs(e, f, map[string]string{"FifoQueue": "true"}))
			wantErr(t, p.setAttrs(e, f, map[string]string{"FifoQueue": "false"}), 400, "InvalidAttributeValue",
				"Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.")
		})
	})

	// test_set_queue_attributes_default_values
	t.Run("KmsAttributesGoWithTheKey", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", nil))(t)
			mustOK(t, p.setAttrs(e, q, map[string]string{"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000"}))
			a := must(p.getAttrs(e, q, "All"))(t)
			if a["KmsMasterKeyId"] != "testKeyId" || a["KmsDataKeyReusePeriodSeconds"] != "6000" || a["SqsManagedSseEnabled"] != "false" {
				t.Fatalf("after setting a key: %v", a)
			}
			mustOK(t, p.setAttrs(e, q, map[string]string{"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"}))
			a = must(p.getAttrs(e, q, "All"))(t)
			for k := range a {
				if strings.HasPrefix(k, "Kms") {
					t.Fatalf("%s listed after KmsMasterKeyId=\"\": %v", k, a)
				}
			}
			if a["SqsManagedSseEnabled"] != "false" {
				t.Fatalf("SqsManagedSseEnabled %q", a["SqsManagedSseEnabled"])
			}
		})
	})

	// test_sqs_permission_lifecycle: AddPermission writes Version 2008-10-17.
	t.Run("AddPermissionPolicyVersion", func(t *testing.T) {
		forBoth(t, func(t *testing.T, e *env, p proto) {
			q := must(p.create(e, "q", nil))(t)
			if p.String() == "json" {
				_, err := e.cli.AddPermission(e.ctx, addPermissionInput(q))
				mustOK(t, sdkErr(err))
			} else {
				mustOK(t, queryProto{}.call(e, "", queryValues("AddPermission", q), nil, nil))
			}
			var doc struct{ Version, Id string }
			a := must(p.getAttrs(e, q, "Policy"))(t)
			if err := json.Unmarshal([]byte(a["Policy"]), &doc); err != nil || doc.Version != "2008-10-17" || doc.Id != e.arn("q")+"/SQSDefaultPolicy" {
				t.Fatalf("policy %s (%v)", a["Policy"], err)
			}
		})
	})
}

// TestConformanceQueryEndpoint: Query-protocol behaviours on queue paths,
// as AWS recorded them (LocalStack's test_get_queue_url_work_for_different_queue,
// test_get_without_query_returns_unknown_operation,
// test_get_without_query_json_format_returns_returns_xml,
// test_get_from_queue_url_json_format / test_list_queues_json_format).
func TestConformanceQueryEndpoint(t *testing.T) {
	e := newEnv(t)
	q1, q2 := e.create("q1"), e.create("q2")

	req, _ := http.NewRequest("GET", q1+"?Action=GetQueueUrl&QueueName=q2&QueueOwnerAWSAccountId="+account, nil)
	resp, body := e.do(req)
	if resp.StatusCode != 200 || !strings.Contains(body, "<QueueUrl>"+q2+"</QueueUrl>") || strings.Contains(body, q1) {
		t.Fatalf("GetQueueUrl on another queue's path: %d %s", resp.StatusCode, body)
	}

	for _, accept := range []string{"", "application/json"} {
		req, _ := http.NewRequest("GET", q1, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, body := e.do(req)
		if resp.StatusCode != 404 || !strings.Contains(body, "<UnknownOperationException") {
			t.Fatalf("GET without Action (Accept %q): %d %s", accept, resp.StatusCode, body)
		}
	}

	e.send(q1, "hello")
	// Over POST: an unsigned GET may only read (issue #11).
	req, _ = http.NewRequest("POST", e.srv.URL+"/", strings.NewReader("Action=ReceiveMessage&Version=2012-11-05&VisibilityTimeout=0&QueueUrl="+url.QueryEscape(q1)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, body = e.do(req)
	var recv struct {
		ReceiveMessageResponse struct {
			ReceiveMessageResult struct {
				Messages []struct{ Body string } `json:"messages"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &recv); err != nil || resp.StatusCode != 200 ||
		!strings.Contains(body, `"messages":[`) || len(recv.ReceiveMessageResponse.ReceiveMessageResult.Messages) != 1 || recv.ReceiveMessageResponse.ReceiveMessageResult.Messages[0].Body != "hello" {
		t.Fatalf("ReceiveMessage as JSON: %d %s %v", resp.StatusCode, body, err)
	}

	req, _ = http.NewRequest("GET", e.srv.URL+"/?Action=ListQueues&Version=2012-11-05", nil)
	req.Header.Set("Accept", "application/json")
	resp, body = e.do(req)
	var list struct {
		ListQueuesResponse struct {
			ListQueuesResult struct {
				QueueUrls []string `json:"queueUrls"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != 200 || !strings.Contains(body, `"queueUrls":[`) || len(list.ListQueuesResponse.ListQueuesResult.QueueUrls) != 2 {
		t.Fatalf("ListQueues as JSON: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", e.srv.URL+"/?Action=ListQueues&Version=2012-11-05", nil)
	if resp, body = e.do(req); resp.StatusCode != 200 || !strings.Contains(body, "<ListQueuesResponse") {
		t.Fatalf("ListQueues default: %d %s", resp.StatusCode, body)
	}
}

// TestConformanceTags follows LocalStack's AWS-validated tag tests
// (test_tag_untag_queue, test_tags_case_sensitive,
// test_untag_queue_ignores_non_existing_tag,
// test_tag_queue_overwrites_existing_tag, test_create_queue_with_tags,
// test_queue_list_nonexistent_tags) over both protocols.
func TestConformanceTags(t *testing.T) {
	forBoth(t, func(t *testing.T, e *env, p proto) {
		q := must(p.create(e, "q", nil))(t)
		if tags := must(listQueueTags(e, p, q))(t); len(tags) != 0 {
			t.Fatalf("new queue has tags %v", tags)
		}
		mustOK(t, tagQueue(e, p, q, map[string]string{"tag1": "value1", "tag2": "value2", "tag3": ""}))
		if tags := must(listQueueTags(e, p, q))(t); fmt.Sprint(tags) != "map[tag1:value1 tag2:value2 tag3:]" {
			t.Fatalf("tags %v", tags)
		}
		mustOK(t, untagQueue(e, p, q, "tag1", "tag3", "missing"))
		if tags := must(listQueueTags(e, p, q))(t); fmt.Sprint(tags) != "map[tag2:value2]" {
			t.Fatalf("after untag %v", tags)
		}
		mustOK(t, tagQueue(e, p, q, map[string]string{"tag2": "VALUE2", "MyTag": "a", "mytag": "b"}))
		if tags := must(listQueueTags(e, p, q))(t); fmt.Sprint(tags) != "map[MyTag:a mytag:b tag2:VALUE2]" {
			t.Fatalf("overwrite and case: %v", tags)
		}
		mustOK(t, untagQueue(e, p, q, "tag2", "MyTag", "mytag"))
		if tags := must(listQueueTags(e, p, q))(t); len(tags) != 0 {
			t.Fatalf("after removing all: %v", tags)
		}
		tq := must(createWithTags(e, p, "tagged", map[string]string{"tag1": "value1", "tag2": "value2"}))(t)
		if tags := must(listQueueTags(e, p, tq))(t); fmt.Sprint(tags) != "map[tag1:value1 tag2:value2]" {
			t.Fatalf("created with %v", tags)
		}
	})
}
