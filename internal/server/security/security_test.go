package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
)

// TestHandshakeFailureLogging: the first failure of a filter chain is a
// warning, then at most one warning per interval per chain with the number
// of failures in between; the others go to verbosity 2.
func TestHandshakeFailureLogging(t *testing.T) {
	// The log is process-wide: a prefix of its own per run keeps -count=N
	// runs from seeing each other's lines.
	prefix := fmt.Sprintf("[listener TestHandshakeFailureLogging-%d]", time.Now().UnixNano())
	h := NewHandshakeLog(serverlog.New("%s", prefix), nil)
	now := time.Now()
	h.now = func() time.Time { return now }
	src := netip.MustParseAddrPort("127.0.0.1:1234")
	errBad := errors.New("bad certificate")
	for range 5 {
		h.failed("chain-a", src, metrics.TLSUnknownCA, errBad)
	}
	h.failed("chain-b", src, metrics.TLSUnknownCA, errBad)
	if n := logs.Count("W", prefix, `filter chain "chain-a"`, "bad certificate"); n != 1 {
		t.Errorf("%d warnings for chain-a, want 1; lines: %q", n, logs.Matching(prefix))
	}
	if n := logs.Count("I", prefix, `filter chain "chain-a"`); n != 4 {
		t.Errorf("%d info lines for chain-a, want 4; lines: %q", n, logs.Matching(prefix))
	}
	if n := logs.Count("W", prefix, `filter chain "chain-b"`); n != 1 {
		t.Errorf("%d warnings for chain-b, want 1; lines: %q", n, logs.Matching(prefix))
	}
	// After the interval, the next failure is a warning with the count.
	now = now.Add(handshakeLogInterval)
	h.failed("chain-a", src, metrics.TLSUnknownCA, errBad)
	if n := logs.Count("W", prefix, `filter chain "chain-a"`, "4 more failure(s)"); n != 1 {
		t.Errorf("%d warnings for chain-a with the count of 4, want 1; lines: %q", n, logs.Matching(prefix))
	}
}

// TestClassify: each failed handshake is counted under the result its
// error means, found by type, never by text.
func TestClassify(t *testing.T) {
	leaf := &x509.Certificate{NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(-time.Minute)}
	future := &x509.Certificate{NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)}
	verifyErr := func(err error) error {
		return fmt.Errorf("handshake: %w", &tls.CertificateVerificationError{Err: err})
	}
	tests := []struct {
		desc string
		err  error
		want metrics.TLSResult
	}{
		{"unknown authority", verifyErr(x509.UnknownAuthorityError{}), metrics.TLSUnknownCA},
		{"expired", verifyErr(x509.CertificateInvalidError{Cert: leaf, Reason: x509.Expired}), metrics.TLSExpired},
		{"not yet valid", verifyErr(x509.CertificateInvalidError{Cert: future, Reason: x509.Expired}), metrics.TLSNotYetValid},
		{"wrong usage", verifyErr(x509.CertificateInvalidError{Cert: leaf, Reason: x509.IncompatibleUsage}), metrics.TLSBadCertificate},
		{"other verification error", verifyErr(errors.New("x")), metrics.TLSBadCertificate},
		{"no certificate", &verifyError{result: metrics.TLSNoClientCert, err: errNoClientCert}, metrics.TLSNoClientCert},
		{"SPIFFE", fmt.Errorf("x: %w", &verifyError{result: metrics.TLSSPIFFEMismatch, err: errors.New("y")}), metrics.TLSSPIFFEMismatch},
		{"peer closed", io.EOF, metrics.TLSPeerClosed},
		{"peer reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, metrics.TLSPeerClosed},
		{"deadline", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, metrics.TLSTimeout},
		{"anything else", errors.New("tls: first record does not look like a TLS handshake"), metrics.TLSUnknownFailure},
	}
	for _, tc := range tests {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify(%v) = %v, want %v", tc.desc, tc.err, got, tc.want)
		}
	}
}
