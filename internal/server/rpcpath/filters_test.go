package rpcpath_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitconfpb "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	globalrlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// rateLimit is a local rate limit config of maxTokens tokens refilled one
// an hour (so none during a test), enabled and enforced for every RPC.
func rateLimit(prefix string, maxTokens uint32, perConn bool) *localratelimitpb.LocalRateLimit {
	all := &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: 100}}
	return &localratelimitpb.LocalRateLimit{
		StatPrefix:                            prefix,
		TokenBucket:                           &typepb.TokenBucket{MaxTokens: maxTokens, FillInterval: durationpb.New(time.Hour)},
		FilterEnabled:                         all,
		FilterEnforced:                        all,
		LocalRateLimitPerDownstreamConnection: perConn,
	}
}

// hcmWith returns the HttpConnectionManager of a chain that runs a filter
// named name with cfg, then the router, as parsed from a fresh Listener
// (its own Parser: nothing shared with other calls but the process-wide
// filter state).
func hcmWith(t testing.TB, name string, cfg proto.Message) (*filterchain.HTTPConnectionManager, *httpfilter.Parser) {
	t.Helper()
	p := httpfilter.NewParser(builtin.Registry)
	filters, err := p.HTTPFilters([]*hcmpb.HttpFilter{
		{Name: name, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, cfg)}},
		{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerpb.Router{})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &filterchain.HTTPConnectionManager{Filters: filters}, p
}

// routesOf compiles rc with p and builds its Routes with hcm's filters,
// for the listener obs. (Each test has listeners of its own: the state of
// the process, without obs, would carry spent buckets from one run of a
// test to the next with -count.)
func routesOf(t testing.TB, rc *routepb.RouteConfiguration, hcm *filterchain.HTTPConnectionManager, p *httpfilter.Parser, obs *rpcpath.ListenerShared) *rpcpath.Routes {
	t.Helper()
	r, err := routing.Compile(rc, p)
	if err != nil {
		t.Fatal(err)
	}
	return rpcpath.NewRoutes(r, hcm, obs)
}

// filterTap returns the connection tap of a chain with hcm's filters over
// the default routes, for a listener of its own.
func filterTap(t testing.TB, hcm *filterchain.HTTPConnectionManager, p *httpfilter.Parser) tap.ServerInHandle {
	t.Helper()
	return rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, rpcpath.NewSource(routesOf(t, e2e.DefaultRouteConfig("rc"), hcm, p, &rpcpath.ListenerShared{}))))
}

func codesOf(h tap.ServerInHandle, n int, method string) []codes.Code {
	var out []codes.Code
	for range n {
		_, err := h(peerContext(), tapInfo("svc", method))
		out = append(out, status.Code(err))
	}
	return out
}

func countOK(cs []codes.Code) int {
	n := 0
	for _, c := range cs {
		if c == codes.OK {
			n++
		}
	}
	return n
}

// TestTapRateLimit: the tap refuses the RPCs that find the bucket empty.
func TestTapRateLimit(t *testing.T) {
	hcm, p := hcmWith(t, t.Name(), rateLimit("p", 3, false))
	src := rpcpath.NewSource(routesOf(t, e2e.DefaultRouteConfig("rc"), hcm, p, &rpcpath.ListenerShared{}))
	h := rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, src))
	got := codesOf(h, 5, "/pkg.S/M")
	if n := countOK(got); n != 3 || got[3] != codes.Unavailable || got[4] != codes.Unavailable {
		t.Errorf("5 RPCs on a 3-token bucket: %v, want 3 OK then UNAVAILABLE", got)
	}
}

// TestRoutesKeepState: routes built again from a new decode of the same
// config (an RDS or Listener update) keep a spent bucket spent; a changed
// bucket starts full; a per-route bucket is another bucket.
func TestRoutesKeepState(t *testing.T) {
	name := t.Name()
	listener := &rpcpath.ListenerShared{}
	build := func(cfg *localratelimitpb.LocalRateLimit, rc *routepb.RouteConfiguration) tap.ServerInHandle {
		hcm, p := hcmWith(t, name, cfg)
		return rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, rpcpath.NewSource(routesOf(t, rc, hcm, p, listener))))
	}
	first := build(rateLimit("p", 2, false), e2e.DefaultRouteConfig("rc"))
	if got := codesOf(first, 3, "/pkg.S/M"); countOK(got) != 2 {
		t.Fatalf("3 RPCs on a 2-token bucket: %v, want 2 OK", got)
	}
	// The same config with another route added: still spent.
	rc := e2e.DefaultRouteConfig("rc")
	rc.VirtualHosts[0].Routes = append([]*routepb.Route{{
		Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/other."}},
		Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
	}}, rc.VirtualHosts[0].Routes...)
	again := build(rateLimit("p", 2, false), rc)
	if got := codesOf(again, 1, "/pkg.S/M"); got[0] != codes.Unavailable {
		t.Errorf("after the update, the spent bucket gave %v, want UNAVAILABLE", got)
	}
	// A changed bucket starts full.
	changed := build(rateLimit("p", 4, false), rc)
	if got := codesOf(changed, 5, "/pkg.S/M"); countOK(got) != 4 {
		t.Errorf("changed bucket: %v, want 4 OK", got)
	}
	// A per-route config is a bucket of its own.
	rc.VirtualHosts[0].Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{name: mustAny(t, rateLimit("p", 1, false))}
	perRoute := build(rateLimit("p", 4, false), rc)
	if got := codesOf(perRoute, 2, "/other.S/M"); countOK(got) != 1 {
		t.Errorf("per-route bucket of 1: %v, want 1 OK", got)
	}
	if got := codesOf(perRoute, 1, "/pkg.S/M"); got[0] != codes.Unavailable {
		t.Errorf("the listener-level bucket after the per-route RPCs: %v, want still spent (UNAVAILABLE)", got)
	}
	// The routes replaced by each update were in use until here, as those
	// of a chain in service are while an update builds new ones.
	runtime.KeepAlive(first)
	runtime.KeepAlive(changed)
}

// TestTapPerConnection: with per-connection buckets, each connection's tap
// handle has its own.
func TestTapPerConnection(t *testing.T) {
	hcm, p := hcmWith(t, t.Name(), rateLimit("p", 1, true))
	chain := rpcpath.NewChain("fc", hcm, rpcpath.NewSource(routesOf(t, e2e.DefaultRouteConfig("rc"), hcm, p, &rpcpath.ListenerShared{})))
	c1, c2 := rpcpath.ConnTap(chain), rpcpath.ConnTap(chain)
	if got := codesOf(c1, 2, "/pkg.S/M"); got[0] != codes.OK || got[1] != codes.Unavailable {
		t.Errorf("connection 1: %v, want OK then UNAVAILABLE", got)
	}
	if got := codesOf(c2, 1, "/pkg.S/M"); got[0] != codes.OK {
		t.Errorf("connection 2: %v, want OK (its own bucket)", got)
	}
}

// TestTapRateLimitAllocs: an RPC the rate limit filter lets through costs
// the tap no allocation, with a shared or a per-connection bucket.
func TestTapRateLimitAllocs(t *testing.T) {
	for _, perConn := range []bool{false, true} {
		hcm, p := hcmWith(t, fmt.Sprintf("%s-%v", t.Name(), perConn), rateLimit("p", 1<<30, perConn))
		if n := allowedAllocs(t, filterTap(t, hcm, p), peerContext()); n != 0 {
			t.Errorf("per connection %v: the tap allocates %v times per allowed RPC, want 0", perConn, n)
		}
	}
}

func BenchmarkTapRateLimit(b *testing.B) {
	for _, perConn := range []bool{false, true} {
		b.Run(fmt.Sprintf("perConnection=%v", perConn), func(b *testing.B) {
			hcm, p := hcmWith(b, fmt.Sprintf("bench-%v", perConn), rateLimit("p", 1<<31, perConn))
			h := filterTap(b, hcm, p)
			ctx := peerContext()
			info := tapInfo("svc", "/pkg.S/M")
			b.ReportAllocs()
			for b.Loop() {
				h(ctx, info)
			}
		})
	}
}

// TestRoutesStatePerListener: each listener (its ListenerShared) keeps its own
// buckets; routes of one listener built again share them.
func TestRoutesStatePerListener(t *testing.T) {
	name := t.Name()
	build := func(obs *rpcpath.ListenerShared) tap.ServerInHandle {
		hcm, p := hcmWith(t, name, rateLimit("p", 1, false))
		r, err := routing.Compile(e2e.DefaultRouteConfig("rc"), p)
		if err != nil {
			t.Fatal(err)
		}
		return rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, rpcpath.NewSource(rpcpath.NewRoutes(r, hcm, obs))))
	}
	l1, l2 := &rpcpath.ListenerShared{}, &rpcpath.ListenerShared{}
	first := build(l1)
	if got := codesOf(first, 2, "/pkg.S/M"); got[0] != codes.OK || got[1] != codes.Unavailable {
		t.Fatalf("listener 1: %v, want OK then UNAVAILABLE", got)
	}
	if got := codesOf(build(l1), 1, "/pkg.S/M"); got[0] != codes.Unavailable {
		t.Errorf("listener 1, routes built again: %v, want UNAVAILABLE (the same bucket)", got)
	}
	if got := codesOf(build(l2), 1, "/pkg.S/M"); got[0] != codes.OK {
		t.Errorf("listener 2: %v, want OK (a bucket of its own)", got)
	}
	runtime.KeepAlive(first)
}

// BenchmarkTapFault: the tap with a fault filter whose aborts and delays
// are asked for by header, on RPCs that ask for none: what every RPC pays.
func BenchmarkTapFault(b *testing.B) {
	cfg := &faultpb.HTTPFault{
		Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HeaderAbort_{HeaderAbort: &faultpb.FaultAbort_HeaderAbort{}}, Percentage: &typepb.FractionalPercent{Numerator: 100}},
		Delay: &faultcommonpb.FaultDelay{FaultDelaySecifier: &faultcommonpb.FaultDelay_HeaderDelay_{HeaderDelay: &faultcommonpb.FaultDelay_HeaderDelay{}}, Percentage: &typepb.FractionalPercent{Numerator: 100}},
	}
	hcm, p := hcmWith(b, "fault", cfg)
	h := filterTap(b, hcm, p)
	ctx := peerContext()
	info := tapInfo("svc", "/pkg.S/M")
	b.ReportAllocs()
	for b.Loop() {
		h(ctx, info)
	}
}

// globalRateLimit is a global rate limit config whose service is never
// reached by these tests, with rls as the filter's own rate_limits.
func globalRateLimit(rls ...*routepb.RateLimit) *globalrlpb.RateLimit {
	return &globalrlpb.RateLimit{
		Domain: "d",
		RateLimitService: &ratelimitconfpb.RateLimitServiceConfig{
			TransportApiVersion: corepb.ApiVersion_V3,
			GrpcService:         &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: "127.0.0.1:9"}}},
		},
		RateLimits: rls,
	}
}

// TestTapGlobalRateLimitAllocs: on a route where no rate limit applies, the
// global rate limit filter has no step: the tap allocates nothing and
// leaves no work (no call). On a route with rate limits, it leaves the
// call for after the tap.
func TestTapGlobalRateLimitAllocs(t *testing.T) {
	hcm, p := hcmWith(t, "rl", globalRateLimit())
	h := filterTap(t, hcm, p)
	if n := allowedAllocs(t, h, peerContext()); n != 0 {
		t.Errorf("route without rate limits: the tap allocates %v times per RPC, want 0", n)
	}
	if ctx, err := h(peerContext(), tapInfo("svc", "/pkg.S/M")); err != nil || rpcpath.Continues(ctx) {
		t.Errorf("route without rate limits: %v, sequence continues after the tap %v; want OK and no", err, rpcpath.Continues(ctx))
	}
	generic := &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_GenericKey_{GenericKey: &routepb.RateLimit_Action_GenericKey{DescriptorValue: "v"}}}
	hcm, p = hcmWith(t, "rl", globalRateLimit(&routepb.RateLimit{Actions: []*routepb.RateLimit_Action{generic}}))
	ctx, err := filterTap(t, hcm, p)(peerContext(), tapInfo("svc", "/pkg.S/M"))
	if err != nil || !rpcpath.Continues(ctx) {
		t.Errorf("route with rate limits: %v, sequence continues after the tap %v; want OK and the call left for after the tap", err, rpcpath.Continues(ctx))
	}
}
