package metrics_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestTLSRecorders: handshakes are counted per listener and chain with
// their outcome and gRFC A118 result; the expiry gauges report what their
// observers return, the latest observer of a chain wins, and nothing is
// reported once every observer stopped.
func TestTLSRecorders(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	l := metrics.NewServer(mr.Provider).Listener("127.0.0.1:443")
	a, b := l.TLSChain("a"), l.TLSChain("b")
	a.Handshake(metrics.TLSOK)
	a.Handshake(metrics.TLSOK)
	a.Handshake(metrics.TLSNotYetValid)
	b.Handshake(metrics.TLSSPIFFEMismatch)

	lis := attribute.String(metrics.AttrListener, "127.0.0.1:443")
	chain := func(c string) attribute.KeyValue { return attribute.String(metrics.AttrFilterChain, c) }
	for _, c := range []struct {
		chain, outcome, result string
		want                   int64
	}{
		{"a", "ok", "SUCCESS", 2},
		{"a", "expired", "CERTIFICATE_NOT_YET_VALID", 1},
		{"b", "spiffe_mismatch", "CERTIFICATE_VERIFICATION_FAILED", 1},
	} {
		got, ok := mr.Value(t, metrics.TLSHandshakes, lis, chain(c.chain),
			attribute.String(metrics.AttrTLSOutcome, c.outcome), attribute.String(metrics.AttrTLSResult, c.result))
		if !ok || got != c.want {
			t.Errorf("%s{%s, %s, %s} = %d (recorded: %v), want %d", metrics.TLSHandshakes, c.chain, c.outcome, c.result, got, ok, c.want)
		}
	}

	now := time.Now()
	stopA := a.ObserveExpiry(func() (time.Time, time.Time) { return now.Add(time.Hour), time.Time{} })
	stopB := b.ObserveExpiry(func() (time.Time, time.Time) { return now.Add(-time.Minute), now.Add(48 * time.Hour) })
	near := func(name, c string, want time.Duration) {
		t.Helper()
		got, ok := mr.Value(t, name, lis, chain(c))
		if !ok || got < int64(want.Seconds())-5 || got > int64(want.Seconds())+5 {
			t.Errorf("%s{%s} = %d (reported: %v), want about %v", name, c, got, ok, want.Seconds())
		}
	}
	near(metrics.TLSCertificateTimeToExpiry, "a", time.Hour)
	near(metrics.TLSCertificateTimeToExpiry, "b", -time.Minute)
	near(metrics.TLSRootTimeToExpiry, "b", 48*time.Hour)
	if v, ok := mr.Value(t, metrics.TLSRootTimeToExpiry, lis, chain("a")); ok {
		t.Errorf("root expiry of a chain without roots = %d, want not reported", v)
	}

	// A newer chain of the same name replaces the old one's reports; the
	// old one stopping later does not remove the new one.
	a2 := l.TLSChain("a")
	stopA2 := a2.ObserveExpiry(func() (time.Time, time.Time) { return now.Add(2 * time.Hour), time.Time{} })
	near(metrics.TLSCertificateTimeToExpiry, "a", 2*time.Hour)
	stopA()
	stopA() // no effect
	near(metrics.TLSCertificateTimeToExpiry, "a", 2*time.Hour)

	stopB()
	stopA2()
	for _, name := range []string{metrics.TLSCertificateTimeToExpiry, metrics.TLSRootTimeToExpiry} {
		if v, ok := mr.Value(t, name); ok {
			t.Errorf("%s = %d after every observer stopped, want not reported", name, v)
		}
	}
	// ListenerShared can come back after the callback was unregistered.
	stop := b.ObserveExpiry(func() (time.Time, time.Time) { return now.Add(time.Minute), time.Time{} })
	defer stop()
	near(metrics.TLSCertificateTimeToExpiry, "b", time.Minute)
}

// Without a MeterProvider the TLS recorders are nil and record nothing.
func TestNilTLSRecorders(t *testing.T) {
	var l *metrics.Listener
	c := l.TLSChain("a")
	c.Handshake(metrics.TLSOK)
	c.ObserveExpiry(func() (time.Time, time.Time) { return time.Now(), time.Now() })()
}

// Counting a handshake does not allocate.
func TestTLSHandshakeNoAllocs(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	c := metrics.NewServer(mr.Provider).Listener("127.0.0.1:1").TLSChain("a")
	c.Handshake(metrics.TLSOK)
	if n := testing.AllocsPerRun(100, func() { c.Handshake(metrics.TLSOK) }); n != 0 {
		t.Errorf("TLSChain.Handshake allocates %v times, want 0", n)
	}
}

// Every result has an outcome of the documented set and an A118 result.
func TestTLSResultNames(t *testing.T) {
	outcomes := map[string]bool{"ok": true, "no_client_certificate": true, "unknown_ca": true, "spiffe_mismatch": true, "expired": true, "other": true}
	for r := metrics.TLSOK; r <= metrics.TLSUnknownFailure; r++ {
		if !outcomes[r.Outcome()] || r.A118() == "" {
			t.Errorf("result %d = %s, want a documented outcome and an A118 result", r, r)
		}
	}
}
