package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ServingCert is the [tls] certificate a server's (or a cluster node's)
// listeners present. It follows its files: at each TLS handshake it looks
// at the certificate's and the key's modification time and size (two
// stat calls, small beside the handshake itself) and, when either changed,
// reads them again, so that a renewed certificate (certbot, cert-manager,
// a rotation by hand) is served from the next connection on, without a
// restart. A pair that does not load (written halfway, a key that does
// not match) leaves the previous certificate in use and is logged once;
// the files are read again at their next change. Connections already open
// keep the certificate they were made with.
type ServingCert struct {
	certFile, keyFile string
	log               *slog.Logger

	mu    sync.Mutex // held while checking and reading the files
	seen  [2]fileStamp
	cert  atomic.Pointer[tls.Certificate]
	roots atomic.Pointer[x509.CertPool]
}

// fileStamp is what says a file changed: its modification time and size.
type fileStamp struct {
	modNanos int64 // Unix ns
	size     int64
}

// Open reads the certificate and key of c; nil, nil when no certificate
// is configured. log receives the reloads (nil: discarded).
func (c TLSConfig) Open(log *slog.Logger) (*ServingCert, error) {
	if c.Cert == "" {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &ServingCert{certFile: c.Cert, keyFile: c.Key, log: log}
	stamps, err := s.stamps()
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	s.seen = stamps
	return s, nil
}

// Config returns the listeners' TLS settings: TLS 1.2 at least, Go's
// default cipher suites, and this certificate as it is at each handshake.
func (s *ServingCert) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			s.refresh()
			return s.cert.Load(), nil
		},
	}
}

// Roots returns the pool another node's certificate is checked against
// (a cluster node's requests to the leader's public listener): the
// system's roots and every certificate of the certificate file as last
// loaded (this node's own certificate and the chain after it).
func (s *ServingCert) Roots() *x509.CertPool {
	s.refresh()
	return s.roots.Load()
}

// ExpiryMetric is the name of the gauge Collector exports.
const ExpiryMetric = "sluice_tls_certificate_expiry_timestamp_seconds"

// Collector exports ExpiryMetric: when the certificate in use stops being
// valid (its NotAfter, Unix seconds), after a look at its files, so that
// an alert can fire before a renewal that did not happen shows.
func (s *ServingCert) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ExpiryMetric,
		Help: "When the [tls] certificate the listeners present stops being valid (its NotAfter), in Unix seconds; it follows a certificate renewed on disk."},
		func() float64 {
			s.refresh()
			if end, ok := s.notAfter(); ok {
				return float64(end.Unix())
			}
			return 0
		})
}

// notAfter is the end of the certificate in use; false only with
// GODEBUG=x509keypairleaf=0 (no parsed leaf).
func (s *ServingCert) notAfter() (time.Time, bool) {
	if leaf := s.cert.Load().Leaf; leaf != nil {
		return leaf.NotAfter, true
	}
	return time.Time{}, false
}

// refresh reads the files again when their stamps changed since they were
// last looked at.
func (s *ServingCert) refresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	stamps, err := s.stamps()
	if err != nil || stamps == s.seen {
		// A file gone for a moment (replaced by a rename) keeps the
		// certificate in use; the stat after the rename sees the change.
		return
	}
	s.seen = stamps
	if err := s.load(); err != nil {
		s.log.Warn("tls: the certificate files changed but do not load; the previous certificate stays in use until they change again",
			"cert", s.certFile, "key", s.keyFile, "err", err)
		return
	}
	attrs := []any{"cert", s.certFile}
	if end, ok := s.notAfter(); ok {
		attrs = append(attrs, "not_after", end)
	}
	s.log.Info("tls: certificate reloaded", attrs...)
}

func (s *ServingCert) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{s.certFile, s.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{modNanos: fi.ModTime().UnixNano(), size: fi.Size()}
	}
	return out, nil
}

// load reads both files, once each, and, when they form a pair, puts them
// in use.
func (s *ServingCert) load() error {
	certPEM, err := os.ReadFile(s.certFile)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(s.keyFile)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	roots.AppendCertsFromPEM(certPEM) // X509KeyPair found one at least
	s.cert.Store(&pair)
	s.roots.Store(roots)
	return nil
}
