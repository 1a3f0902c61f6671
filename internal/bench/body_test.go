package bench

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestBodyStampRoundTrip(t *testing.T) {
	b := newBody(0xdeadbeef, 64)
	putHex(b[stampOff:stampOff+16], uint64(1234567890123))
	if len(b) != 64 || !strings.HasPrefix(string(b), "SB1.deadbeef.") {
		t.Fatalf("body %q", b)
	}
	raw, _ := json.Marshal(struct{ Body string }{string(b)})
	var got struct{ Body bodyStamp }
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Body.ok || got.Body.run != 0xdeadbeef || got.Body.stamp != 1234567890123 {
		t.Fatalf("decoded %+v", got.Body)
	}
	for _, foreign := range []string{`"hello"`, `"SB1.zzzzzzzz.0000000000000000.xxxx"`, `123`, `""`} {
		var s bodyStamp
		if err := s.UnmarshalJSON([]byte(foreign)); err != nil || s.ok {
			t.Errorf("%s: ok=%t err=%v, want not ours", foreign, s.ok, err)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uo\te`, "ctl\x00\x1f\n", "ünï/cødé"} {
		raw := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(raw, &back); err != nil || back != s {
			t.Errorf("%q encoded as %s, decoded %q (%v)", s, raw, back, err)
		}
	}
}

func TestEncodeSendBatchIsValidJSON(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		o := DefaultSQSOptions()
		o.FIFO, o.Size = fifo, 100
		r := &run{o: o, queueURL: `http://h/000000000000/q"x`, id: 7}
		b := r.encodeSendBatch(3, 4)
		for i, off := range b.stamps {
			putHex(b.json[off:off+16], uint64(1000+i))
			if fifo {
				putHex(b.json[b.seqs[i]:b.seqs[i]+16], uint64(i))
			}
		}
		var req struct {
			QueueUrl string
			Entries  []struct {
				Id, MessageBody                        string
				MessageGroupId, MessageDeduplicationId string
			}
		}
		if err := json.Unmarshal(b.json, &req); err != nil {
			t.Fatalf("fifo=%t: %v in %s", fifo, err, b.json)
		}
		if req.QueueUrl != r.queueURL || len(req.Entries) != 4 {
			t.Fatalf("fifo=%t: %+v", fifo, req)
		}
		dedup := map[string]bool{}
		for i, e := range req.Entries {
			var s bodyStamp
			_ = s.UnmarshalJSON([]byte(`"` + e.MessageBody + `"`))
			if len(e.MessageBody) != 100 || !s.ok || s.run != 7 || s.stamp != int64(1000+i) {
				t.Errorf("entry %d: body %q decodes to %+v", i, e.MessageBody, s)
			}
			if fifo && (e.MessageGroupId == "" || dedup[e.MessageDeduplicationId]) {
				t.Errorf("entry %d: group %q dedup %q", i, e.MessageGroupId, e.MessageDeduplicationId)
			}
			dedup[e.MessageDeduplicationId] = true
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	var o SQSOptions
	fs := flag.NewFlagSet("sqs", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"-producers", "2", "-duration", "3s", "-fifo", "-pid", "9"}); err != nil {
		t.Fatal(err)
	}
	want := DefaultSQSOptions()
	want.Producers, want.Duration, want.FIFO, want.PID = 2, 3*time.Second, true, 9
	if o != want {
		t.Fatalf("got %+v\nwant %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.queueName() != "bench.fifo" {
		t.Fatalf("queue name %q", o.queueName())
	}
	for _, bad := range [][]string{{"-batch", "11"}, {"-size", "10"}, {"-endpoint", "nohost"}, {"-wait", "21"}, {"-producers", "0"}, {"-backlog", "-1"}} {
		var o SQSOptions
		fs := flag.NewFlagSet("sqs", flag.ContinueOnError)
		o.RegisterFlags(fs)
		if err := fs.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if o.Validate() == nil {
			t.Errorf("%v: Validate accepted", bad)
		}
	}
}
