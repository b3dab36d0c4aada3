package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/metrics"
)

// verifyError is a client certificate refused by this package's own checks
// (crypto/tls's are classified from their errors), with the result it is
// counted under.
type verifyError struct {
	result metrics.TLSResult
	err    error
}

func (e *verifyError) Error() string { return e.err.Error() }
func (e *verifyError) Unwrap() error { return e.err }

var errNoClientCert = errors.New("the client sent no certificate, and the filter chain requires one")

// verified is the result of a successful SPIFFE verification. Written by
// the handshake's VerifyConnection, read after the handshake returned.
type verified struct {
	id     *url.URL
	chains [][]*x509.Certificate
}

// requireClientCert is a VerifyConnection that refuses a connection whose
// client sent no certificate; crypto/tls has verified one that was sent.
func requireClientCert(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return &verifyError{result: metrics.TLSNoClientCert, err: errNoClientCert}
	}
	return nil
}

// verifySPIFFE verifies the client's certificate chain with a SPIFFE trust
// bundle map (gRFC A87): the leaf must carry exactly one URI SAN, a valid
// SPIFFE ID, whose trust domain has a bundle in m; the chain must verify
// against that bundle's authorities (and only those). A client without a
// certificate is accepted unless require. On success the SPIFFE ID and the
// verified chains are stored in *out.
func verifySPIFFE(cs tls.ConnectionState, m *certprovider.BundleMap, require bool, out *verified) error {
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		if require {
			return &verifyError{result: metrics.TLSNoClientCert, err: errNoClientCert}
		}
		return nil
	}
	id, err := x509svid.IDFromCert(certs[0])
	if err != nil {
		return &verifyError{result: metrics.TLSSPIFFEMismatch,
			err: fmt.Errorf("SPIFFE verification: the client certificate has no SPIFFE ID: %w", err)}
	}
	td := id.TrustDomain()
	b := m.Bundle(td)
	if b == nil {
		return &verifyError{result: metrics.TLSSPIFFEMismatch,
			err: fmt.Errorf("SPIFFE verification: trust domain %q of %s is not in the SPIFFE bundle map", td.Name(), id)}
	}
	_, chains, err := x509svid.Verify(certs, b)
	if err == nil {
		out.id, out.chains = id.URL(), chains
		return nil
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		if other, ok := signingDomain(certs, m, td); ok {
			return &verifyError{result: metrics.TLSSPIFFEMismatch,
				err: fmt.Errorf("SPIFFE verification: %s is signed by a root of trust domain %q, not of %q", id, other.Name(), td.Name())}
		}
	}
	return &verifyError{result: classifyX509(err, metrics.TLSSPIFFEMismatch), err: fmt.Errorf("SPIFFE verification of %s: %w", id, err)}
}

// signingDomain returns a trust domain other than td whose bundle verifies
// certs: a certificate that names one domain and is signed by another's
// root. Only called for a chain that failed verification, so the extra
// work is never done for a good client.
func signingDomain(certs []*x509.Certificate, m *certprovider.BundleMap, td spiffeid.TrustDomain) (spiffeid.TrustDomain, bool) {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	for _, other := range m.TrustDomains() {
		if other == td {
			continue
		}
		opts := x509.VerifyOptions{Roots: m.Roots(other), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
		if _, err := certs[0].Verify(opts); err == nil {
			return other, true
		}
	}
	return spiffeid.TrustDomain{}, false
}

// classifyX509 returns the result of a certificate verification error of
// crypto/x509; fallback when it is none of x509's typed errors (go-spiffe's
// SVID checks, for example).
func classifyX509(err error, fallback metrics.TLSResult) metrics.TLSResult {
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return metrics.TLSUnknownCA
	}
	if e, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		if e.Reason == x509.Expired {
			if e.Cert != nil && time.Now().Before(e.Cert.NotBefore) {
				return metrics.TLSNotYetValid
			}
			return metrics.TLSExpired
		}
		return metrics.TLSBadCertificate
	}
	if _, ok := errors.AsType[x509.UnhandledCriticalExtension](err); ok {
		return metrics.TLSBadCertificate
	}
	if _, ok := errors.AsType[x509.InsecureAlgorithmError](err); ok {
		return metrics.TLSBadCertificate
	}
	if _, ok := errors.AsType[x509.ConstraintViolationError](err); ok {
		return metrics.TLSBadCertificate
	}
	return fallback
}

// classify returns the result a failed handshake is counted under.
func classify(err error) metrics.TLSResult {
	if e, ok := errors.AsType[*verifyError](err); ok {
		return e.result
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return classifyX509(err, metrics.TLSBadCertificate)
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return metrics.TLSTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return metrics.TLSPeerClosed
	}
	return metrics.TLSUnknownFailure
}
