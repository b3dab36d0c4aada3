package e2e_test

// End-to-end tests of the rules no filter configuration gets around (issue
// 39): a client cannot turn a side call's failure into an allow; each filter
// sees the request headers as the filters before it left them; a refused
// RPC reaches no user code, interceptors included; the route's action is
// checked before any filter acts; a filter's broken code fails its RPCs
// closed, never open and never the process.

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	xds "github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// padded returns ctx with the case header and a header x-pad of n bytes.
func padded(ctx context.Context, name string, n int) context.Context {
	return withCase(ctx, name, "x-pad", strings.Repeat("p", n))
}

// smallService is the receive limit of the side services of the
// oversized-request tests: 64 KiB per message, as a deployment may set. The
// same holds for gRPC's default 4 MiB and headers of 5 MiB (gRPC's server
// takes up to 16 MiB of them), but headers that large take seconds to
// encode under the race detector.
const smallService = 64 << 10

// TestRule_OversizedHeadersAreRefused: a request whose headers are too large
// for the side call is refused, never let through by a failure mode. The
// side services here answer OVER_LIMIT and deny every call, and take at
// most smallService per message; the filters' failure modes are the
// permissive ones. Without a bound on the request headers, a 100 KiB
// header would make the call fail and the RPC go through. Chains with a
// side-call filter bound request headers at Envoy's default, 60 KiB.
// refusingServices starts an authorization server that denies and a rate
// limit service that answers OVER_LIMIT to every call, each taking at most
// smallService per message, and returns them with their env, an ext_authz
// config with failure_mode_allow, and routes whose rate limit descriptor
// carries the x-pad header.
func refusingServices(t *testing.T) (a *authzServer, r *rlsServer, env *testEnv, authz *extauthzpb.ExtAuthz, rc *routepb.RouteConfiguration) {
	t.Helper()
	a = startAuthzServer(t, grpc.MaxRecvMsgSize(smallService))
	r = startRLS(t, grpc.MaxRecvMsgSize(smallService))
	env = authzEnv(t, false, a.addr, r.addr)
	a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		return deniedResponse(typepb.StatusCode_Forbidden, "never"), nil
	})
	r.set(overLimit)
	authz = extAuthz(a.addr)
	authz.FailureModeAllow = true
	rc = allRoutes("routes")
	rc.VirtualHosts[0].RateLimits = []*routepb.RateLimit{rlOf(rlHeader("x-pad", "pad"))}
	return a, r, env, authz, rc
}

func TestRule_OversizedHeadersAreRefused(t *testing.T) {
	ctx := testContext(t)
	a, r, env, authz, rc := refusingServices(t)
	for _, tc := range []struct {
		name    string
		filters []*hcmpb.HttpFilter
		calls   func() int
	}{
		{name: "global rate limit", filters: []*hcmpb.HttpFilter{httpFilter(t, "rl", globalRL(r.addr))}, calls: func() int { return len(r.taken()) }},
		{name: "ext_authz", filters: []*hcmpb.HttpFilter{httpFilter(t, "authz", authz)}, calls: func() int { return len(a.taken()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &handlerRecorder{}
			_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
				return filtersListener(addr, tc.filters, rc, "")
			}, nil, rec.options()...)
			c := connected(ctx, t, addr)
			tc.calls()
			for _, size := range []int{100 << 10, 61 << 10} {
				code, msg := statusOf(rpcResult(padded(ctx, "big", size), c, "EmptyCall"))
				if code != codes.Internal || !strings.Contains(msg, "max_request_headers_kb") {
					t.Errorf("%d-byte header: %v %q, want INTERNAL (request headers over the chain's bound, as Envoy)", size, code, msg)
				}
			}
			if n := tc.calls(); n != 0 {
				t.Errorf("%d side calls for oversized requests, want none", n)
			}
			if n := len(rec.ofCase("big")); n != 0 {
				t.Errorf("%d oversized RPCs reached the handler, want none", n)
			}
			// Within the bound, the service decides.
			if code, msg := statusOf(rpcResult(padded(ctx, "small", 50<<10), c, "EmptyCall")); code == codes.OK || code == codes.Internal {
				t.Errorf("50 KiB header: %v %q, want the service's refusal", code, msg)
			}
			if n := tc.calls(); n != 1 {
				t.Errorf("%d side calls for a request within the bound, want 1", n)
			}
		})
	}
}

// TestRule_MaxRequestHeadersKB: max_request_headers_kb, when the control
// plane sets it, bounds the request headers of every chain, with or without
// a side-call filter. A chain allowed larger headers than its side service
// takes refuses a request the service refuses as too large
// (RESOURCE_EXHAUSTED), rather than let failure_mode_allow (or
// failure_mode_deny: false) pass it.
func TestRule_MaxRequestHeadersKB(t *testing.T) {
	ctx := testContext(t)
	a, r, env, authz, rc := refusingServices(t)
	withLimit := func(kb uint32, filters []*hcmpb.HttpFilter) func(net.Addr) *listenerpb.Listener {
		return func(addr net.Addr) *listenerpb.Listener {
			l := filtersListener(addr, filters, rc, "")
			hcm := &hcmpb.HttpConnectionManager{}
			if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			hcm.MaxRequestHeadersKb = wrapperspb.UInt32(kb)
			l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
			return l
		}
	}

	t.Run("plain chain, 1 KiB", func(t *testing.T) {
		_, addr := startServing(ctx, t, env, withLimit(1, nil), nil)
		c := connected(ctx, t, addr)
		if code, msg := statusOf(rpcResult(padded(ctx, "big", 2<<10), c, "EmptyCall")); code != codes.Internal {
			t.Errorf("2 KiB header: %v %q, want INTERNAL", code, msg)
		}
		if code, msg := statusOf(rpcResult(padded(ctx, "small", 100), c, "EmptyCall")); code != codes.OK {
			t.Errorf("100-byte header: %v %q, want OK", code, msg)
		}
	})
	t.Run("plain chain, 8 headers", func(t *testing.T) {
		_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
			l := filtersListener(addr, nil, rc, "")
			hcm := &hcmpb.HttpConnectionManager{}
			if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			hcm.CommonHttpProtocolOptions = &corepb.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(8)}
			l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
			return l
		}, nil)
		c := connected(ctx, t, addr)
		// :method, :scheme, :path, :authority, content-type, te, user-agent
		// and x-case are 8; one more is one too many.
		if code, msg := statusOf(rpcResult(withCase(ctx, "nine", "x-more", "1"), c, "EmptyCall")); code != codes.Internal || !strings.Contains(msg, "max_headers_count") {
			t.Errorf("9 headers: %v %q, want INTERNAL (max_headers_count)", code, msg)
		}
		if code, msg := statusOf(rpcResult(withCase(ctx, "eight"), c, "EmptyCall")); code != codes.OK {
			t.Errorf("8 headers: %v %q, want OK", code, msg)
		}
	})
	t.Run("plain chain, not set", func(t *testing.T) {
		_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
			return filtersListener(addr, nil, allRoutes("routes"), "")
		}, nil)
		c := connected(ctx, t, addr)
		// No side call to protect: gRPC's own bound alone, as before.
		if code, msg := statusOf(rpcResult(padded(ctx, "big", 1<<20), c, "EmptyCall")); code != codes.OK {
			t.Errorf("1 MiB header: %v %q, want OK", code, msg)
		}
	})
	for _, tc := range []struct {
		name   string
		filter *hcmpb.HttpFilter
		calls  func() int
	}{
		{name: "ext_authz", filter: httpFilter(t, "authz", authz), calls: func() int { return len(a.taken()) }},
		{name: "global rate limit", filter: httpFilter(t, "rl", globalRL(r.addr)), calls: func() int { return len(r.taken()) }},
	} {
		t.Run(tc.name+" chain, 1 MiB", func(t *testing.T) {
			rec := &handlerRecorder{}
			_, addr := startServing(ctx, t, env, withLimit(1024, []*hcmpb.HttpFilter{tc.filter}), nil, rec.options()...)
			c := connected(ctx, t, addr)
			tc.calls()
			code, msg := statusOf(rpcResult(padded(ctx, "big", 100<<10), c, "EmptyCall"))
			if code == codes.OK || !strings.Contains(msg, "too large") {
				t.Errorf("100 KiB header: %v %q, want a refusal saying the service refused it as too large", code, msg)
			}
			// gRPC refuses the message before the service's handler.
			if n := tc.calls(); n != 0 {
				t.Errorf("%d side calls handled, want none", n)
			}
			if n := len(rec.ofCase("big")); n != 0 {
				t.Errorf("%d oversized RPCs reached the handler, want none", n)
			}
		})
	}
}

// scriptFilter is an http_filters entry of the fuzzer's public filter
// (pfScript, url pfScriptURL or pfLazyURL) named name, with the config
// fields.
func scriptFilter(t *testing.T, url, name string, fields map[string]any) *hcmpb.HttpFilter {
	t.Helper()
	s, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	return httpFilter(t, name, &xdstypepb.TypedStruct{TypeUrl: url, Value: s})
}

// shadowHeaders is a local rate limit with no token that does not enforce,
// and so adds x-rate-limited: true to every RPC's request headers.
func shadowHeaders(t *testing.T) *hcmpb.HttpFilter {
	m := rateLimit("shadow", 0)
	m.FilterEnforced = runtimePercent(0)
	m.RequestHeadersToAddWhenNotEnforced = []*corepb.HeaderValueOption{hvo("x-rate-limited", "true")}
	return httpFilter(t, "shadow", m)
}

// denyRateLimited is an RBAC DENY of the RPCs that carry x-rate-limited.
func denyRateLimited(t *testing.T) *hcmpb.HttpFilter {
	return httpFilter(t, "rbac", rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{"limited": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals:  []*rbacconfigpb.Principal{headerPrincipal("x-rate-limited", "true")},
	}}))
}

// TestRule_HeadersAsLeft: each filter sees the request headers as the
// filters before it left them, in the tap and after it, whatever else the
// chain holds: the local rate limit's shadow headers reach an RBAC filter
// after it (with or without a filter that waits, before or after) and a
// global rate limit descriptor; a header one public filter sets reaches the
// next public filter.
func TestRule_HeadersAsLeft(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	delay := httpFilter(t, "delay", &faultpb.HTTPFault{Delay: fixedDelay(time.Millisecond, 100)})
	for _, tc := range []struct {
		name    string
		filters []*hcmpb.HttpFilter
	}{
		{name: "shadow, rbac", filters: []*hcmpb.HttpFilter{shadowHeaders(t), denyRateLimited(t)}},
		{name: "delay, shadow, rbac", filters: []*hcmpb.HttpFilter{delay, shadowHeaders(t), denyRateLimited(t)}},
		{name: "shadow, delay, rbac", filters: []*hcmpb.HttpFilter{shadowHeaders(t), delay, denyRateLimited(t)}},
		{name: "shadow, rbac, delay", filters: []*hcmpb.HttpFilter{shadowHeaders(t), denyRateLimited(t), delay}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &handlerRecorder{}
			_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
				return filtersListener(addr, tc.filters, allRoutes("routes"), "")
			}, nil, rec.options()...)
			c := connected(ctx, t, addr)
			for _, m := range []string{"EmptyCall", "FullDuplexCall"} {
				if code, msg := statusOf(rpcResult(withCase(ctx, m), c, m)); code != codes.PermissionDenied {
					t.Errorf("%s: %v %q, want PERMISSION_DENIED (RBAC sees the shadow header)", m, code, msg)
				}
				if n := len(rec.ofCase(m)); n != 0 {
					t.Errorf("%s: reached the handler %d times, want 0", m, n)
				}
			}
		})
	}

	t.Run("global rate limit descriptor", func(t *testing.T) {
		rc := allRoutes("routes")
		rc.VirtualHosts[0].RateLimits = []*routepb.RateLimit{rlOf(rlHeader("x-rate-limited", "limited"))}
		_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
			return filtersListener(addr, []*hcmpb.HttpFilter{shadowHeaders(t), httpFilter(t, "rl", globalRL(r.addr))}, rc, "")
		}, nil)
		c := connected(ctx, t, addr)
		r.taken()
		if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall")); code != codes.OK {
			t.Fatalf("EmptyCall: %v %q, want OK", code, msg)
		}
		reqs := r.taken()
		if len(reqs) != 1 || descriptorsOf(reqs[0]) != "limited=true" {
			var got []string
			for _, q := range reqs {
				got = append(got, descriptorsOf(q))
			}
			t.Errorf("descriptors sent: %q, want one call with limited=true (the shadow header)", got)
		}
	})

	t.Run("public filters", func(t *testing.T) {
		filters := []*hcmpb.HttpFilter{
			scriptFilter(t, pfScriptURL, "set", map[string]any{"set": "x-tier=gold"}),
			scriptFilter(t, pfScriptURL, "require", map[string]any{"require": "x-tier=gold"}),
		}
		rec := &handlerRecorder{}
		_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
			return filtersListener(addr, filters, allRoutes("routes"), "")
		}, nil, rec.options()...)
		c := connected(ctx, t, addr)
		if code, msg := statusOf(rpcResult(withCase(ctx, "tier", "x-tier", "lead"), c, "EmptyCall")); code != codes.OK {
			t.Errorf("EmptyCall: %v %q, want OK (the second filter sees the header the first set)", code, msg)
		}
		if calls := rec.ofCase("tier"); len(calls) != 1 || strings.Join(calls[0].md.Get("x-tier"), ",") != "gold" {
			t.Errorf("handler calls: %v, want one with x-tier: gold", calls)
		}
	})
}

// interceptorLog records the RPCs a program's single interceptors
// (grpc.UnaryInterceptor, grpc.StreamInterceptor) see, with their x-user.
type interceptorLog struct {
	mu   sync.Mutex
	seen []string // "case x-user"
}

func (l *interceptorLog) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	l.mu.Lock()
	l.seen = append(l.seen, strings.Join(md.Get(caseHeader), ",")+" "+strings.Join(md.Get("x-user"), ","))
	l.mu.Unlock()
}

func (l *interceptorLog) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			l.record(ctx)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			l.record(ss.Context())
			return h(srv, ss)
		}),
	}
}

func (l *interceptorLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.seen
	l.seen = nil
	return out
}

// TestRule_RefusedNeverReachesUserCode: an RPC the filters refuse after the
// tap never reaches a program's grpc.UnaryInterceptor or
// grpc.StreamInterceptor, which gRPC runs before every chained interceptor;
// an RPC they let through reaches them with the request headers as the
// filters left them (the authorization server's x-user: alice, not the
// client's mallory). The program's interceptors still run for every RPC
// let through; a route whose action does not serve RPCs reaches them
// neither, and makes no Check.
func TestRule_RefusedNeverReachesUserCode(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	a.set(func(_ context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		if strings.HasPrefix(headerMapOf(req.GetAttributes().GetRequest().GetHttp())[caseHeader][0], "allow") {
			return okResponse(overwrite("x-user", "alice")), nil
		}
		return deniedResponse(typepb.StatusCode_Forbidden, "no"), nil
	})
	rc := allRoutes("routes")
	rc.VirtualHosts[0].Routes = append([]*routepb.Route{clientRoute(pathMatch(methodUnary))}, rc.VirtualHosts[0].Routes...)
	ilog := &interceptorLog{}
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		return filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "authz", extAuthz(a.addr))}, rc, "")
	}, nil, ilog.options()...)
	c := connected(ctx, t, addr)
	for _, m := range []string{"EmptyCall", "FullDuplexCall"} {
		if code, msg := statusOf(rpcResult(withCase(ctx, "deny-"+m, "x-user", "mallory"), c, m)); code != codes.PermissionDenied {
			t.Errorf("denied %s: %v %q, want PERMISSION_DENIED", m, code, msg)
		}
		if code, msg := statusOf(rpcResult(withCase(ctx, "allow-"+m, "x-user", "mallory"), c, m)); code != codes.OK {
			t.Errorf("allowed %s: %v %q, want OK", m, code, msg)
		}
	}
	a.taken()
	if code, msg := statusOf(rpcResult(withCase(ctx, "allow-route", "x-user", "mallory"), c, "UnaryCall")); code != codes.Unavailable {
		t.Errorf("UnaryCall on a route action: %v %q, want UNAVAILABLE", code, msg)
	}
	if n := len(a.taken()); n != 0 {
		t.Errorf("%d Checks for an RPC on a route that does not serve RPCs, want none", n)
	}
	got := ilog.take()
	want := []string{"allow-EmptyCall alice", "allow-FullDuplexCall alice"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the program's single interceptors saw %q, want %q", got, want)
	}
}

// wrapped is a program's own option type around a gRPC option.
type wrapped struct{ grpc.ServerOption }

// TestRule_UnreadableInterceptors: when the server cannot tell whether its
// options set a single interceptor (here one wrapped deeper than it
// follows), it says so at startup, and chains whose filters may refuse RPCs
// after the tap refuse every RPC rather than let that interceptor run
// first; a chain whose filters all decide in the tap serves.
func TestRule_UnreadableInterceptors(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	ilog := &interceptorLog{}
	var deep grpc.ServerOption = ilog.options()[0]
	for range 64 {
		deep = wrapped{deep}
	}
	before := logs.Count("W", "cannot tell whether the server options set grpc.UnaryInterceptor")
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		l := filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "authz", extAuthz(a.addr))}, allRoutes("authz"), "")
		plain := filtersListener(addr, []*hcmpb.HttpFilter{denyRateLimited(t)}, allRoutes("plain"), "")
		plain.FilterChains[0].Name = "plain"
		plain.FilterChains[0].FilterChainMatch = &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}
		l.FilterChains = append(l.FilterChains, plain.FilterChains[0])
		return l
	}, nil, deep)
	if n := logs.Count("W", "cannot tell whether the server options set grpc.UnaryInterceptor") - before; n != 1 {
		t.Errorf("%d startup warnings, want 1", n)
	}
	c := connected(ctx, t, addr)
	if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall")); code != codes.Unavailable || !strings.Contains(msg, "grpc.UnaryInterceptor") {
		t.Errorf("EmptyCall on the ext_authz chain: %v %q, want UNAVAILABLE saying why", code, msg)
	}
	if n := len(a.taken()); n != 0 {
		t.Errorf("%d Checks, want none", n)
	}
	p := newClient(t, addr, "127.0.0.2", 0)
	if code := p.emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall on the chain without a filter that waits: %v, want OK", code)
	}
	if got := ilog.take(); len(got) != 1 {
		t.Errorf("the program's interceptor saw %q, want the one RPC the plain chain served", got)
	}
}

// TestRule_ActionCheckedFirst: an RPC on a route whose action is not
// non_forwarding_action is refused UNAVAILABLE before any filter acts: no
// Check, no ShouldRateLimit, no token of a local rate limit spent.
func TestRule_ActionCheckedFirst(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	r := startRLS(t)
	env := authzEnv(t, false, a.addr, r.addr)
	rc := allRoutes("routes")
	rc.VirtualHosts[0].RateLimits = []*routepb.RateLimit{rlOf(rlGeneric("all"))}
	rc.VirtualHosts[0].Routes = append([]*routepb.Route{clientRoute(pathMatch(methodUnary))}, rc.VirtualHosts[0].Routes...)
	filters := []*hcmpb.HttpFilter{
		httpFilter(t, "authz", extAuthz(a.addr)),
		httpFilter(t, "rl", globalRL(r.addr)),
		httpFilter(t, "local", rateLimit("one", 1)),
	}
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		return filtersListener(addr, filters, rc, "")
	}, nil)
	c := connected(ctx, t, addr)
	a.taken()
	r.taken()
	for i := range 3 {
		if code, msg := statusOf(rpcResult(ctx, c, "UnaryCall")); code != codes.Unavailable || !strings.Contains(msg, "non_forwarding_action") {
			t.Errorf("UnaryCall %d on a route action: %v %q, want UNAVAILABLE (not non_forwarding_action)", i, code, msg)
		}
	}
	if na, nr := len(a.taken()), len(r.taken()); na != 0 || nr != 0 {
		t.Errorf("side calls for RPCs on a route action: %d Checks, %d ShouldRateLimit; want none", na, nr)
	}
	if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall")); code != codes.OK {
		t.Errorf("EmptyCall: %v %q, want OK (the bucket's token unspent)", code, msg)
	}
}

// TestRule_BrokenFilterFailsClosed: a filter that returns work without
// declaring Needs.After, or panics in its step or its work, fails its RPCs
// with INTERNAL, naming it, logs it and counts it; the RPC never reaches
// the handler, and the server goes on serving.
func TestRule_BrokenFilterFailsClosed(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	waits := func() *hcmpb.HttpFilter { return scriptFilter(t, pfScriptURL, "waits", map[string]any{"work": true}) }
	for _, tc := range []struct {
		name, reason string
		filters      []*hcmpb.HttpFilter
	}{
		{name: "lazy", reason: "undeclared_work", filters: []*hcmpb.HttpFilter{scriptFilter(t, pfLazyURL, "lazy", map[string]any{"work": true})}},
		{name: "lazy-late", reason: "undeclared_work", filters: []*hcmpb.HttpFilter{waits(), scriptFilter(t, pfLazyURL, "lazy-late", map[string]any{"work": true})}},
		{name: "panic-run", reason: "panic", filters: []*hcmpb.HttpFilter{scriptFilter(t, pfScriptURL, "panic-run", map[string]any{"panic": "run"})}},
		{name: "panic-work", reason: "panic", filters: []*hcmpb.HttpFilter{scriptFilter(t, pfScriptURL, "panic-work", map[string]any{"panic": "work"})}},
		{name: "panic-late", reason: "panic", filters: []*hcmpb.HttpFilter{waits(), scriptFilter(t, pfScriptURL, "panic-late", map[string]any{"panic": "run"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr := testutils.NewMetricReader(t)
			rec := &handlerRecorder{}
			_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
				return filtersListener(addr, tc.filters, allRoutes("routes"), "")
			}, nil, append(rec.options(), xds.MeterProvider(mr.Provider))...)
			c := connected(ctx, t, addr)
			for _, m := range []string{"EmptyCall", "FullDuplexCall"} {
				code, msg := statusOf(rpcResult(withCase(ctx, tc.name), c, m))
				if code != codes.Internal || !strings.Contains(msg, `"`+tc.name+`"`) {
					t.Errorf("%s: %v %q, want INTERNAL naming the filter", m, code, msg)
				}
			}
			if n := len(rec.ofCase(tc.name)); n != 0 {
				t.Errorf("reached the handler %d times, want 0", n)
			}
			if n := logs.Count("E", `HTTP filter "`+tc.name+`"`); n == 0 {
				t.Errorf("no error log line naming the filter")
			}
			mr.WaitForValue(ctx, t, "grpc.xds_server.http_filter.errors", 2,
				attribute.String("grpc.xds_server.listener", addr.String()), attribute.String("grpc.xds_server.http_filter", tc.name), attribute.String("grpc.xds_server.reason", tc.reason))
			// The server goes on: a new connection is served, its RPCs
			// failed the same way.
			if code := connected(ctx, t, addr).emptyCall(ctx); code != codes.Internal {
				t.Errorf("EmptyCall on a new connection: %v, want INTERNAL", code)
			}
		})
	}
}
