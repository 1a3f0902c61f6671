package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestReadPeerBody reads engine-call bodies announced and not, within the
// limit and over it, arriving a byte at a time, and refuses one cut short.
// (internal/cluster's TestReadReply reads answers through net/http.)
func TestReadPeerBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	req := func(announced int64, b []byte) *http.Request {
		r := httptest.NewRequest(http.MethodPost, ShardEnginePath, oneByteReader{bytes.NewReader(b)})
		r.ContentLength = announced
		return r
	}
	readPeerBody := func(r *http.Request, limit int) ([]byte, error) {
		return ReadPeerBody(r.Body, r.ContentLength, limit)
	}
	for _, announced := range []int64{int64(len(body)), -1} {
		got, err := readPeerBody(req(announced, body), len(body))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("announced %d, limit %d: %d bytes, %v; want the %d sent", announced, len(body), len(got), err, len(body))
		}
		// Over the limit: limit+1 bytes, for the caller to refuse.
		got, err = readPeerBody(req(announced, body), len(body)-1)
		if err != nil || len(got) != len(body) {
			t.Fatalf("announced %d, limit %d: %d bytes, %v; want %d", announced, len(body)-1, len(got), err, len(body))
		}
	}
	if _, err := readPeerBody(req(int64(len(body)), body[:len(body)-1]), len(body)); err == nil {
		t.Fatal("a body shorter than announced was read without an error")
	}
}

// TestReadPeerBodyOverHTTP reads answers through net/http, announced and
// chunked, within the limit and over it, as a node reads a shard
// leader's answers (internal/cluster).
func TestReadPeerBodyOverHTTP(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("announce") == "1" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		}
		for i := 0; i < len(big); i += 4096 {
			_, _ = w.Write(big[i : i+4096])
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	for _, announce := range []string{"0", "1"} {
		for _, limit := range []int{len(big), len(big) - 1} {
			resp, err := http.Get(srv.URL + "/?announce=" + announce)
			if err != nil {
				t.Fatal(err)
			}
			if announce == "1" && resp.ContentLength != int64(len(big)) {
				t.Fatalf("announced length %d, want %d", resp.ContentLength, len(big))
			}
			got, err := ReadPeerBody(resp.Body, resp.ContentLength, limit)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatalf("announce=%s limit=%d: %v", announce, limit, err)
			}
			switch {
			case limit >= len(big) && !bytes.Equal(got, big):
				t.Fatalf("announce=%s: got %d bytes, want the %d sent", announce, len(got), len(big))
			case limit < len(big) && len(got) != limit+1:
				// Over the limit: limit+1 bytes, for the caller to refuse.
				t.Fatalf("announce=%s limit=%d: got %d bytes, want %d", announce, limit, len(got), limit+1)
			}
		}
	}
}
