package e2e_test

// The server's transport credentials, however a program passes them: inside
// option types of its own that embed grpc.ServerOption (found, and served as
// they are everywhere else), or wrapped beyond what the server reads (then
// said so, and the filter chains that ask for TLS refused, never served in
// plaintext).

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// Option types a program may carry gRPC's options in: gRPC applies the
// option they embed.
type (
	wrappedOpt struct{ grpc.ServerOption }
	outerOpt   struct{ *wrappedOpt }
)

// serveTLSAndPlain serves on s, at a new address on 127.0.0.1, a Listener
// of two chains: "tls", whose transport_socket is tls, for every source but
// 127.0.0.2 (the more specific source prefix wins, gRFC A36), and "plain",
// without transport_socket, for 127.0.0.2.
func serveTLSAndPlain(ctx context.Context, t *testing.T, env *testEnv, s *testServer, tls *tlspb.DownstreamTlsContext) (net.Addr, *listenerpb.Listener) {
	t.Helper()
	lis, _ := listen(t, "127.0.0.1")
	addr := lis.Addr()
	plainFrom2 := chainSpec{name: "plain", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}}
	l := withTransportSocket(t, testListener(addr, []chainSpec{{name: "tls"}, plainFrom2}, nil), "tls", tls)
	env.update(ctx, t, []*listenerpb.Listener{l}, nil)
	s.serveOn(lis)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	return addr, l
}

// TestCredsDetect_WrappedGRPCGoXDSCreds: grpc-go's credentials/xds passed
// inside the program's own option types are recognised: a chain that asks
// for TLS gets TLS with the bootstrap provider's certificate (a plaintext
// client is refused by the handshake), a chain without transport_socket
// gets their fallback, and nothing is reported as a downgrade. Before, such
// an option was not seen, and gRPC handed every connection, on the TLS
// chain too, to the credentials' plaintext fallback.
func TestCredsDetect_WrappedGRPCGoXDSCreds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  func(grpc.ServerOption) grpc.ServerOption
	}{
		{name: "embedded", opt: func(o grpc.ServerOption) grpc.ServerOption { return wrappedOpt{o} }},
		{name: "embedded, pointer", opt: func(o grpc.ServerOption) grpc.ServerOption { return &wrappedOpt{o} }},
		{name: "two wrappers", opt: func(o grpc.ServerOption) grpc.ServerOption { return outerOpt{&wrappedOpt{o}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			pki := newTestPKI(t)
			env := newTLSTestEnv(t, pki, time.Hour)
			peers := newPeerRecorder()
			s := env.newServer(t, tc.opt(grpc.Creds(grpcGoXDSCreds(t))), peers.option())
			addr, l := serveTLSAndPlain(ctx, t, env, s, downstreamTLS(false, false))

			c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil))
			if got, want := c.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
				t.Errorf("server certificate serial = %s, want %s (the bootstrap provider's)", got, want)
			}
			if _, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo); !ok {
				t.Error("server-side AuthInfo on the TLS chain is not TLS")
			}
			dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))

			p := newClient(t, addr, "127.0.0.2", 0)
			if code := p.emptyCall(ctx); code != codes.OK {
				t.Fatalf("plaintext EmptyCall on the chain without transport_socket: %v, want OK", code)
			}
			if a := peers.next(ctx, t).AuthInfo; a == nil || a.AuthType() != "insecure" {
				t.Errorf("server-side AuthInfo on the plaintext chain = %v, want the insecure fallback's", a)
			}
			for _, w := range []string{"NOT applied", "REFUSED"} {
				if n := logs.Count("W", l.GetName(), w); n != 0 {
					t.Errorf("%d warning(s) with %q, want none: the wrapped credentials are grpc-go's xDS credentials", n, w)
				}
			}
		})
	}
}

// TestCredsDetect_UnreadableRefusesTLS: credentials the server cannot tell
// (grpc-go's credentials/xds wrapped deeper than it follows, which gRPC
// still applies: with their plaintext fallback on every connection of this
// server) make it say so, at startup and per Listener version, and refuse
// the connections of the chain that asks for TLS, closed without a byte,
// counted, and shown on the status page; the chain without
// transport_socket is served.
func TestCredsDetect_UnreadableRefusesTLS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	mr := testutils.NewMetricReader(t)
	var deep grpc.ServerOption = grpc.Creds(grpcGoXDSCreds(t))
	for range 64 {
		deep = &wrappedOpt{deep}
	}
	before := logs.Count("W", "cannot tell which transport credentials", "wrappedOpt", "REFUSED")
	s := env.newServer(t, deep, xds.MeterProvider(mr.Provider))
	if n := logs.Count("W", "cannot tell which transport credentials", "wrappedOpt", "REFUSED"); n <= before {
		t.Errorf("NewGRPCServer logged no warning that it cannot tell the credentials")
	}
	hs := httptest.NewServer(admin.NewStatusHandler(s.GRPCServer))
	t.Cleanup(hs.Close)
	addr, l := serveTLSAndPlain(ctx, t, env, s, downstreamTLS(true, true))
	logs.WaitCount(ctx, t, 1, "W", l.GetName(), "REFUSED", "cannot tell", `"tls"`)

	// The TLS chain: closed unserved, not served in plaintext.
	expectClosedNoBytes(t, addr, "127.0.0.1")
	mr.WaitForValue(ctx, t, "grpc.xds_server.connections.rejected", 1,
		attribute.String("grpc.xds_server.listener", addr.String()), attribute.String("grpc.xds_server.reason", "unknown_credentials"))
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, client))

	// The chain without transport_socket is served, by the credentials'
	// fallback.
	p := newClient(t, addr, "127.0.0.2", 0)
	if code := p.emptyCall(ctx); code != codes.OK {
		t.Fatalf("plaintext EmptyCall on the chain without transport_socket: %v, want OK", code)
	}

	text := waitForText(ctx, t, hs.URL+"/", "TLS connections refused.")
	for _, want := range []string{"cannot tell which transport credentials", "REFUSED: mTLS asked for"} {
		if !strings.Contains(text, want) {
			t.Errorf("status page lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "TLS not applied") {
		t.Errorf("status page says TLS is not applied (served without it), want refused:\n%s", text)
	}
}
