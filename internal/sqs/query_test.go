package sqs

import (
	"context"
	"net/url"
	"reflect"
	"testing"
)

func mustForm(t *testing.T, raw string) form {
	t.Helper()
	f := form{}
	if err := parseForm(f, raw); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFormUnflatten(t *testing.T) {
	f := mustForm(t, "AttributeName.2=B&AttributeName.1=A&AttributeName.10=C&AttributeName.x=bad&AttributeName.0=zero"+
		"&Attribute.1.Name=DelaySeconds&Attribute.1.Value=5&Attribute.2.Name=VisibilityTimeout&Attribute.2.Value=7"+
		"&MessageAttribute.1.Name=s&MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=v"+
		"&MessageAttribute.2.Name=b&MessageAttribute.2.Value.DataType=Binary&MessageAttribute.2.Value.BinaryValue="+url.QueryEscape("AAEC"))
	if got := f.list("AttributeName"); !reflect.DeepEqual(got, []string{"A", "B", "C"}) {
		t.Errorf("list = %v", got)
	}
	if got := f.strMap("Attribute", "Name", "Value"); !reflect.DeepEqual(got, map[string]string{"DelaySeconds": "5", "VisibilityTimeout": "7"}) {
		t.Errorf("map = %v", got)
	}
	attrs, err := f.msgAttrs("MessageAttribute")
	if err != nil {
		t.Fatal(err)
	}
	if *attrs["s"].StringValue != "v" || attrs["s"].DataType != "String" || !reflect.DeepEqual(attrs["b"].BinaryValue, []byte{0, 1, 2}) {
		t.Errorf("attrs = %+v", attrs)
	}
	if _, err := mustForm(t, "MessageAttribute.1.Name=b&MessageAttribute.1.Value.DataType=Binary&MessageAttribute.1.Value.BinaryValue=%21%21").msgAttrs("MessageAttribute"); err == nil {
		t.Error("bad base64 accepted")
	}
}

func TestBatchUnflatten(t *testing.T) {
	f := mustForm(t, "QueueUrl=u&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=x"+
		"&SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=y&SendMessageBatchRequestEntry.2.DelaySeconds=3"+
		"&SendMessageBatchRequestEntry.2.MessageAttribute.1.Name=k&SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType=String"+
		"&SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue=v")
	var in sendMessageBatchInput
	if err := in.fromQuery(f); err != nil {
		t.Fatal(err)
	}
	if in.QueueUrl != "u" || len(in.Entries) != 2 || in.Entries[0].Id != "a" || *in.Entries[1].MessageBody != "y" ||
		in.Entries[1].DelaySeconds.V != 3 || *in.Entries[1].MessageAttributes["k"].StringValue != "v" {
		t.Fatalf("decoded %+v", in)
	}
}

func TestXMLEscape(t *testing.T) {
	var w xmlWriter
	w.elem("B", "a\"b\rc<d>&e'\x01\xff")
	if got, want := w.b.String(), "<B>a&quot;b&#xD;c&lt;d&gt;&amp;e'\uFFFD\uFFFD</B>"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestQueueName(t *testing.T) {
	h := New(nil, Options{AccountID: "123456789012"})
	c := &call{h: h, ctx: context.Background()}
	for _, tc := range []struct {
		url, name string
		ok        bool
	}{
		{"http://localhost:9324/123456789012/orders", "orders", true},
		{"https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo", "q.fifo", true},
		{"/123456789012/orders", "orders", true},
		{"orders", "orders", true},
		{"http://h/999999999999/orders", "", false},
		{"http://h/", "", false},
		{"http://h/123456789012/bad name", "", false},
	} {
		got, err := c.queueName(tc.url)
		if (err == nil) != tc.ok || got != tc.name {
			t.Errorf("queueName(%q) = %q, %v", tc.url, got, err)
		}
	}
	c.pathAccount, c.pathQueue = "123456789012", "p"
	if got, err := c.queueName(""); err != nil || got != "p" {
		t.Errorf("path fallback = %q, %v", got, err)
	}
}

func TestPage(t *testing.T) {
	names := []string{"a", "b", "c"}
	two := parseOptInt("2")
	p1, tok, err := page(names, two, "")
	if err != nil || !reflect.DeepEqual(p1, []string{"a", "b"}) || tok == "" {
		t.Fatalf("page 1 = %v %q %v", p1, tok, err)
	}
	p2, tok2, err := page(names, two, tok)
	if err != nil || !reflect.DeepEqual(p2, []string{"c"}) || tok2 != "" {
		t.Fatalf("page 2 = %v %q %v", p2, tok2, err)
	}
	all, tok3, _ := page(names, optInt{}, "")
	if len(all) != 3 || tok3 != "" {
		t.Fatalf("no max = %v %q", all, tok3)
	}
	if _, _, err := page(names, parseOptInt("0"), ""); err == nil {
		t.Fatal("MaxResults 0 accepted")
	}
	if _, _, err := page(names, two, "!!"); err == nil {
		t.Fatal("bad token accepted")
	}
}
