package e2e_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// TestIdentitySPIFFE: mutual TLS with a SPIFFE trust bundle map (gRFC A87),
// with real grpc-go TLS clients. The map holds a.test and b.test; the
// provider also names a CA file that trusts every client CA of the test
// (c.test's included), which must not be used. Each case dials from its own
// source address, which the Listener gives a filter chain of its own, so
// that each failure is logged (the first of a chain is a warning) and
// counted under its chain. A connection opened before the failures keeps
// working after them.
func TestIdentitySPIFFE(t *testing.T) {
	ctx := testContext(t)
	pki := newSPIFFEPKI(t)
	env := newProvidersEnv(t, pki.providers(time.Hour))
	mr := testutils.NewMetricReader(t)
	peers := newPeerRecorder()

	// RBAC of the "rbac" chain: only spiffe://a.test/allowed.
	allowOne := rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"allowed": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals: []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Authenticated_{
			Authenticated: &rbacconfigpb.Principal_Authenticated{PrincipalName: exactString("spiffe://a.test/allowed")},
		}}},
	}})
	expired := pki.domains["a.test"].Issue(t, testcerts.LeafOptions{CommonName: "expired", URIs: []string{"spiffe://a.test/old"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	notYet := pki.domains["a.test"].Issue(t, testcerts.LeafOptions{CommonName: "future", URIs: []string{"spiffe://a.test/future"},
		NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})
	selfSigned := testcerts.NewCA(t, "self")

	tests := []struct {
		desc  string
		chain string
		roots string // the root provider instance; instSPIFFE if empty
		opt   bool   // require_client_certificate false
		cert  *testcerts.Leaf
		// wantOK: the RPC succeeds and the server sees wantID; otherwise
		// the handshake fails, a warning names the chain, the outcome and
		// wantLog, and the handshake is counted as wantOutcome/wantResult.
		wantOK      bool
		wantID      string
		wantLog     string
		wantOutcome string
		wantResult  string
	}{
		{desc: "client of a.test", chain: "a-ok", cert: pki.client(t, "a.test", "spiffe://a.test/client"),
			wantOK: true, wantID: "spiffe://a.test/client"},
		{desc: "client of the federated b.test", chain: "b-ok", cert: pki.client(t, "b.test", "spiffe://b.test/ns/x/sa/y"),
			wantOK: true, wantID: "spiffe://b.test/ns/x/sa/y"},
		{desc: "provider with only a bundle map", chain: "map-only", roots: instSPIFFEOnly, cert: pki.client(t, "b.test", "spiffe://b.test/client"),
			wantOK: true, wantID: "spiffe://b.test/client"},
		{desc: "no URI SAN", chain: "no-uri", cert: pki.client(t, "a.test"),
			wantLog: "has no SPIFFE ID", wantOutcome: "spiffe_mismatch", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
		{desc: "two URI SANs", chain: "two-uris", cert: pki.client(t, "a.test", "spiffe://a.test/one", "spiffe://a.test/two"),
			wantLog: "more than one URI SAN", wantOutcome: "spiffe_mismatch", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
		{desc: "a URI SAN that is not a SPIFFE ID", chain: "https-uri", cert: pki.client(t, "a.test", "https://a.test/client"),
			wantLog: "has no SPIFFE ID", wantOutcome: "spiffe_mismatch", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
		{desc: "trust domain not in the map (its CA is in the CA file)", chain: "unknown-domain", cert: pki.client(t, "c.test", "spiffe://c.test/client"),
			wantLog:     `trust domain "c.test" of spiffe://c.test/client is not in the SPIFFE bundle map`,
			wantOutcome: "spiffe_mismatch", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
		{desc: "signed by another domain's root", chain: "cross-domain", cert: pki.client(t, "b.test", "spiffe://a.test/impostor"),
			wantLog:     `signed by a root of trust domain "b.test", not of "a.test"`,
			wantOutcome: "spiffe_mismatch", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
		{desc: "self-signed, naming a.test", chain: "self-signed", cert: selfSigned.Issue(t, testcerts.LeafOptions{URIs: []string{"spiffe://a.test/self"}}),
			wantLog: "unknown authority", wantOutcome: "unknown_ca", wantResult: "CERTIFICATE_AUTHORITY_INVALID"},
		{desc: "expired", chain: "expired", cert: expired,
			wantLog: "expired", wantOutcome: "expired", wantResult: "CERTIFICATE_EXPIRED"},
		{desc: "not yet valid", chain: "not-yet-valid", cert: notYet,
			wantLog: "not yet valid", wantOutcome: "expired", wantResult: "CERTIFICATE_NOT_YET_VALID"},
		{desc: "no client certificate", chain: "no-cert",
			wantLog: "sent no certificate", wantOutcome: "no_client_certificate", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
		{desc: "optional client certificate: none", chain: "opt-none", opt: true, wantOK: true},
		{desc: "optional client certificate: not a SPIFFE one", chain: "opt-bad", opt: true, cert: pki.client(t, "a.test"),
			wantLog: "has no SPIFFE ID", wantOutcome: "spiffe_mismatch", wantResult: "CERTIFICATE_VERIFICATION_FAILED"},
	}
	var chains []tlsChain
	for i, tc := range tests {
		roots := tc.roots
		if roots == "" {
			roots = instSPIFFE
		}
		chains = append(chains, tlsChain{name: tc.chain, src: fmt.Sprintf("127.0.0.%d", 20+i), tls: mtlsWith(roots, !tc.opt)})
	}
	chains = append(chains, tlsChain{name: "rbac", src: "127.0.0.10", tls: mtlsWith(instSPIFFE, true), rbac: allowOne})
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return identityListener(t, a, chains...)
	}, peers.option(), xds.MeterProvider(mr.Provider))

	// A connection of the first chain, open before every failure below.
	first := newClient(t, addr, "127.0.0.20", 0, pki.creds(tests[0].cert))
	if code := first.emptyCall(ctx); code != codes.OK {
		t.Fatalf("EmptyCall of a valid a.test client: %v, want OK", code)
	}
	peers.next(ctx, t)

	for i, tc := range tests {
		t.Run(strings.ReplaceAll(tc.desc, " ", "_"), func(t *testing.T) {
			src := fmt.Sprintf("127.0.0.%d", 20+i)
			attrs := tlsAttrs(addr, tc.chain)
			if tc.wantOK {
				c := newClient(t, addr, src, 0, pki.creds(tc.cert))
				if code := c.emptyCall(ctx); code != codes.OK {
					t.Fatalf("EmptyCall: %v, want OK", code)
				}
				info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
				if !ok {
					t.Fatal("the handler's peer has no TLS AuthInfo")
				}
				if got := fmt.Sprint(info.SPIFFEID); tc.wantID != "" && got != tc.wantID {
					t.Errorf("handler saw SPIFFE ID %s, want %s", got, tc.wantID)
				}
				if tc.cert != nil && len(info.State.VerifiedChains) == 0 {
					t.Error("handler saw no verified chain for a verified SPIFFE client")
				}
				waitAtLeast(ctx, t, mr, "grpc.server.tls.handshakes", 1, append(attrs,
					attribute.String("grpc.xds_server.tls.outcome", "ok"), attribute.String("grpc.tls.handshake.result", "SUCCESS"))...)
				return
			}
			dialFails(ctx, t, addr, src, pki.creds(tc.cert))
			warningsOf("[listener "+addr.String()+"]").waitCount(ctx, t, 1,
				fmt.Sprintf("filter chain %q", tc.chain), "("+tc.wantOutcome+")", tc.wantLog)
			waitAtLeast(ctx, t, mr, "grpc.server.tls.handshakes", 1, append(attrs,
				attribute.String("grpc.xds_server.tls.outcome", tc.wantOutcome), attribute.String("grpc.tls.handshake.result", tc.wantResult))...)
			if v, ok := mr.Value(t, "grpc.server.tls.handshakes", append(attrs, attribute.String("grpc.xds_server.tls.outcome", "ok"))...); ok {
				t.Errorf("%d successful handshakes counted on chain %q, want none", v, tc.chain)
			}
		})
	}

	t.Run("RBAC sees the verified SPIFFE ID", func(t *testing.T) {
		allowed := newClient(t, addr, "127.0.0.10", 0, pki.creds(pki.client(t, "a.test", "spiffe://a.test/allowed")))
		if code := allowed.emptyCall(ctx); code != codes.OK {
			t.Errorf("spiffe://a.test/allowed: %v, want OK", code)
		}
		other := newClient(t, addr, "127.0.0.10", 0, pki.creds(pki.client(t, "b.test", "spiffe://b.test/allowed")))
		if code := other.emptyCall(ctx); code != codes.PermissionDenied {
			t.Errorf("spiffe://b.test/allowed: %v, want PERMISSION_DENIED", code)
		}
	})

	if code := first.emptyCall(ctx); code != codes.OK || first.dials.Load() != 1 {
		t.Errorf("the connection opened first: EmptyCall %v after %d dial(s), want OK on the same connection", code, first.dials.Load())
	}
}

// TestIdentitySPIFFEMapFile: the bundle map file through its life. An
// invalid map at start fails the mTLS handshakes (and never falls back to
// the CA file, which would accept the client); a valid one is picked up
// within refresh_interval; a rotation that drops a trust domain refuses
// its clients from then on; a half-written file keeps the previous map.
func TestIdentitySPIFFEMapFile(t *testing.T) {
	ctx := testContext(t)
	const refresh = 50 * time.Millisecond
	pki := newSPIFFEPKI(t)
	testcerts.WriteFile(t, pki.mapFile, []byte(`{"trust_domains": {"a.test": {"keys": [{"use": "x509-svid", "kty": "EC", "x5c": [`))
	env := newProvidersEnv(t, pki.providers(refresh))
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return identityListener(t, a, tlsChain{name: "spiffe", tls: mtlsWith(instSPIFFE, true)})
	})
	aClient := pki.client(t, "a.test", "spiffe://a.test/client")
	bClient := pki.client(t, "b.test", "spiffe://b.test/client")
	call := func(leaf *testcerts.Leaf) codes.Code {
		return newClient(t, addr, "127.0.0.1", 0, pki.creds(leaf)).emptyCall(ctx)
	}

	// The map does not parse: the client is refused, although the CA file
	// trusts its CA.
	if code := call(aClient); code == codes.OK {
		t.Fatal("a.test client accepted with an invalid bundle map, want it refused (no fallback to ca_certificate_file)")
	}
	warningsOf("[listener "+addr.String()+"]").waitCount(ctx, t, 1, `filter chain "spiffe"`, "spiffe_trust_bundle_map_file")

	pki.writeMap(t, "a.test", "b.test")
	waitForCode(ctx, t, "a.test client after a valid map is written", codes.OK, func(context.Context) codes.Code { return call(aClient) })

	pki.writeMap(t, "b.test")
	waitForCode(ctx, t, "a.test client after a.test left the map", codes.Unavailable, func(context.Context) codes.Code { return call(aClient) })
	if code := call(bClient); code != codes.OK {
		t.Errorf("b.test client: %v, want OK", code)
	}

	full := testcerts.SPIFFEBundleMap(t, map[string][]*testcerts.CA{"a.test": {pki.domains["a.test"]}})
	// The provider warns, naming the file, when a re-read fails and it
	// keeps the previous map: then it has read the half-written one.
	mapWarnings := warningsOf(pki.mapFile)
	before := mapWarnings.count("re-reading the trust files failed")
	testcerts.WriteFile(t, pki.mapFile, full[:len(full)/2])
	mapWarnings.waitCount(ctx, t, before+1, "re-reading the trust files failed")
	if code := call(bClient); code != codes.OK {
		t.Errorf("b.test client after a half-written map: %v, want OK (the previous map kept)", code)
	}
	if code := call(aClient); code == codes.OK {
		t.Error("a.test client accepted after a half-written map that names a.test, want the previous map kept")
	}
}
