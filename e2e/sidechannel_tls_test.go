package e2e_test

// End-to-end tests of the credentials of the ext_authz side channel: an
// allowed_grpc_services entry with "tls" channel credentials (gRFC A65,
// A102) checks the authorization server's name as grpc-go's TLS credentials
// do, and credentials slow to build stall nothing but the first checks of
// their own channel.

import (
	"fmt"
	"strings"
	"testing"

	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// startTLSAuthzServer is startAuthzServer behind TLS with leaf, on
// 127.0.0.1.
func startTLSAuthzServer(t *testing.T, leaf *testcerts.Leaf) *authzServer {
	t.Helper()
	return startAuthzServer(t, grpc.Creds(credentials.NewServerTLSFromCert(&leaf.TLS)))
}

// tlsAuthzEnv is authzEnv with target allowed with "tls" channel
// credentials trusting caFile.
func tlsAuthzEnv(t *testing.T, target, caFile string) *testEnv {
	t.Helper()
	return authzEnvWith(t, false, fmt.Sprintf(`{"type": "tls", "config": {"ca_certificate_file": %q}}`, caFile), target)
}

// TestExtAuthz_SideChannelTLSChecksIPSAN: an authorization server addressed
// by IP (127.0.0.1:port) whose certificate the trusted CA signed for
// another IP, or for a DNS name only, gets no Check: the check fails and
// the RPC fails with status_on_error's code. With a certificate for
// 127.0.0.1, the check runs and the RPC is allowed.
func TestExtAuthz_SideChannelTLSChecksIPSAN(t *testing.T) {
	ca := testcerts.NewCA(t, "authz-ca")
	caFile := testcerts.WriteFiles(t, t.TempDir(), nil, ca.PEM).CA
	for _, tc := range testcerts.IPNameChecks("authz") {
		t.Run(strings.ReplaceAll(tc.Name, " ", "_"), func(t *testing.T) {
			ctx := testContext(t)
			a := startTLSAuthzServer(t, ca.Issue(t, tc.Leaf))
			env := tlsAuthzEnv(t, a.addr, caFile)
			cfg := extAuthz(a.addr)
			cfg.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode_ServiceUnavailable}
			c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
			code, msg := statusOf(rpcResult(withCase(ctx, "tls"), c, "EmptyCall"))
			checks := len(a.taken())
			if tc.Accept {
				if code != codes.OK || checks != 1 || len(rec.ofCase("tls")) != 1 {
					t.Fatalf("RPC: %v %q, %d checks; want OK after one Check", code, msg, checks)
				}
				return
			}
			if code != codes.Unavailable || !strings.Contains(msg, "ext_authz") || !strings.Contains(msg, "127.0.0.1") {
				t.Errorf("RPC: %v %q; want UNAVAILABLE (status_on_error) naming ext_authz and the address checked", code, msg)
			}
			if checks != 0 || len(rec.ofCase("tls")) != 0 {
				t.Errorf("%d checks reached the authorization server and %d RPCs the handler; want none", checks, len(rec.ofCase("tls")))
			}
		})
	}
}

// gatedCreds are registered channel credentials whose Build blocks while a
// test holds them.
var gatedCreds = testutils.RegisterGatedCreds("e2e-test-gated")

// TestExtAuthz_SlowSideChannelCreds: while the credentials of a listener's
// side channel are being built (slowly: a registered type, or
// google_default asking a metadata server), the xDS client and the
// server's other listeners carry on: another listener of the same server,
// configured after it, serves. The listener with the slow side channel
// serves too, and its checks go through once the credentials are built.
func TestExtAuthz_SlowSideChannelCreds(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnvWith(t, false, fmt.Sprintf(`{"type": %q}`, gatedCreds.Name()), a.addr)
	s := env.newServer(t)
	authzLis, _ := listen(t, "127.0.0.1")
	plainLis, _ := listen(t, "127.0.0.1")
	s.serveOn(authzLis)
	s.serveOn(plainLis)
	entered, releaseBuild := gatedCreds.Hold(t) // after newServer: parsing the bootstrap builds the credentials once

	authzL := authzListener(t, extAuthz(a.addr), allRoutes("routes"))(authzLis.Addr())
	env.update(ctx, t, []*listenerpb.Listener{authzL}, nil)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the side channel's credentials were never built")
	}
	env.update(ctx, t, []*listenerpb.Listener{authzL, simpleListener(plainLis.Addr())}, nil)
	s.modes.wait(ctx, t, plainLis.Addr(), connectivity.ServingModeServing)
	if code := connected(ctx, t, plainLis.Addr()).emptyCall(ctx); code != codes.OK {
		t.Fatalf("RPC on the other listener: %v, want OK", code)
	}
	s.modes.wait(ctx, t, authzLis.Addr(), connectivity.ServingModeServing)

	releaseBuild()
	c := connected(ctx, t, authzLis.Addr())
	if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall")); code != codes.OK {
		t.Fatalf("RPC checked over the side channel once its credentials are built: %v %q, want OK", code, msg)
	}
	if n := len(a.taken()); n != 1 {
		t.Errorf("%d checks, want 1", n)
	}
}
