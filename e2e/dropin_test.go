package e2e_test

// Programs that work on grpc-go's xDS server and must work here when only
// the import of google.golang.org/grpc/xds changes: grpc-go's own xDS
// credentials, audit loggers registered with grpc-go, and, beyond grpc-go,
// a loud report when the control plane asks for TLS that the server's
// credentials cannot give.

import (
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/authz/audit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcxdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// grpcGoXDSCreds returns grpc-go's own xDS server credentials with an
// insecure fallback, as a grpc-go xDS server program makes them.
func grpcGoXDSCreds(t *testing.T) credentials.TransportCredentials {
	t.Helper()
	c, err := grpcxdscreds.NewServerCredentials(grpcxdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatalf("grpc-go credentials/xds NewServerCredentials: %v", err)
	}
	return c
}

// TestDropIn_GRPCGoXDSCredentials: a program that keeps grpc-go's
// credentials/xds gets the control plane's security, exactly as with
// xds.NewServerCredentials: mTLS where a chain asks for it (plaintext and
// certificate-less clients refused), the fallback where a chain has no
// transport_socket. grpc-go's credentials alone would hand every connection
// of this server to their plaintext fallback.
func TestDropIn_GRPCGoXDSCredentials(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	peers := newPeerRecorder()
	s := env.newServer(t, grpc.Creds(grpcGoXDSCreds(t)), peers.option())
	lis, _ := listen(t, "127.0.0.1")
	plainFrom2 := chainSpec{name: "plain", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}}
	l := withTransportSocket(t, testListener(lis.Addr(), []chainSpec{{name: "mtls"}, plainFrom2}, nil), "mtls", downstreamTLS(true, true))
	// The mTLS chain matches every source but 127.0.0.2 (the more specific
	// source prefix wins, gRFC A36).
	env.update(ctx, t, []*listenerpb.Listener{l}, nil)
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	addr := lis.Addr()

	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://test.example/client"}})
	c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	if code := c.emptyCall(ctx); code != codes.OK {
		t.Fatalf("mTLS EmptyCall: %v, want OK", code)
	}
	info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 || info.State.PeerCertificates[0].SerialNumber.Cmp(client.Cert.SerialNumber) != 0 {
		t.Fatalf("server-side AuthInfo = %+v, want TLS with the client's certificate", info)
	}
	if got, want := c.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
		t.Errorf("server certificate serial = %s, want %s (the bootstrap provider's)", got, want)
	}
	peers.next(ctx, t) // serverCertSerial's RPC
	// The security downgrade this test exists for: a plaintext client on
	// the mTLS chain must not get through.
	dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))

	// The chain without transport_socket uses grpc-go's credentials'
	// fallback: plaintext.
	p := newClient(t, addr, "127.0.0.2", 0)
	if code := p.emptyCall(ctx); code != codes.OK {
		t.Fatalf("plaintext EmptyCall on the chain without transport_socket: %v, want OK", code)
	}
	if a := peers.next(ctx, t).AuthInfo; a == nil || a.AuthType() != "insecure" {
		t.Errorf("server-side AuthInfo on the plaintext chain = %v, want the insecure fallback's", a)
	}
	// grpc-go's credentials are not reported as a TLS downgrade.
	if n := logs.Count("W", l.GetName(), "NOT applied"); n != 0 {
		t.Errorf("%d warning(s) that TLS is not applied, want none with grpc-go's xDS credentials", n)
	}
}

// TestDropIn_NonXDSCredentialsReported: a server whose credentials are not
// xDS credentials serves a chain that asks for TLS with its own credentials
// (gRFC A29: plaintext here), as grpc-go does, but never silently: a
// warning per Listener version naming the chains, a metric per connection,
// and the status page.
func TestDropIn_NonXDSCredentialsReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
		desc string // how the warning describes the credentials
	}{
		{name: "no creds", desc: "no grpc.Creds option"},
		{name: "insecure creds", opts: []grpc.ServerOption{grpc.Creds(insecure.NewCredentials())}, desc: `security protocol "insecure"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			pki := newTestPKI(t)
			env := newTLSTestEnv(t, pki, time.Hour)
			mr := testutils.NewMetricReader(t)
			s := env.newServer(t, append(tc.opts, xds.MeterProvider(mr.Provider))...)
			hs := httptest.NewServer(admin.NewStatusHandler(s.GRPCServer))
			t.Cleanup(hs.Close)
			lis, _ := listen(t, "127.0.0.1")
			addr := lis.Addr()
			v1 := withTransportSocket(t, testListener(addr, []chainSpec{{name: "mtls-A"}}, nil), "mtls-A", downstreamTLS(true, true))
			env.update(ctx, t, []*listenerpb.Listener{v1}, nil)
			s.serveOn(lis)
			s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)

			// Served as A29 says: with the server's credentials, plaintext.
			c := newClient(t, addr, "127.0.0.1", 0)
			if code := c.emptyCall(ctx); code != codes.OK {
				t.Fatalf("plaintext EmptyCall: %v, want OK (gRFC A29: the server's own credentials)", code)
			}
			name := v1.GetName()
			logs.WaitCount(ctx, t, 1, "W", name, "NOT applied", tc.desc, `"mtls-A"`, "xds.NewServerCredentials")
			lisAttr := attribute.String("grpc.xds_server.listener", addr.String())
			mr.WaitForValue(ctx, t, "grpc.xds_server.connections.tls_not_applied", 1, lisAttr)
			text := waitForText(ctx, t, hs.URL+"/", "TLS not applied.")
			for _, want := range []string{tc.desc, "NOT APPLIED: mTLS asked for"} {
				if !strings.Contains(text, want) {
					t.Errorf("status page lacks %q:\n%s", want, text)
				}
			}

			// A new version of the Listener is warned about again.
			v2 := withTransportSocket(t, testListener(addr, []chainSpec{{name: "mtls-B"}}, nil), "mtls-B", downstreamTLS(false, false))
			env.update(ctx, t, []*listenerpb.Listener{v2}, nil)
			logs.WaitCount(ctx, t, 1, "W", name, "NOT applied", `"mtls-B"`)
			c.waitForChain(ctx, t, "mtls-B", "mtls-A", "mtls-B")
			mr.WaitForValue(ctx, t, "grpc.xds_server.connections.tls_not_applied", 2, lisAttr)
			if n := logs.Count("W", name, "NOT applied", `"mtls-A"`); n != 1 {
				t.Errorf("%d warnings for the first Listener version, want 1 (once per version, not per connection)", n)
			}

			// A Listener without TLS: nothing to report.
			v3 := testListener(addr, []chainSpec{{name: "plain"}}, nil)
			env.update(ctx, t, []*listenerpb.Listener{v3}, nil)
			c.waitForChain(ctx, t, "plain", "mtls-B", "plain")
			if text := waitForText(ctx, t, hs.URL+"/", `Filter chain "plain"`); strings.Contains(text, "TLS not applied") {
				t.Errorf("status page reports TLS not applied for a Listener without TLS:\n%s", text)
			}
		})
	}
}

// TestDropIn_GRPCGoAuditLogger: a logger registered with grpc-go's
// authz/audit registry (and nowhere else: the tests' recording logger, see
// rbac_helpers_test.go) is found by an RBAC config that names it as grpc-go's
// own configs do, with a "grpc.authz.audit_logging/" type URL, and receives
// its decisions (gRFC A59), unchanged.
func TestDropIn_GRPCGoAuditLogger(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	sinkName := testutils.RunName(t)
	sink := auditSink(sinkName)
	val, err := structpb.NewStruct(map[string]any{"sink": sinkName})
	if err != nil {
		t.Fatal(err)
	}
	cfg := allowMethods(methodEmpty)
	cfg.Rules.AuditLoggingOptions = &rbacconfigpb.RBAC_AuditLoggingOptions{
		AuditCondition: rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW,
		LoggerConfigs: []*rbacconfigpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{{
			AuditLogger: &corepb.TypedExtensionConfig{Name: "grpc-go logger", TypedConfig: anyOf(t, &xdstypepb.TypedStruct{
				TypeUrl: "grpc.authz.audit_logging/" + recordingLoggerName, Value: val,
			})},
		}},
	}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, cfg, allRoutes("r"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED", got)
	}
	expectAuditEvents(ctx, t, sink, "by the logger registered with grpc-go",
		audit.Event{FullMethodName: methodEmpty, PolicyName: rbacFilterName, MatchedRule: "allow-methods", Authorized: true},
		audit.Event{FullMethodName: methodUnary, PolicyName: rbacFilterName, Authorized: false},
	)
}

// TestDropIn_UnregisteredAuditLoggerNACKNamesTheFix: an audit logger type
// nobody registered NACKs the Listener with an error that says where to
// register it.
func TestDropIn_UnregisteredAuditLoggerNACKNamesTheFix(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	cfg := allowMethods(methodEmpty)
	cfg.Rules.AuditLoggingOptions = &rbacconfigpb.RBAC_AuditLoggingOptions{
		AuditCondition: rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY,
		LoggerConfigs: []*rbacconfigpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{{
			AuditLogger: &corepb.TypedExtensionConfig{Name: "nobody's", TypedConfig: anyOf(t, &xdstypepb.TypedStruct{
				TypeUrl: "grpc.authz.audit_logging/dropin_test.Unregistered", Value: &structpb.Struct{},
			})},
		}},
	}
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{rbacListener(t, lis.Addr(), cfg, allRoutes("r"), "")}, nil)
	req, err := env.ms.WaitForRequest(ctx, e2e.IsNACK(listenerTypeURL))
	if err != nil {
		t.Fatalf("no NACK: %v", err)
	}
	if msg := req.GetErrorDetail().GetMessage(); !strings.Contains(msg, `"dropin_test.Unregistered"`) || !strings.Contains(msg, "google.golang.org/grpc/authz/audit.RegisterLoggerBuilder") {
		t.Errorf("NACK %q does not name the type and where to register it", msg)
	}
}
