package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/brokertest/selfsigned"
)

// TestTLSCertificateReload: a certificate replaced on disk is served from
// the next connection on, on the HTTPS and the AMQPS listener, without a
// restart; files that do not form a pair (a key from another certificate)
// leave the one in use, and the server goes on serving it. It fails
// with the certificate read once at start.
func TestTLSCertificateReload(t *testing.T) {
	certA, keyA, _ := selfsigned.Cert(t)
	certB, keyB, _ := selfsigned.Cert(t)
	slot := selfsigned.NewSlot(t)
	slot.Put(certA, keyA)
	s := startWith(t, func(o *Options) {
		o.TLS = TLSConfig{Cert: slot.CertPath, Key: slot.KeyPath}
		o.AMQPSListen = "127.0.0.1:0"
	})
	amqps := s.amqpLns[len(s.amqpLns)-1].Addr().String()
	der := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM block", path)
		}
		return blk.Bytes
	}
	served := func(addr string) []byte {
		t.Helper()
		// Which certificate is served is the question, not whether it
		// is trusted: the test compares it with the files.
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		defer func() { _ = conn.Close() }() // the certificate is read
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	for _, addr := range []string{s.SQSAddr(), amqps} {
		if !bytes.Equal(served(addr), der(certA)) {
			t.Fatalf("%s: not the certificate it started with", addr)
		}
	}
	slot.Put(certB, keyB)
	for _, addr := range []string{s.SQSAddr(), amqps} {
		if !bytes.Equal(served(addr), der(certB)) {
			t.Fatalf("%s: the replaced certificate is not served", addr)
		}
	}
	// The expiry gauge is the served certificate's.
	leafB, err := x509.ParseCertificate(der(certB))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // as served above
	if got, want := scrapeGauge(t, hc, "https://"+s.SQSAddr()+"/metrics", "", ExpiryMetric), float64(leafB.NotAfter.Unix()); got != want {
		t.Fatalf("%s %v, want %v (the served certificate's NotAfter)", ExpiryMetric, got, want)
	}
	// A key that is not the certificate's: B stays in use.
	slot.Put(certB, keyA)
	for _, addr := range []string{s.SQSAddr(), amqps} {
		if !bytes.Equal(served(addr), der(certB)) {
			t.Fatalf("%s: a certificate and key that do not match replaced the pair in use", addr)
		}
	}
}

// scrapeGauge reads the value of the gauge name, without labels, from the
// Prometheus text at url (with a bearer token when token is not "").
func scrapeGauge(t *testing.T, hc *http.Client, url, token, name string) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("%s: no %s in %d answer (%v)", url, name, resp.StatusCode, sc.Err())
	return 0
}
