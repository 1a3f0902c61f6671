// Package selfsigned gives tests a TLS certificate of their own: one
// self-signed certificate for 127.0.0.1 and localhost, written to a
// test's temporary directory, and a pool that trusts it.
//
// It imports nothing of Sluice, so that the internal tests of packages
// brokertest imports (server) can use it too.
package selfsigned

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Cert writes a certificate valid for an hour around now, for 127.0.0.1
// and localhost, and its key (PEM files in t's temporary directory), and
// returns their paths and a pool trusting the certificate. It fails t on
// any error.
func Cert(t testing.TB) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// Slot is where a server under test reads its [tls] files: two fixed
// paths in a test's temporary directory, which Put fills as a renewal
// does.
type Slot struct {
	CertPath, KeyPath string

	t  testing.TB
	at time.Time // the last modification time Put gave
}

// NewSlot returns an empty Slot in t's temporary directory.
func NewSlot(t testing.TB) *Slot {
	dir := t.TempDir()
	return &Slot{CertPath: filepath.Join(dir, "cert.pem"), KeyPath: filepath.Join(dir, "key.pem"), t: t, at: time.Now()}
}

// Put installs copies of the files cert and key (Cert's paths) at the
// slot's paths, each written to a new file and renamed over the old one,
// with a modification time a second after the last Put's (a file system's
// clock may be coarser than a test's steps). It fails the test on any
// error.
func (s *Slot) Put(cert, key string) {
	s.t.Helper()
	s.at = s.at.Add(time.Second)
	install(s.t, s.CertPath, cert, s.at)
	install(s.t, s.KeyPath, key, s.at)
}

// install puts a copy of the file src at dst: written to a new file with
// the modification time mod, then renamed over dst.
func install(t testing.TB, dst, src string, mod time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mod, mod); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}
