package security

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
)

// TestHandshakeFailureLogging: the first failure of a filter chain is a
// warning, then at most one warning per interval per chain with the number
// of failures in between; the others go to verbosity 2.
func TestHandshakeFailureLogging(t *testing.T) {
	const prefix = "[listener TestHandshakeFailureLogging]"
	h := NewHandshakeLog(serverlog.New(prefix), nil)
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
