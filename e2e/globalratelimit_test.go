package e2e_test

// End-to-end tests of the global rate limit filter (issue 35): a real
// management server, a real xDS server, real grpc-go clients, and a small
// scriptable Rate Limit Service (envoy.service.ratelimit.v3) on loopback.
// envoyproxy/ratelimit over Redis is tested in interop/ratelimit.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rlconfpb "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	insecurecredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	metadatapb "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	xds "github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// rlsServer is a scriptable Rate Limit Service: answer decides each call
// (nil: OK), and every request is recorded.
type rlsServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	addr string

	mu     sync.Mutex
	answer func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
	reqs   []*rlspb.RateLimitRequest

	conns connCounter // connections accepted
}

func (r *rlsServer) connections() int { return r.conns.count() }

func startRLS(t testing.TB, opts ...grpc.ServerOption) *rlsServer {
	t.Helper()
	r := &rlsServer{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	s := grpc.NewServer(append(opts, grpc.StatsHandler(&r.conns))...)
	rlspb.RegisterRateLimitServiceServer(s, r)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return r
}

func (r *rlsServer) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	answer := r.answer
	r.mu.Unlock()
	if answer == nil {
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	}
	return answer(ctx, req)
}

func (r *rlsServer) set(f func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)) {
	r.mu.Lock()
	r.answer = f
	r.mu.Unlock()
}

// taken returns the requests recorded since the last call.
func (r *rlsServer) taken() []*rlspb.RateLimitRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

func overLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, nil
}

// descriptorsOf renders a request's descriptors as "k=v,k=v;k=v".
func descriptorsOf(req *rlspb.RateLimitRequest) string {
	var ds []string
	for _, d := range req.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		ds = append(ds, strings.Join(es, ","))
	}
	return strings.Join(ds, ";")
}

// globalRL is a RateLimit config of domain "test" calling target, with a
// 5 s timeout (so that tests on a loaded machine do not time out).
func globalRL(target string, rls ...*routepb.RateLimit) *rlpb.RateLimit {
	return &rlpb.RateLimit{
		Domain:  "test",
		Timeout: durationpb.New(5 * time.Second),
		RateLimitService: &rlconfpb.RateLimitServiceConfig{
			TransportApiVersion: corepb.ApiVersion_V3,
			GrpcService:         &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target}}},
		},
		RateLimits: rls,
	}
}

func rlOf(actions ...*routepb.RateLimit_Action) *routepb.RateLimit {
	return &routepb.RateLimit{Actions: actions}
}

func rlHeader(name, key string) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RequestHeaders_{RequestHeaders: &routepb.RateLimit_Action_RequestHeaders{HeaderName: name, DescriptorKey: key}}}
}

func rlGeneric(value string) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_GenericKey_{GenericKey: &routepb.RateLimit_Action_GenericKey{DescriptorValue: value}}}
}

var rlRemote = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RemoteAddress_{RemoteAddress: &routepb.RateLimit_Action_RemoteAddress{}}}

// startGlobalRL serves a Listener whose chain runs the filter "rl" with cfg
// (then more filters) over rc, with the handler's calls recorded.
func startGlobalRL(ctx context.Context, t *testing.T, env *testEnv, cfg *rlpb.RateLimit, rc *routepb.RouteConfiguration, more ...*hcmpb.HttpFilter) (*testClient, *handlerRecorder, net.Addr, *testServer) {
	t.Helper()
	rec := &handlerRecorder{}
	filters := append([]*hcmpb.HttpFilter{httpFilter(t, "rl", cfg)}, more...)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, filters, rc, "")
	}, nil, rec.options()...)
	return connected(ctx, t, addr), rec, addr, s
}

// TestGlobalRateLimit_Descriptors: the service is asked once per RPC, with
// the filter's domain and the descriptors of the virtual host's rate_limits
// as Envoy builds them for a gRPC request (a request header, the peer's
// address, a generic key, the route's metadata); a descriptor whose header
// is absent is left out, and the others are still sent; its OK answer lets
// the RPC reach the handler with the request headers it added, and the
// client gets the x-ratelimit headers; a route with no rate_limits makes no
// call at all.
func TestGlobalRateLimit_Descriptors(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	cfg := globalRL(r.addr)
	cfg.EnableXRatelimitHeaders = rlpb.RateLimit_DRAFT_VERSION_03
	rc := allRoutes("routes")
	vh := rc.VirtualHosts[0]
	metaAction := &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_Metadata{Metadata: &routepb.RateLimit_Action_MetaData{
		DescriptorKey: "plan", Source: routepb.RateLimit_Action_MetaData_ROUTE_ENTRY,
		MetadataKey: &metadatapb.MetadataKey{Key: "acme", Path: []*metadatapb.MetadataKey_PathSegment{{Segment: &metadatapb.MetadataKey_PathSegment_Key{Key: "plan"}}}},
	}}}
	vh.RateLimits = []*routepb.RateLimit{rlOf(rlHeader("x-tenant", "tenant")), rlOf(rlRemote), rlOf(rlGeneric("all"), metaAction)}
	limited := vh.Routes[0]
	limited.Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/EmptyCall"}}
	limited.Metadata = &corepb.Metadata{FilterMetadata: map[string]*structpb.Struct{"acme": {Fields: map[string]*structpb.Value{"plan": structpb.NewStringValue("gold")}}}}
	// UnaryCall: a route that disables the rate limits (vh_rate_limits IGNORE).
	vh.Routes = append(vh.Routes, &routepb.Route{
		Match:                &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
		Action:               &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
		TypedPerFilterConfig: map[string]*anypb.Any{"rl": anyOf(t, &rlpb.RateLimitPerRoute{VhRateLimits: rlpb.RateLimitPerRoute_IGNORE})},
	})
	r.set(func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		return &rlspb.RateLimitResponse{
			OverallCode:         rlspb.RateLimitResponse_OK,
			RequestHeadersToAdd: []*corepb.HeaderValue{{Key: "x-quota", Value: "checked"}, {Key: "grpc-bad", Value: "no"}},
			Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
				Code: rlspb.RateLimitResponse_OK, LimitRemaining: 7, DurationUntilReset: durationpb.New(30 * time.Second),
				CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE},
			}},
		}, nil
	})
	c, rec, _, _ := startGlobalRL(ctx, t, env, cfg, rc)

	var hdr metadata.MD
	if err := rpcResult(withCase(ctx, "tenant", "x-tenant", "acme"), c, "EmptyCall", grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v, want OK", err)
	}
	reqs := r.taken()
	if len(reqs) != 1 {
		t.Fatalf("%d calls for one RPC, want 1", len(reqs))
	}
	if got, want := descriptorsOf(reqs[0]), "tenant=acme;remote_address=127.0.0.1;generic_key=all,plan=gold"; got != want || reqs[0].GetDomain() != "test" {
		t.Errorf("domain %q, descriptors %q; want test, %q", reqs[0].GetDomain(), got, want)
	}
	calls := rec.ofCase("tenant")
	if len(calls) != 1 || strings.Join(calls[0].md.Get("x-quota"), ",") != "checked" || len(calls[0].md.Get("grpc-bad")) != 0 {
		t.Errorf("handler calls %d (%v), want 1 with x-quota: checked (request_headers_to_add) and no grpc-bad", len(calls), calls)
	}
	for k, want := range map[string]string{"x-ratelimit-limit": "10, 10;w=60", "x-ratelimit-remaining": "7", "x-ratelimit-reset": "30"} {
		if got := strings.Join(hdr.Get(k), ","); got != want {
			t.Errorf("response header %s = %q, want %q", k, got, want)
		}
	}

	// Without x-tenant: that descriptor is skipped, the others are sent.
	if err := rpcResult(withCase(ctx, "no-tenant"), c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	if reqs := r.taken(); len(reqs) != 1 || descriptorsOf(reqs[0]) != "remote_address=127.0.0.1;generic_key=all,plan=gold" {
		t.Errorf("without the header: %d calls %v; want one without the tenant descriptor", len(reqs), reqs)
	}

	// The route whose override ignores the virtual host's rate limits.
	if err := rpcResult(ctx, c, "UnaryCall"); err != nil {
		t.Fatal(err)
	}
	if reqs := r.taken(); len(reqs) != 0 {
		t.Errorf("a route without rate limits made %d calls, want none", len(reqs))
	}
}

// TestGlobalRateLimit_Precedence: the rate limits of an RPC are its
// route's RateLimitPerRoute.rate_limits (the route's override, else the
// virtual host's), else the filter's own, else the virtual host's of the
// filter's stage (Envoy's precedence); RateLimitPerRoute.domain replaces the
// domain; vh_rate_limits INCLUDE adds the virtual host's to the route's.
func TestGlobalRateLimit_Precedence(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	route := func(path string, pr *rlpb.RateLimitPerRoute) *routepb.Route {
		rt := &routepb.Route{
			Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/" + path}},
			Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
		}
		if pr != nil {
			rt.TypedPerFilterConfig = map[string]*anypb.Any{"rl": anyOf(t, pr)}
		}
		return rt
	}
	stage1 := rlOf(rlGeneric("vh-stage1"))
	stage1.Stage = wrapperspb.UInt32(1)
	for _, tc := range []struct {
		name       string
		filterRLs  []*routepb.RateLimit
		vhOverride *rlpb.RateLimitPerRoute
		want       map[string]string // method → "domain:descriptors" ("" for no call)
	}{
		{
			name: "virtual host's", want: map[string]string{
				"EmptyCall":      "route-domain:generic_key=route",
				"UnaryCall":      "test:generic_key=vh",
				"FullDuplexCall": "test:generic_key=route;generic_key=vh",
			},
		},
		{
			name: "filter's over virtual host's", filterRLs: []*routepb.RateLimit{rlOf(rlGeneric("filter"))}, want: map[string]string{
				"EmptyCall": "route-domain:generic_key=route",
				"UnaryCall": "test:generic_key=filter",
			},
		},
		{
			name: "virtual host override over filter's", filterRLs: []*routepb.RateLimit{rlOf(rlGeneric("filter"))},
			vhOverride: &rlpb.RateLimitPerRoute{RateLimits: []*routepb.RateLimit{rlOf(rlGeneric("vh-override"))}},
			want: map[string]string{
				"EmptyCall": "route-domain:generic_key=route",
				"UnaryCall": "test:generic_key=vh-override",
			},
		},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			rc := allRoutes("routes-" + strings.ReplaceAll(tc.name, " ", "-"))
			vh := rc.VirtualHosts[0]
			vh.RateLimits = []*routepb.RateLimit{rlOf(rlGeneric("vh")), stage1}
			if tc.vhOverride != nil {
				vh.TypedPerFilterConfig = map[string]*anypb.Any{"rl": anyOf(t, tc.vhOverride)}
			}
			vh.Routes = []*routepb.Route{
				route("EmptyCall", &rlpb.RateLimitPerRoute{Domain: "route-domain", RateLimits: []*routepb.RateLimit{rlOf(rlGeneric("route"))}}),
				route("FullDuplexCall", &rlpb.RateLimitPerRoute{VhRateLimits: rlpb.RateLimitPerRoute_INCLUDE, RateLimits: []*routepb.RateLimit{rlOf(rlGeneric("route"))}}),
				vh.Routes[0],
			}
			c, _, _, _ := startGlobalRL(ctx, t, env, globalRL(r.addr, tc.filterRLs...), rc)
			for method, want := range tc.want {
				if err := rpcResult(ctx, c, method); err != nil {
					t.Fatalf("%s: %v", method, err)
				}
				reqs := r.taken()
				if len(reqs) != 1 {
					t.Errorf("%s: %d calls, want 1", method, len(reqs))
					continue
				}
				if got := reqs[0].GetDomain() + ":" + descriptorsOf(reqs[0]); got != want {
					t.Errorf("%s: asked %q, want %q", method, got, want)
				}
			}
		})
	}
}

// TestGlobalRateLimit_OverLimit: an OVER_LIMIT answer fails the RPC before
// its handler with rate_limited_status mapped to gRPC (default 429 →
// UNAVAILABLE; RESOURCE_EXHAUSTED with rate_limited_as_resource_exhausted)
// and x-envoy-ratelimited: true in its trailers (unless
// disable_x_envoy_ratelimited_header), retry-after when enabled; with
// filter_enforced 0% the RPC goes through.
func TestGlobalRateLimit_OverLimit(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	r.set(func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			{Code: rlspb.RateLimitResponse_OVER_LIMIT, DurationUntilReset: durationpb.New(1500 * time.Millisecond)},
		}}, nil
	})
	for _, tc := range []struct {
		name      string
		mutate    func(*rlpb.RateLimit)
		want      codes.Code
		ratelimit string // x-envoy-ratelimited
		retry     string
	}{
		{name: "default", want: codes.Unavailable, ratelimit: "true"},
		{name: "403", mutate: func(c *rlpb.RateLimit) { c.RateLimitedStatus = &typepb.HttpStatus{Code: typepb.StatusCode_Forbidden} }, want: codes.PermissionDenied, ratelimit: "true"},
		{name: "below 400 is 429", mutate: func(c *rlpb.RateLimit) { c.RateLimitedStatus = &typepb.HttpStatus{Code: typepb.StatusCode_OK} }, want: codes.Unavailable, ratelimit: "true"},
		{name: "resource exhausted", mutate: func(c *rlpb.RateLimit) { c.RateLimitedAsResourceExhausted = true }, want: codes.ResourceExhausted, ratelimit: "true"},
		{name: "no header, retry-after", mutate: func(c *rlpb.RateLimit) {
			c.DisableXEnvoyRatelimitedHeader, c.EnableRetryAfterHeader = true, true
		}, want: codes.Unavailable, retry: "2"},
		{name: "not enforced", mutate: func(c *rlpb.RateLimit) { c.FilterEnforced = runtimePercent(0) }, want: codes.OK},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			cfg := globalRL(r.addr, rlOf(rlGeneric("x")))
			if tc.mutate != nil {
				tc.mutate(cfg)
			}
			c, rec, _, _ := startGlobalRL(ctx, t, env, cfg, allRoutes("routes"))
			var tr metadata.MD
			code, msg := statusOf(rpcResult(withCase(ctx, "over"), c, "EmptyCall", grpc.Trailer(&tr)))
			if code != tc.want {
				t.Errorf("%v %q, want %v", code, msg, tc.want)
			}
			if got := strings.Join(tr.Get("x-envoy-ratelimited"), ","); got != tc.ratelimit {
				t.Errorf("trailer x-envoy-ratelimited = %q, want %q", got, tc.ratelimit)
			}
			if got := strings.Join(tr.Get("retry-after"), ","); got != tc.retry {
				t.Errorf("trailer retry-after = %q, want %q", got, tc.retry)
			}
			handled := len(rec.ofCase("over"))
			if (tc.want == codes.OK) != (handled == 1) {
				t.Errorf("handler ran %d times, want %d", handled, map[bool]int{true: 1}[tc.want == codes.OK])
			}
			if n := len(r.taken()); n != 1 {
				t.Errorf("%d calls, want 1", n)
			}
		})
	}
}

// TestGlobalRateLimit_Failures: a service that fails, hangs past the
// filter's timeout, or is not there lets RPCs through by default
// (failure_mode_deny false), and fails them with status_on_error (default
// 500 → UNKNOWN) with failure_mode_deny; the filter's timeout bounds the
// latency it adds, and without one the RPC's own deadline bounds the call.
func TestGlobalRateLimit_Failures(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	hang := func(ctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	broken := func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		return nil, fmt.Errorf("redis is gone")
	}
	for _, mode := range []struct {
		name    string
		deny    bool
		onError typepb.StatusCode
		want    codes.Code
	}{
		{name: "allow", want: codes.OK},
		{name: "deny", deny: true, want: codes.Unknown},
		{name: "deny 503", deny: true, onError: typepb.StatusCode_ServiceUnavailable, want: codes.Unavailable},
	} {
		t.Run(strings.ReplaceAll(mode.name, " ", "_"), func(t *testing.T) {
			for _, target := range []string{r.addr, closedAddr} {
				env := authzEnv(t, false, r.addr, closedAddr)
				cfg := globalRL(target, rlOf(rlGeneric("x")))
				cfg.Timeout = durationpb.New(100 * time.Millisecond)
				cfg.FailureModeDeny = mode.deny
				if mode.onError != 0 {
					cfg.StatusOnError = &typepb.HttpStatus{Code: mode.onError}
				}
				c, rec, _, _ := startGlobalRL(ctx, t, env, cfg, allRoutes("routes"))
				cases := map[string]func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error){"error": broken, "timeout": hang}
				if target == closedAddr {
					cases = map[string]func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error){"unreachable": nil}
				}
				for name, f := range cases {
					r.set(f)
					start := time.Now()
					code, msg := statusOf(rpcResult(withCase(ctx, name), c, "EmptyCall"))
					if took := time.Since(start); took > 3*time.Second {
						t.Errorf("%s: the RPC took %v with a 100 ms filter timeout", name, took)
					}
					if code != mode.want {
						t.Errorf("%s: %v %q, want %v", name, code, msg, mode.want)
					}
					if code != codes.OK && !strings.Contains(msg, "ratelimit") {
						t.Errorf("%s: message %q does not name ratelimit", name, msg)
					}
					if got, want := len(rec.ofCase(name)), map[bool]int{false: 1}[mode.deny]; got != want {
						t.Errorf("%s: handler ran %d times, want %d", name, got, want)
					}
				}
			}
		})
	}

	// No filter timeout: the RPC's deadline bounds the call.
	env := authzEnv(t, false, r.addr)
	cfg := globalRL(r.addr, rlOf(rlGeneric("x")))
	cfg.Timeout = durationpb.New(0)
	r.set(hang)
	c, rec, _, _ := startGlobalRL(ctx, t, env, cfg, allRoutes("routes"))
	rctx, cancel := context.WithTimeout(withCase(ctx, "deadline"), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	code, _ := statusOf(rpcResult(rctx, c, "EmptyCall"))
	if code != codes.DeadlineExceeded || time.Since(start) > 3*time.Second || len(rec.ofCase("deadline")) != 0 {
		t.Errorf("hanging service, no filter timeout, 300 ms RPC deadline: %v after %v; want DEADLINE_EXCEEDED soon, no handler", code, time.Since(start))
	}
}

// TestGlobalRateLimit_FilterOrder: the filter runs in http_filters order
// with the others: an RBAC filter before it that denies an RPC means no
// call; an ext_authz filter after it never sees an RPC it refused.
func TestGlobalRateLimit_FilterOrder(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, r.addr, a.addr)
	rbacFirst := httpFilter(t, rbacFilterName, allowMethods(methodEmpty))
	rec := &handlerRecorder{}
	filters := []*hcmpb.HttpFilter{rbacFirst, httpFilter(t, "rl", globalRL(r.addr, rlOf(rlGeneric("x")))), httpFilter(t, "authz", extAuthz(a.addr))}
	_, addr := startServing(ctx, t, env, func(l net.Addr) *listenerpb.Listener {
		return filtersListener(l, filters, allRoutes("routes"), "")
	}, nil, rec.options()...)
	c := connected(ctx, t, addr)

	if code, _ := statusOf(rpcResult(ctx, c, "UnaryCall")); code != codes.PermissionDenied {
		t.Errorf("UnaryCall: %v, want PERMISSION_DENIED from RBAC", code)
	}
	if n := len(r.taken()); n != 0 {
		t.Errorf("an RPC RBAC denied made %d rate limit calls, want 0", n)
	}
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	if nr, na := len(r.taken()), len(a.taken()); nr != 1 || na != 1 {
		t.Errorf("allowed RPC: %d rate limit calls, %d checks; want 1 and 1", nr, na)
	}
	r.set(overLimit)
	if code, _ := statusOf(rpcResult(ctx, c, "EmptyCall")); code != codes.Unavailable {
		t.Errorf("over limit: %v, want UNAVAILABLE", code)
	}
	if nr, na := len(r.taken()), len(a.taken()); nr != 1 || na != 0 {
		t.Errorf("RPC over the limit: %d rate limit calls, %d checks; want 1 and 0 (ext_authz after the filter never sees it)", nr, na)
	}
}

// TestGlobalRateLimit_Trust: gRFC A102's trust model, as for ext_authz: a
// service the bootstrap does not allow, from a server that is not trusted,
// is NACKed naming it, and the last good config keeps serving. The side
// channel is one per target: shared by the connections of a chain, kept
// across an update that replaces the chain (the service sees one
// connection), and closed with the server.
func TestGlobalRateLimit_Trust(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	other := startRLS(t)
	env := authzEnv(t, false, r.addr)
	c, _, addr, s := startGlobalRL(ctx, t, env, globalRL(r.addr, rlOf(rlGeneric("x"))), allRoutes("routes"))
	for range 2 {
		if err := rpcResult(ctx, connected(ctx, t, addr), "EmptyCall"); err != nil {
			t.Fatal(err)
		}
	}
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "rl", globalRL(other.addr, rlOf(rlGeneric("x"))))}, allRoutes("routes"), "")}, nil)
	nack, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL)))
	if err != nil {
		t.Fatalf("no NACK for a service outside allowed_grpc_services: %v", err)
	}
	if d := nack.GetErrorDetail().GetMessage(); !strings.Contains(d, "allowed_grpc_services") || !strings.Contains(d, other.addr) || !strings.Contains(d, "rate_limit_service.grpc_service") {
		t.Errorf("NACK %q does not name the field, the target and allowed_grpc_services", d)
	}
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil || len(r.taken()) != 3 || len(other.taken()) != 0 {
		t.Errorf("after the NACK: %v; want OK, asked of the allowed service", err)
	}

	// A change of the filter's config (a new chain), same service.
	changed := globalRL(r.addr, rlOf(rlGeneric("y")))
	changed.FailureModeDeny = true
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "rl", changed)}, allRoutes("routes"), "")}, nil)
	waitFor(ctx, t, "update applied", func() bool {
		if rpcResult(ctx, newClient(t, addr, "127.0.0.1", 0), "EmptyCall") != nil {
			return false
		}
		reqs := r.taken()
		return len(reqs) == 1 && descriptorsOf(reqs[0]) == "generic_key=y"
	})
	if n := r.connections(); n != 1 {
		t.Errorf("the rate limit service saw %d connections, want 1 (one channel per target, kept across the update)", n)
	}
	if n := grpcservice.OpenChannels(); n != 1 {
		t.Errorf("%d side channels open, want 1", n)
	}
	s.Stop()
	waitFor(ctx, t, "side channel closed", func() bool { return grpcservice.OpenChannels() == 0 })
}

// TestGlobalRateLimit_Counts: the status page describes the filter
// (service, domain, failure mode), and it and the metric count ok,
// over_limit, error and failure_mode_allowed as Envoy's ratelimit.* stats
// do (an allowed error counts as both).
func TestGlobalRateLimit_Counts(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	mr := testutils.NewMetricReader(t)
	env := authzEnv(t, false, r.addr)
	cfg := globalRL(r.addr, rlOf(rlGeneric("x")))
	cfg.Timeout = durationpb.New(100 * time.Millisecond)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, "rl", cfg)}, allRoutes("routes"), "")
	}, nil, xds.MeterProvider(mr.Provider))
	c := connected(ctx, t, addr)
	hs := httptest.NewServer(admin.NewStatusHandler(s.GRPCServer))
	t.Cleanup(hs.Close)
	_ = rpcResult(ctx, c, "EmptyCall")
	r.set(overLimit)
	_ = rpcResult(ctx, c, "EmptyCall")
	r.set(func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		return nil, fmt.Errorf("down")
	})
	_ = rpcResult(ctx, c, "EmptyCall")
	text := waitForText(ctx, t, hs.URL, "1 ok, 1 over limit, 1 error, 1 failure mode allowed")
	for _, want := range []string{fmt.Sprintf("rate limit service %q, domain %q", r.addr, "test"), "failure allows", "Global rate limit (ratelimit)"} {
		if !strings.Contains(text, want) {
			t.Errorf("status page lacks %q:\n%s", want, text)
		}
	}
	lis := attribute.String("grpc.xds_server.listener", addr.String())
	filter := attribute.String("grpc.xds_server.ratelimit.filter", "rl")
	for _, outcome := range []string{"ok", "over_limit", "error", "failure_mode_allowed"} {
		mr.WaitForValue(ctx, t, "grpc.xds_server.ratelimit.rpcs", 1, lis, filter, attribute.String("grpc.xds_server.ratelimit.outcome", outcome))
	}
}

// allowAllRLS is a Rate Limit Service that answers OK, recording nothing:
// the benchmark's.
type allowAllRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (allowAllRLS) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

// BenchmarkServerUnaryRateLimit: server CPU per unary RPC (one connection,
// 8 concurrent callers, the load in a child process) of plain gRPC, the
// xDS server without filters, with a global rate limit filter asking an
// in-process Rate Limit Service that answers OK (its CPU is counted, as it
// runs in the same process), and with the filter on a route without rate
// limits. Side by side, in turns, as BenchmarkServerUnaryExtAuthz. Target:
// the route without rate limits costs what the server without the filter
// does.
//
//	go test -run '^$' -bench 'BenchmarkServerUnaryRateLimit' -benchtime 2s -count 3 ./e2e
func BenchmarkServerUnaryRateLimit(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, allowAllRLS{})
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	cfg := globalRL(lis.Addr().String())
	cfg.GetRateLimitService().GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{anyOf(b, &insecurecredspb.InsecureCredentials{})}
	filters := []*hcmpb.HttpFilter{httpFilter(b, "rl", cfg)}
	limited := allRoutes("bench")
	limited.VirtualHosts[0].RateLimits = []*routepb.RateLimit{rlOf(rlGeneric("bench")), rlOf(rlRemote)}
	sideBySide(b, "unary", []benchVariant{
		{name: "plain", start: startPlainServer},
		{name: "xds", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, []*hcmpb.HttpFilter{}) }},
		{name: "ratelimit", start: func(b *testing.B) benchServer {
			return startBenchServer(b, thisLibrary, func(a net.Addr) *listenerpb.Listener {
				return filtersListener(a, filters, limited, "")
			})
		}},
		{name: "ratelimit-no-limits", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, filters) }},
	})
}

// TestGlobalRateLimit_TrustedServer: a trusted management server may name
// a service the bootstrap does not list, with the resource's own
// credentials (channel_credentials_plugin); one without a supported type is
// NACKed naming the field.
func TestGlobalRateLimit_TrustedServer(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, true)
	cfg := globalRL(r.addr, rlOf(rlGeneric("x")))
	gg := cfg.GetRateLimitService().GetGrpcService().GetGoogleGrpc()
	gg.ChannelCredentialsPlugin = []*anypb.Any{{TypeUrl: "type.googleapis.com/some.unknown.Credentials"}, anyOf(t, &insecurecredspb.InsecureCredentials{})}
	c, _, addr, s := startGlobalRL(ctx, t, env, cfg, allRoutes("routes"))
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil || len(r.taken()) != 1 {
		t.Fatalf("trusted server's own service and credentials: %v; want OK after a call to it", err)
	}
	hs := httptest.NewServer(admin.NewStatusHandler(s.GRPCServer))
	t.Cleanup(hs.Close)
	waitForText(ctx, t, hs.URL, "credentials: the trusted management server's (channel_credentials_plugin)")

	bad := globalRL(r.addr, rlOf(rlGeneric("x")))
	bad.GetRateLimitService().GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{{TypeUrl: "type.googleapis.com/some.unknown.Credentials"}}
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "rl", bad)}, allRoutes("routes"), "")}, nil)
	nack, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL)))
	if err != nil || !strings.Contains(nack.GetErrorDetail().GetMessage(), "rate_limit_service.grpc_service") || !strings.Contains(nack.GetErrorDetail().GetMessage(), "channel_credentials_plugin") {
		t.Errorf("no supported channel credentials: NACK %v, %v; want one naming rate_limit_service.grpc_service and channel_credentials_plugin", nack.GetErrorDetail(), err)
	}
}

// TestGlobalRateLimit_VirtualHostUnsupported: a virtual host's rate_limits
// with an action Envoy accepts and the server cannot evaluate (a descriptor
// extension) do not NACK the routes (Envoy would not), but fail the RPCs
// of the routes whose filter would use them with UNAVAILABLE naming the
// field, rather than limit fewer RPCs than asked; a route that ignores them
// serves.
func TestGlobalRateLimit_VirtualHostUnsupported(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	rc := allRoutes("routes")
	vh := rc.VirtualHosts[0]
	vh.RateLimits = []*routepb.RateLimit{rlOf(&routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_Extension{Extension: &corepb.TypedExtensionConfig{Name: "envoy.rate_limit_descriptors.expr"}}})}
	vh.Routes[0].Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/EmptyCall"}}
	vh.Routes = append(vh.Routes, &routepb.Route{
		Match:                &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
		Action:               &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
		TypedPerFilterConfig: map[string]*anypb.Any{"rl": anyOf(t, &rlpb.RateLimitPerRoute{VhRateLimits: rlpb.RateLimitPerRoute_IGNORE})},
	})
	c, rec, _, _ := startGlobalRL(ctx, t, env, globalRL(r.addr), rc)
	code, msg := statusOf(rpcResult(withCase(ctx, "ext"), c, "EmptyCall"))
	if code != codes.Unavailable || !strings.Contains(msg, "rate_limits[0].actions[0].extension") || len(rec.ofCase("ext")) != 0 {
		t.Errorf("route using the virtual host's rate_limits: %v %q; want UNAVAILABLE naming the extension, no handler", code, msg)
	}
	if err := rpcResult(ctx, c, "UnaryCall"); err != nil {
		t.Errorf("route ignoring them: %v, want OK", err)
	}
	if n := len(r.taken()); n != 0 {
		t.Errorf("%d calls, want none", n)
	}
}

// TestGlobalRateLimit_SourceCluster: source_cluster is Envoy's local
// service cluster, the bootstrap's node.cluster.
func TestGlobalRateLimit_SourceCluster(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	var b map[string]any
	if err := json.Unmarshal(env.bootstrap, &b); err != nil {
		t.Fatal(err)
	}
	b["node"].(map[string]any)["cluster"] = "checkout"
	var err error
	if env.bootstrap, err = json.Marshal(b); err != nil {
		t.Fatal(err)
	}
	source := &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_SourceCluster_{SourceCluster: &routepb.RateLimit_Action_SourceCluster{}}}
	c, _, _, _ := startGlobalRL(ctx, t, env, globalRL(r.addr, rlOf(source)), allRoutes("routes"))
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	if reqs := r.taken(); len(reqs) != 1 || descriptorsOf(reqs[0]) != "source_cluster=checkout" {
		t.Errorf("calls %v, want one with source_cluster=checkout", reqs)
	}
}
