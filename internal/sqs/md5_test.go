package sqs

import (
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
)

func TestMD5Body(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"hi", "49f68a5c8493ec2c0bf489821c21fc3b"},
		{"foobar2", "cbac77acf401ef89c3297bd9fc41ec0b"},
		{"test", "098f6bcd4621d373cade4e832627b4f6"}, // aws-sdk-go-v2's own checksum test vector
	} {
		if got := md5Hex([]byte(tc.body)); got != tc.want {
			t.Errorf("md5Hex(%q) = %s, want %s", tc.body, got, tc.want)
		}
	}
}

// TestMD5Attributes checks the attribute digest against a value recorded
// from real SQS (a received message with one String attribute, published in
// a public test suite), and checks the properties the algorithm promises.
func TestMD5Attributes(t *testing.T) {
	aws := []engine.Attribute{{Name: "AtTimestamp", DataType: "String", StringValue: "2021-02-15T12:00:33+09:00"}}
	if got, want := md5OfAttributes(aws), "9fd5e217089075be61cd1d67e35e5117"; got != want {
		t.Fatalf("md5OfAttributes = %s, want %s (recorded from AWS)", got, want)
	}
	if got := md5OfAttributes(nil); got != "" {
		t.Fatalf("no attributes: got %q, want empty", got)
	}
	a := []engine.Attribute{
		{Name: "b", DataType: "Binary", BinaryValue: []byte{0, 1, 2}},
		{Name: "a", DataType: "Number", StringValue: "1"},
		{Name: "c", DataType: "String.json", StringValue: "{}"},
	}
	b := []engine.Attribute{a[2], a[0], a[1]}
	if md5OfAttributes(a) != md5OfAttributes(b) {
		t.Fatal("digest depends on attribute order")
	}
	// Binary and String of the same bytes differ by the transport byte.
	s := []engine.Attribute{{Name: "x", DataType: "Binary", BinaryValue: []byte("v")}}
	u := []engine.Attribute{{Name: "x", DataType: "String", StringValue: "v"}}
	if md5OfAttributes(s) == md5OfAttributes(u) {
		t.Fatal("transport byte not included")
	}
}
