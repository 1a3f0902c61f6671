package cluster

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestReadReply reads answers announced and chunked, within the limit and
// over it.
func TestReadReply(t *testing.T) {
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
			got, err := readReply(resp, limit)
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
