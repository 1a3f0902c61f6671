package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// oneByteReader hands out one byte per Read, as a slow connection may.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// TestReadCallBody reads engine-call bodies announced and not, within the
// limit and over it, arriving a byte at a time, and refuses one cut short.
func TestReadCallBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	req := func(announced int64, b []byte) *http.Request {
		r := httptest.NewRequest(http.MethodPost, ShardEnginePath, oneByteReader{bytes.NewReader(b)})
		r.ContentLength = announced
		return r
	}
	for _, announced := range []int64{int64(len(body)), -1} {
		got, err := readCallBody(req(announced, body), len(body))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("announced %d, limit %d: %d bytes, %v; want the %d sent", announced, len(body), len(got), err, len(body))
		}
		// Over the limit: limit+1 bytes, for the caller to refuse.
		got, err = readCallBody(req(announced, body), len(body)-1)
		if err != nil || len(got) != len(body) {
			t.Fatalf("announced %d, limit %d: %d bytes, %v; want %d", announced, len(body)-1, len(got), err, len(body))
		}
	}
	if _, err := readCallBody(req(int64(len(body)), body[:len(body)-1]), len(body)); err == nil {
		t.Fatal("a body shorter than announced was read without an error")
	}
}
