package e2e_test

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// TestIdentityTLSMetrics reads the TLS metrics back through an
// OpenTelemetry manual reader: handshakes by outcome and gRFC A118 result
// on a TLS chain, a CA-verified mTLS chain and a SPIFFE chain; the seconds
// until each chain's certificate and earliest root expire, which follow
// rotations of the files and disappear with the chain.
func TestIdentityTLSMetrics(t *testing.T) {
	ctx := testContext(t)
	const refresh = 50 * time.Millisecond
	pki := newSPIFFEPKI(t)
	providers := pki.providers(refresh)
	caFile := filepath.Join(t.TempDir(), "a-root.pem")
	testcerts.WriteFile(t, caFile, pki.domains["a.test"].PEM)
	providers["ca-roots"] = fileWatcher(map[string]string{"ca_certificate_file": caFile}, refresh)
	env := newProvidersEnv(t, providers)
	mr := testutils.NewMetricReader(t)
	chains := []tlsChain{
		{name: "spiffe", src: "127.0.0.1", tls: mtlsWith(instSPIFFE, true)},
		{name: "tls-only", src: "127.0.0.2", tls: downstreamTLS(false, false)},
		{name: "ca-mtls", src: "127.0.0.3", tls: mtlsWith("ca-roots", true)},
	}
	lis, _ := listen(t, "127.0.0.1")
	s, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return identityListener(t, a, chains...)
	}, xds.MeterProvider(mr.Provider), xds.DrainGraceTime(0))
	const (
		handshakes = "grpc.server.tls.handshakes"
		certExpiry = "grpc.xds_server.tls.certificate.time_to_expiry"
		rootExpiry = "grpc.xds_server.tls.root.time_to_expiry"
	)
	result := func(chain, outcome, a118 string) []attribute.KeyValue {
		return append(tlsAttrs(addr, chain), attribute.String("grpc.xds_server.tls.outcome", outcome), attribute.String("grpc.tls.handshake.result", a118))
	}
	// expectSeconds checks that the gauge name of chain is within 10 s of
	// the time left until want.
	expectSeconds := func(t *testing.T, name, chain string, want time.Time) {
		t.Helper()
		got, ok := mr.Value(t, name, tlsAttrs(addr, chain)...)
		if d := time.Until(want).Seconds(); !ok || float64(got) < d-10 || float64(got) > d+10 {
			t.Errorf("%s of chain %q = %d (reported: %v), want about %.0f", name, chain, got, ok, d)
		}
	}
	waitSeconds := func(name, chain string, want time.Time) {
		t.Helper()
		testutils.WaitFor(ctx, t, fmt.Sprintf("%s of chain %q = about %.0f", name, chain, time.Until(want).Seconds()), func() error {
			got, ok := mr.Value(t, name, tlsAttrs(addr, chain)...)
			if d := time.Until(want).Seconds(); !ok || float64(got) <= d-10 || float64(got) >= d+10 {
				return fmt.Errorf("got %d (reported: %v)", got, ok)
			}
			return nil
		})
	}

	// No handshake yet: no provider runs, no expiry is reported.
	for _, name := range []string{certExpiry, rootExpiry} {
		if v, ok := mr.Value(t, name); ok {
			t.Errorf("%s = %d before any handshake, want not reported", name, v)
		}
	}

	aClient := pki.client(t, "a.test", "spiffe://a.test/client")
	for _, c := range []struct {
		chain, src string
		leaf       *testcerts.Leaf
	}{{"spiffe", "127.0.0.1", aClient}, {"tls-only", "127.0.0.2", nil}, {"ca-mtls", "127.0.0.3", aClient}} {
		if code := newClient(t, addr, c.src, 0, pki.creds(c.leaf)).emptyCall(ctx); code != codes.OK {
			t.Fatalf("EmptyCall on chain %q: %v, want OK", c.chain, code)
		}
		mr.WaitForValue(ctx, t, handshakes, 1, result(c.chain, "ok", "SUCCESS")...)
	}
	for _, chain := range []string{"spiffe", "tls-only", "ca-mtls"} {
		expectSeconds(t, certExpiry, chain, pki.server.Cert.NotAfter)
	}
	expectSeconds(t, rootExpiry, "spiffe", pki.domains["b.test"].Cert.NotAfter) // the earlier of a.test and b.test
	expectSeconds(t, rootExpiry, "ca-mtls", pki.domains["a.test"].Cert.NotAfter)
	if v, ok := mr.Value(t, rootExpiry, tlsAttrs(addr, "tls-only")...); ok {
		t.Errorf("%s of the TLS-only chain = %d, want not reported (it has no roots)", rootExpiry, v)
	}

	// Failures on the CA-verified chain, counted by reason.
	expired := pki.domains["a.test"].Issue(t, testcerts.LeafOptions{CommonName: "old", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, c := range []struct {
		desc          string
		leaf          *testcerts.Leaf
		outcome, a118 string
	}{
		{"certificate of another CA", pki.client(t, "b.test", "spiffe://b.test/client"), "unknown_ca", "CERTIFICATE_AUTHORITY_INVALID"},
		{"no certificate", nil, "no_client_certificate", "CERTIFICATE_VERIFICATION_FAILED"},
		{"expired certificate", expired, "expired", "CERTIFICATE_EXPIRED"},
	} {
		dialFails(ctx, t, addr, "127.0.0.3", pki.creds(c.leaf))
		waitAtLeast(ctx, t, mr, handshakes, 1, result("ca-mtls", c.outcome, c.a118)...)
	}
	// A plaintext client on a TLS chain, and a peer that closes before its
	// ClientHello.
	dialFails(ctx, t, addr, "127.0.0.2", grpc.WithTransportCredentials(insecure.NewCredentials()))
	waitAtLeast(ctx, t, mr, handshakes, 1, result("tls-only", "other", "UNKNOWN_FAILURE")...)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	conn, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitAtLeast(ctx, t, mr, handshakes, 1, result("tls-only", "other", "PEER_CONNECTION_CLOSED")...)
	if v, _ := mr.Value(t, handshakes, result("tls-only", "ok", "SUCCESS")...); v != 1 {
		t.Errorf("successful handshakes of the TLS-only chain = %d, want 1", v)
	}

	// Rotations: the server's certificate, and a map without b.test.
	rotated := pki.serverCA.Issue(t, testcerts.LeafOptions{CommonName: "server", DNSNames: []string{"server.test"}, NotAfter: time.Now().Add(30 * time.Minute)})
	testcerts.WriteFiles(t, filepath.Dir(pki.serverFiles.Cert), rotated, nil)
	pki.writeMap(t, "a.test")
	waitSeconds(certExpiry, "spiffe", rotated.Cert.NotAfter)
	waitSeconds(rootExpiry, "spiffe", pki.domains["a.test"].Cert.NotAfter)

	// The CA-verified chain leaves the Listener: its gauges go once its
	// connections have drained.
	env.update(ctx, t, []*listenerpb.Listener{identityListener(t, addr, chains[:2]...)}, nil)
	testutils.WaitFor(ctx, t, "the expiry gauges of a chain no longer in service to go", func() error {
		_, cert := mr.Value(t, certExpiry, tlsAttrs(addr, "ca-mtls")...)
		_, root := mr.Value(t, rootExpiry, tlsAttrs(addr, "ca-mtls")...)
		if cert || root {
			return fmt.Errorf("still reported: certificate %v, root %v", cert, root)
		}
		return nil
	})
	expectSeconds(t, certExpiry, "spiffe", rotated.Cert.NotAfter)

	// A stopped server reports no expiry.
	s.Stop()
	for _, name := range []string{certExpiry, rootExpiry} {
		if v, ok := mr.Value(t, name); ok {
			t.Errorf("%s = %d after Stop, want not reported", name, v)
		}
	}
}
