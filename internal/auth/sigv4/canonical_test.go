package sigv4

import (
	"encoding/hex"
	"net/http/httptest"
	"testing"
)

// TestAWSDocumentedExample checks the pieces against the worked example in
// AWS's SigV4 documentation (IAM ListUsers, 2015-08-30).
func TestAWSDocumentedExample(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	r := httptest.NewRequest("GET", "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08", nil)
	r.Host = "iam.amazonaws.com"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	r.Header.Set("X-Amz-Date", "20150830T123600Z")
	signed := []string{"content-type", "host", "x-amz-date"}
	canonical, _ := canonicalRequest(r, canonicalQuery(splitQuery(r.URL.RawQuery), false), signed, "content-type;host;x-amz-date", emptySHA256, false)
	const wantCanonical = "GET\n/\nAction=ListUsers&Version=2010-05-08\n" +
		"content-type:application/x-www-form-urlencoded; charset=utf-8\nhost:iam.amazonaws.com\nx-amz-date:20150830T123600Z\n\n" +
		"content-type;host;x-amz-date\n" + emptySHA256
	if canonical != wantCanonical {
		t.Fatalf("canonical request:\n%s\nwant:\n%s", canonical, wantCanonical)
	}
	sts := stringToSign("20150830T123600Z", "20150830/us-east-1/iam/aws4_request", canonical)
	const wantSTS = "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\nf536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
	if sts != wantSTS {
		t.Fatalf("string to sign:\n%s\nwant:\n%s", sts, wantSTS)
	}
	key := signingKey(secret, "20150830", "us-east-1", "iam")
	if got := hex.EncodeToString(key); got != "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9" {
		t.Fatalf("signing key %s", got)
	}
	if got := hex.EncodeToString(hmacSHA256(key, sts)); got != "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7" {
		t.Fatalf("signature %s", got)
	}
}

func TestCanonicalPieces(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"", ""},
		{"b=2&a=1", "a=1&b=2"},
		{"a=2&a=1", "a=1&a=2"},
		{"q=a+b", "q=a%20b"},
		{"q=a%2Bb", "q=a%2Bb"},
		{"q=%7e", "q=~"},
		{"q=a/b&q=a-b", "q=a%2Fb&q=a-b"}, // sorted after encoding
		{"flag", "flag="},
		{"a=1&&b=", "a=1&b="},
		{"k=%C3%A9", "k=%C3%A9"},
	} {
		if got := canonicalQuery(splitQuery(c.raw), false); got != c.want {
			t.Errorf("canonicalQuery(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
	if got := canonicalQuery(splitQuery("X-Amz-Signature=abc&a=1"), true); got != "a=1" {
		t.Errorf("presigned query keeps the signature: %q", got)
	}
	for _, c := range []struct{ uri, want string }{
		{"/", "/"},
		{"/000000000000/orders", "/000000000000/orders"},
		{"/a%20b", "/a%2520b"},
		{"/a b", "/a%20b"},
		{"/~x", "/~x"},
		{"http://h:1/p/q?x=1", "/p/q"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RequestURI = c.uri
		if got := canonicalURI(r); got != c.want {
			t.Errorf("canonicalURI(%q) = %q, want %q", c.uri, got, c.want)
		}
	}
	if got := collapseSpaces("a  b   c d"); got != "a b c d" {
		t.Errorf("collapseSpaces: %q", got)
	}
}
