package e2e_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	xdsmatcherpb "github.com/cncf/xds/go/xds/type/matcher/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/httpfilter/rbacfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"google.golang.org/grpc/authz/audit"
)

const (
	listenerTypeURL = "type.googleapis.com/envoy.config.listener.v3.Listener"
	routeTypeURL    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// TestRBAC_AllowByPath: an ALLOW policy on the method lets EmptyCall
// through and denies UnaryCall with PERMISSION_DENIED, whose message names
// no policy; the connection stays usable.
func TestRBAC_AllowByPath(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, allowMethods(methodEmpty), allRoutes("r"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall: %v, want OK", got)
	}
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || strings.Contains(st.Message(), "allow-methods") {
		t.Errorf("UnaryCall: %v, want PERMISSION_DENIED without the policy name", st)
	}
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall after a denial: %v, want OK", got)
	}
}

// TestRBAC_DenyByHeader: a DENY policy on a metadata value denies exactly
// the RPCs carrying it.
func TestRBAC_DenyByHeader(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	cfg := rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{"deny-mallory": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals:  []*rbacconfigpb.Principal{headerPrincipal("x-user", "mallory")},
	}})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, cfg, allRoutes("r"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	for _, tc := range []struct {
		user string
		want codes.Code
	}{{"alice", codes.OK}, {"mallory", codes.PermissionDenied}, {"", codes.OK}} {
		rctx := ctx
		if tc.user != "" {
			rctx = metadata.AppendToOutgoingContext(ctx, "x-user", tc.user)
		}
		if got := c.emptyCall(rctx); got != tc.want {
			t.Errorf("EmptyCall as %q: %v, want %v", tc.user, got, tc.want)
		}
	}
}

// TestRBAC_PerRouteDisable: an empty RBACPerRoute (no rbac) on a route
// disables RBAC there (Envoy's meaning), while the other routes keep the
// deny-all top-level policy; an override on the virtual host applies to
// its routes unless a route overrides it.
func TestRBAC_PerRouteDisable(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	unary := nonForwarding(pathMatch(methodUnary))
	unary.TypedPerFilterConfig = perRoute(t, &rbacpb.RBACPerRoute{})
	rc := routeConfig("r", []*routepb.Route{unary, nonForwarding(prefixMatch("/"))})
	// A second virtual host whose override allows EmptyCall only.
	rc.VirtualHosts = append(rc.VirtualHosts, &routepb.VirtualHost{
		Name: "vh-override", Domains: []string{"override.test"},
		Routes:               []*routepb.Route{nonForwarding(prefixMatch("/"))},
		TypedPerFilterConfig: perRoute(t, &rbacpb.RBACPerRoute{Rbac: allowMethods(methodEmpty)}),
	})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, allowMethods(), rc, "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.unaryCall(ctx); got != codes.OK {
		t.Errorf("UnaryCall on the RBAC-disabled route: %v, want OK", got)
	}
	if got := c.emptyCall(ctx); got != codes.PermissionDenied {
		t.Errorf("EmptyCall on the deny-all route: %v, want PERMISSION_DENIED", got)
	}
	c2 := newClient(t, addr, "127.0.0.1", 0, grpc.WithAuthority("override.test"))
	if got := c2.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall under the virtual host override: %v, want OK", got)
	}
	if got := c2.unaryCall(ctx); got != codes.PermissionDenied {
		t.Errorf("UnaryCall under the virtual host override: %v, want PERMISSION_DENIED", got)
	}
}

// TestRBAC_RDSUpdateNoReconnect: a policy change through an RDS override
// applies to the existing connection, without a reconnect.
func TestRBAC_RDSUpdateNoReconnect(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	routes := func(allowed string) []*routepb.RouteConfiguration {
		rc := allRoutes("rds-rbac")
		rc.VirtualHosts[0].TypedPerFilterConfig = perRoute(t, &rbacpb.RBACPerRoute{Rbac: allowMethods(allowed)})
		return []*routepb.RouteConfiguration{rc}
	}
	lis := func(a net.Addr) *listenerpb.Listener { return rbacListener(t, a, allowMethods(), nil, "rds-rbac") }
	_, addr := startServing(ctx, t, env, lis, routes(methodEmpty))
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED", got)
	}
	env.update(ctx, t, []*listenerpb.Listener{lis(addr)}, routes(methodUnary))
	waitForCode(ctx, t, "UnaryCall after the RDS update", codes.OK, c.unaryCallNoOpts)
	if got := c.emptyCall(ctx); got != codes.PermissionDenied {
		t.Errorf("EmptyCall after the RDS update: %v, want PERMISSION_DENIED", got)
	}
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1 (an RDS update does not drain)", got)
	}
}

// TestRBAC_LDSUpdateDrains: a policy change in the Listener drains the
// connection (an in-flight stream finishes) and the new connection has the
// new policy.
func TestRBAC_LDSUpdateDrains(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, allowMethods(methodEmpty, methodStream), allRoutes("r"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED", got)
	}
	st := c.startStream(ctx, t)
	env.update(ctx, t, []*listenerpb.Listener{rbacListener(t, addr, allowMethods(methodUnary), allRoutes("r"), "")}, nil)
	waitForCode(ctx, t, "UnaryCall after the LDS update", codes.OK, c.unaryCallNoOpts)
	// The stream started under the old policy finishes on the drained
	// connection.
	st.pingPong(t)
	st.finish(t)
	if got := c.emptyCall(ctx); got != codes.PermissionDenied {
		t.Errorf("EmptyCall after the LDS update: %v, want PERMISSION_DENIED", got)
	}
	if got := c.dials.Load(); got != 2 {
		t.Errorf("client dialed %d times, want 2 (the changed chain drained once)", got)
	}
}

// TestRBAC_InvalidConfigKeepsPolicy: an invalid RBAC config is NACKed —
// in a Listener (matcher instead of rules; a grpc- header) and in an RDS
// override — and the previous policy is still enforced: fail closed.
func TestRBAC_InvalidConfigKeepsPolicy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	routes := func(o *rbacpb.RBACPerRoute) []*routepb.RouteConfiguration {
		rc := allRoutes("rds-bad")
		if o != nil {
			rc.VirtualHosts[0].TypedPerFilterConfig = perRoute(t, o)
		}
		return []*routepb.RouteConfiguration{rc}
	}
	good := allowMethods(methodEmpty)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, good, nil, "rds-bad")
	}, routes(nil))
	c := newClient(t, addr, "127.0.0.1", 0)
	check := func(when string) {
		t.Helper()
		if got := c.emptyCall(ctx); got != codes.OK {
			t.Errorf("%s: EmptyCall %v, want OK", when, got)
		}
		if got := c.unaryCall(ctx); got != codes.PermissionDenied {
			t.Errorf("%s: UnaryCall %v, want PERMISSION_DENIED (the previous policy)", when, got)
		}
	}
	check("before")

	grpcHeader := rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"p": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals:  []*rbacconfigpb.Principal{headerPrincipal("grpc-foo", "x")},
	}})
	for _, bad := range []struct {
		desc string
		cfg  *rbacpb.RBAC
	}{
		{desc: "matcher instead of rules (would fail open elsewhere)", cfg: &rbacpb.RBAC{Matcher: &xdsmatcherpb.Matcher{}}},
		{desc: "grpc- header matcher", cfg: grpcHeader},
	} {
		seen := len(env.ms.Requests())
		env.update(ctx, t, []*listenerpb.Listener{rbacListener(t, addr, bad.cfg, nil, "rds-bad")}, routes(nil))
		if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL))); err != nil {
			t.Fatalf("%s: no NACK of the Listener: %v", bad.desc, err)
		}
		check("after a NACKed Listener with " + bad.desc)
	}

	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{rbacListener(t, addr, good, nil, "rds-bad")},
		routes(&rbacpb.RBACPerRoute{Rbac: &rbacpb.RBAC{Matcher: &xdsmatcherpb.Matcher{}}}))
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(routeTypeURL))); err != nil {
		t.Fatalf("no NACK of the RouteConfiguration: %v", err)
	}
	check("after a NACKed RouteConfiguration")
	s.modes.expectNoneBy(ctx, t, env.ms, addr, listenerTypeURL, routeTypeURL)
}

// TestRBAC_AuditLogger: a user-registered audit logger receives the
// decisions its condition selects (gRFC A59), with the filter name and the
// matched policy, and the shadow_rules' would-be decisions, to the loggers
// of the shadow_rules, without their being enforced.
func TestRBAC_AuditLogger(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	// Sink names unique per run: a logger is built once per filter config.
	sinkName := testutils.RunName(t)
	sink := auditSink(sinkName)
	shadowSink := auditSink(sinkName + "/shadow")
	cfg := allowMethods(methodEmpty)
	cfg.Rules.AuditLoggingOptions = auditTo(t, sinkName, rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW)
	// Shadow rules that would deny everything but EmptyCall's opposite.
	cfg.ShadowRules = &rbacconfigpb.RBAC{
		Action: rbacconfigpb.RBAC_DENY,
		Policies: map[string]*rbacconfigpb.Policy{"shadow-deny-empty": {
			Permissions: []*rbacconfigpb.Permission{pathPermission(methodEmpty)},
			Principals:  []*rbacconfigpb.Principal{anyPrincipal()},
		}},
		AuditLoggingOptions: auditTo(t, sinkName+"/shadow", rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY),
	}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, cfg, allRoutes("r"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK (shadow rules are not enforced)", got)
	}
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED", got)
	}
	want := []audit.Event{
		{FullMethodName: methodEmpty, PolicyName: rbacFilterName, MatchedRule: "allow-methods", Authorized: true},
		{FullMethodName: methodUnary, PolicyName: rbacFilterName, Authorized: false},
	}
	expectAuditEvents(ctx, t, sink, "", want...)
	select {
	case got := <-shadowSink:
		w := audit.Event{FullMethodName: methodEmpty, PolicyName: rbacFilterName, MatchedRule: "shadow-deny-empty"}
		if got != w {
			t.Errorf("shadow audit event: %+v, want %+v", got, w)
		}
	case <-ctx.Done():
		t.Fatal("shadow audit event not received")
	}
	select {
	case got := <-shadowSink:
		t.Errorf("unexpected shadow event %+v (ON_DENY, and UnaryCall is not denied by the shadow rules)", got)
	case <-time.After(defaultTestShortTimeout):
	}
}

// TestRBAC_MalformedPathRefused: an RPC whose :path lacks the leading "/"
// cannot side-step a DENY on the method (grpc-go v1.79.3): it is refused
// with UNIMPLEMENTED before the RBAC filter runs, so the audit log records
// no "allowed" decision for it, and the well-formed call is denied.
func TestRBAC_MalformedPathRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	sinkName := testutils.RunName(t)
	sink := auditSink(sinkName)
	cfg := rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{"deny-empty": {
		Permissions: []*rbacconfigpb.Permission{pathPermission(methodEmpty)},
		Principals:  []*rbacconfigpb.Principal{anyPrincipal()},
	}})
	cfg.Rules.AuditLoggingOptions = auditTo(t, sinkName, rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW)
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, cfg, allRoutes("r"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	for _, m := range []string{strings.TrimPrefix(methodEmpty, "/"), "/nomethod", "/"} {
		err := c.ClientConn.Invoke(ctx, m, &testpb.Empty{}, &testpb.Empty{})
		if got := status.Code(err); got != codes.Unimplemented {
			t.Errorf("Invoke(%q): %v, want UNIMPLEMENTED", m, err)
		}
	}
	if got := c.emptyCall(ctx); got != codes.PermissionDenied {
		t.Errorf("EmptyCall: %v, want PERMISSION_DENIED", got)
	}
	select {
	case got := <-sink:
		if want := (audit.Event{FullMethodName: methodEmpty, PolicyName: rbacFilterName, MatchedRule: "deny-empty"}); got != want {
			t.Errorf("first audit event: %+v, want %+v (malformed paths never reach RBAC)", got, want)
		}
	case <-ctx.Done():
		t.Fatal("no audit event for EmptyCall")
	}
}

// TestRBAC_AuthenticatedPrincipal: over mTLS (the user's own TLS
// credentials), authenticated.principal_name matches the client
// certificate's URI SAN; another identity is denied.
func TestRBAC_AuthenticatedPrincipal(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	pki := newRBACPKI(t)
	serverCert := pki.leaf(t, 2, nil, []string{"server.test"})
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
	})
	cfg := rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"client-a": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals: []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Authenticated_{
			Authenticated: &rbacconfigpb.Principal_Authenticated{PrincipalName: exactString("spiffe://example.org/client-a")},
		}}},
	}})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, cfg, allRoutes("r"), "")
	}, nil, grpc.Creds(creds))
	clientCreds := func(uri string, serial int64) grpc.DialOption {
		return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{pki.leaf(t, serial, []string{uri}, []string{"client.test"})},
			RootCAs:      pki.pool,
			ServerName:   "server.test",
		}))
	}
	a := newClient(t, addr, "127.0.0.1", 0, clientCreds("spiffe://example.org/client-a", 3))
	if got := a.emptyCall(ctx); got != codes.OK {
		t.Errorf("client-a: %v, want OK", got)
	}
	b := newClient(t, addr, "127.0.0.1", 0, clientCreds("spiffe://example.org/client-b", 4))
	if got := b.emptyCall(ctx); got != codes.PermissionDenied {
		t.Errorf("client-b: %v, want PERMISSION_DENIED", got)
	}
}

// TestRBAC_LDSUpdateWithRDSRoutes: a Listener update that changes the RBAC
// filter of a chain taking its routes from RDS applies the new policy with
// the routes already received (no RDS update), and repeated updates keep
// working.
func TestRBAC_LDSUpdateWithRDSRoutes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	routes := []*routepb.RouteConfiguration{allRoutes("rds-lds")}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, allowMethods(methodEmpty), nil, "rds-lds")
	}, routes)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED", got)
	}
	for i, allowed := range []string{methodUnary, methodEmpty, methodUnary} {
		env.update(ctx, t, []*listenerpb.Listener{rbacListener(t, addr, allowMethods(allowed), nil, "rds-lds")}, routes)
		other := methodEmpty
		call, otherCall := c.unaryCallNoOpts, c.emptyCallNoOpts
		if allowed == methodEmpty {
			other = methodUnary
			call, otherCall = c.emptyCallNoOpts, c.unaryCallNoOpts
		}
		waitForCode(ctx, t, fmt.Sprintf("update %d: %s", i, allowed), codes.OK, call)
		if got := otherCall(ctx); got != codes.PermissionDenied {
			t.Errorf("update %d: %s: %v, want PERMISSION_DENIED", i, other, got)
		}
	}
}

// TestRBAC_DecisionMetrics: with a MeterProvider, every RBAC decision is
// counted in grpc.xds_server.rbac.decisions by filter and outcome.
func TestRBAC_DecisionMetrics(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	mr := testutils.NewMetricReader(t)
	cfg := rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{"deny-mallory": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals:  []*rbacconfigpb.Principal{headerPrincipal("x-user", "mallory")},
	}})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, cfg, allRoutes("r"), "")
	}, nil, xds.MeterProvider(mr.Provider))
	c := newClient(t, addr, "127.0.0.1", 0)
	for _, user := range []string{"alice", "mallory", "bob", "mallory", "mallory"} {
		c.emptyCall(metadata.AppendToOutgoingContext(ctx, "x-user", user))
	}
	lis := attribute.String(metrics.AttrListener, addr.String())
	for decision, want := range map[string]int64{rbacfilter.DecisionAllowed: 2, rbacfilter.DecisionDenied: 3} {
		got, _ := mr.Value(t, rbacfilter.DecisionsMetric, lis,
			attribute.String(rbacfilter.AttrFilter, rbacFilterName),
			attribute.String(rbacfilter.AttrDecision, decision))
		if got != want {
			t.Errorf("%s{decision=%s} = %d, want %d", rbacfilter.DecisionsMetric, decision, got, want)
		}
	}
}

// TestRBAC_FilterDisabledPerRoute: a FilterConfig with disabled set (Envoy)
// turns a deny-all RBAC filter off on its route only, with or without a
// config in it.
func TestRBAC_FilterDisabledPerRoute(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	unary := nonForwarding(pathMatch(methodUnary))
	unary.TypedPerFilterConfig = map[string]*anypb.Any{rbacFilterName: anyOf(t, &routepb.FilterConfig{Disabled: true})}
	rc := routeConfig("r", []*routepb.Route{unary, nonForwarding(prefixMatch("/"))})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, allowMethods(), rc, "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.unaryCall(ctx); got != codes.OK {
		t.Errorf("UnaryCall where the filter is disabled: %v, want OK", got)
	}
	if got := c.emptyCall(ctx); got != codes.PermissionDenied {
		t.Errorf("EmptyCall under the deny-all filter: %v, want PERMISSION_DENIED", got)
	}
}

// TestRBAC_FilterDisabledByDefault: an http_filters entry with disabled set
// (Envoy) runs only on routes whose typed_per_filter_config enables it.
func TestRBAC_FilterDisabledByDefault(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	unary := nonForwarding(pathMatch(methodUnary))
	unary.TypedPerFilterConfig = perRoute(t, &rbacpb.RBACPerRoute{Rbac: allowMethods()}) // deny all
	rc := routeConfig("r", []*routepb.Route{unary, nonForwarding(prefixMatch("/"))})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		l := rbacListener(t, a, allowMethods(), rc, "")
		withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) { h.HttpFilters[0].Disabled = true })(t, l)
		return l
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall on a route that does not enable the filter: %v, want OK", got)
	}
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Errorf("UnaryCall on the route enabling the deny-all filter: %v, want PERMISSION_DENIED", got)
	}
}
