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

// TestReceiptHandleGolden: handles are what clients hold across broker
// upgrades. This one was issued by main at 38bb3ad (before the signer and
// the stack encoding); today's code issues the same bytes, decodes it and
// accepts its MAC.
func TestReceiptHandleGolden(t *testing.T) {
	const golden = "AgAAAAUAAAAAAAAABwAAAAAAAABjAAAAAwECAwQFBgcI2pWemmeGOw7lZTKT"
	key := newReceiptSigner(bytes.Repeat([]byte{7}, 32))
	m := &message{seq: 7, receipt: 99, recvCount: 3, id: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	if got := encodeReceipt(key, 5, m); got != golden {
		t.Fatalf("issued %s, want %s", got, golden)
	}
	h, ok := decodeReceipt(golden)
	if !ok || !h.v2 || h.qid != 5 || h.seq != 7 || h.receipt != 99 || h.count != 3 || !h.validMAC(key) {
		t.Fatalf("decoded %+v ok=%v", h, ok)
	}
}
