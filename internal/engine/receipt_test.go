package engine

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"sync"
	"testing"
)

// TestReceiptSignerMatchesHMAC: reusing keyed HMACs gives, for every body
// and from concurrent callers, exactly HMAC-SHA256 under the key truncated
// to receiptMACLen, so handles issued before the reuse still verify.
func TestReceiptSignerMatchesHMAC(t *testing.T) {
	key := bytes.Repeat([]byte{0x5a}, 32)
	s := newReceiptSigner(key)
	want := func(body []byte) [receiptMACLen]byte {
		h := hmac.New(sha256.New, key)
		h.Write(body)
		var out [receiptMACLen]byte
		copy(out[:], h.Sum(nil))
		return out
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				body := bytes.Repeat([]byte{byte(g), byte(i)}, i%40)
				if got := s.mac(body); got != want(body) {
					errs <- "mismatch"
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	// A different key gives a different MAC (the pool is per key).
	other := newReceiptSigner(bytes.Repeat([]byte{1}, 32))
	if other.mac([]byte("x")) == s.mac([]byte("x")) {
		t.Fatal("two keys, one MAC")
	}
}
