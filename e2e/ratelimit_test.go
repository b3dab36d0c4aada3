package e2e_test

// End-to-end tests of the local rate limit filter
// (envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit): a real
// management server, a real xDS server and real grpc-go clients. Buckets
// refill one token an hour, so no token comes back during a test and every
// count is exact, even on a loaded machine.

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// connected returns a client of addr whose connection is up, so that what
// follows measures RPCs only.
func connected(ctx context.Context, t *testing.T, addr net.Addr) *testClient {
	t.Helper()
	c := newClient(t, addr, "127.0.0.1", 0)
	c.Connect()
	for st := c.GetState(); st != connectivity.Ready; st = c.GetState() {
		if st == connectivity.Idle {
			// A connection the server drained meanwhile (a configuration
			// change applied just after it was accepted): reconnect, as
			// the client's next RPC would.
			c.Connect()
		}
		if !c.WaitForStateChange(ctx, st) {
			t.Fatalf("client of %v not connected: %v", addr, st)
		}
	}
	return c
}

// TestRateLimitBurst: a burst of 20 concurrent RPCs over a 5-token bucket
// gets exactly 5 OK and 15 UNAVAILABLE (local_rate_limited), on one
// connection or another (the bucket is the filter's), without losing the
// connection; the metric counts every refusal.
func TestRateLimitBurst(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	mr := testutils.NewMetricReader(t)
	env := newTestEnv(t)
	name := "ratelimit"
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, rateLimit("burst", 5))}, allRoutes("routes"), "")
	}, nil, xds.MeterProvider(mr.Provider))
	c := connected(ctx, t, addr)

	got, msgs := burst(ctx, c, 20)
	if n := tally(got); n[codes.OK] != 5 || n[codes.Unavailable] != 15 {
		t.Errorf("20 RPCs on a 5-token bucket: %v, want 5 OK and 15 UNAVAILABLE", n)
	}
	if !onlyMessages(got, msgs, "local_rate_limited") {
		t.Errorf("refusal messages %q, want local_rate_limited", msgs)
	}
	if got := connected(ctx, t, addr).emptyCall(ctx); got != codes.Unavailable {
		t.Errorf("RPC on another connection: %v, want UNAVAILABLE (one bucket for the filter)", got)
	}
	if n := c.dials.Load(); n != 1 {
		t.Errorf("client dialed %d times, want 1 (refusals keep the connection)", n)
	}
	lis := attribute.String("grpc.xds_server.listener", addr.String())
	filter := attribute.String("grpc.xds_server.local_rate_limit.filter", name)
	mr.WaitForValue(ctx, t, "grpc.xds_server.local_rate_limit.limited", 16, lis, filter, attribute.String("grpc.xds_server.local_rate_limit.mode", "enforced"))
}

// TestRateLimitCodes: the status of a refused RPC, unary or streaming, per
// config (each a per-route config on its own route): UNAVAILABLE (HTTP 429
// by gRPC's mapping) by default, RESOURCE_EXHAUSTED when asked, the mapping
// of a configured HTTP status, and trailing metadata from
// response_headers_to_add plus retry-after. The filter's own config sets
// neither filter_enabled nor filter_enforced, so (as in Envoy) it limits
// nothing, although its bucket has no token. No refused RPC reaches the
// user's interceptors.
func TestRateLimitCodes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	name := "ratelimit"
	cases := []struct {
		name     string
		tokens   uint32 // RPCs let through before the refusals
		mutate   func(m *localratelimitpb.LocalRateLimit)
		want     codes.Code
		trailers metadata.MD
	}{
		{name: "default", mutate: func(*localratelimitpb.LocalRateLimit) {}, want: codes.Unavailable},
		{name: "exhausted", mutate: func(m *localratelimitpb.LocalRateLimit) { m.RateLimitedAsResourceExhausted = true }, want: codes.ResourceExhausted},
		{name: "status401", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.Status = &typepb.HttpStatus{Code: typepb.StatusCode_Unauthorized}
		}, want: codes.Unauthenticated},
		{name: "status200", mutate: func(m *localratelimitpb.LocalRateLimit) { m.Status = &typepb.HttpStatus{Code: typepb.StatusCode_OK} }, want: codes.Unavailable},
		// One token, refilled in an hour: once it is taken, the next
		// comes in 3600 s (rounded up).
		{name: "trailers", tokens: 1, mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{{Header: &corepb.HeaderValue{Key: "x-limited-by", Value: "proxyless"}}}
			m.EnableRetryAfterHeader = true
		}, want: codes.Unavailable, trailers: metadata.MD{"x-limited-by": {"proxyless"}, "retry-after": {"3600"}}},
	}
	var routes []*routepb.Route
	for _, tc := range cases {
		m := rateLimit("route", tc.tokens)
		tc.mutate(m)
		routes = append(routes, caseRoute(tc.name, map[string]*anypb.Any{name: anyOf(t, m)}))
	}
	rec := &handlerRecorder{}
	top := &localratelimitpb.LocalRateLimit{
		StatPrefix:  "top",
		TokenBucket: &typepb.TokenBucket{MaxTokens: 0, FillInterval: durationpb.New(3600e9)},
	}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, top)}, caseRoutes("routes", routes...), "")
	}, nil, rec.options()...)
	c := connected(ctx, t, addr)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.tokens {
				if got := c.emptyCall(withCase(ctx, tc.name)); got != codes.OK {
					t.Fatalf("EmptyCall with a token left: %v, want OK", got)
				}
			}
			var trailer metadata.MD
			_, err := c.EmptyCall(withCase(ctx, tc.name), &testpb.Empty{}, grpc.Trailer(&trailer))
			if code, msg := statusOf(err); code != tc.want || msg != "local_rate_limited" {
				t.Errorf("EmptyCall: %v %q, want %v local_rate_limited", code, msg, tc.want)
			}
			for k, want := range tc.trailers {
				if got := trailer.Get(k); len(got) != 1 || got[0] != want[0] {
					t.Errorf("trailer %s = %q, want %q", k, got, want)
				}
			}
			if code, _ := statusOf(rpcResult(withCase(ctx, tc.name), c, "FullDuplexCall")); code != tc.want {
				t.Errorf("FullDuplexCall: %v, want %v", code, tc.want)
			}
			if calls := rec.ofCase(tc.name); len(calls) != int(tc.tokens) {
				t.Errorf("%d RPCs reached the user's interceptors, want only the %d let through", len(calls), tc.tokens)
			}
		})
	}
	// The filter's own config enables nothing: its empty bucket refuses
	// nothing.
	got, _ := burst(ctx, c, 10)
	if n := tally(got); n[codes.OK] != 10 {
		t.Errorf("10 RPCs under the filter's config without filter_enabled: %v, want all OK", n)
	}
}

// TestRateLimitShadow: enabled but not enforced, a spent bucket denies
// nothing; every RPC without a token is counted as shadow and carries
// request_headers_to_add_when_not_enforced to the handler.
func TestRateLimitShadow(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	mr := testutils.NewMetricReader(t)
	env := newTestEnv(t)
	name := "ratelimit"
	cfg := rateLimit("shadow", 2)
	cfg.FilterEnforced = nil
	cfg.RequestHeadersToAddWhenNotEnforced = []*corepb.HeaderValueOption{{Header: &corepb.HeaderValue{Key: "x-would-be-limited", Value: "true"}}}
	rec := &handlerRecorder{}
	opts := append(rec.options(), xds.MeterProvider(mr.Provider))
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, cfg)}, allRoutes("routes"), "")
	}, nil, opts...)
	c := connected(ctx, t, addr)
	for i := range 10 {
		if got := c.emptyCall(withCase(ctx, "shadow")); got != codes.OK {
			t.Fatalf("RPC %d in shadow mode: %v, want OK", i+1, got)
		}
	}
	calls := rec.ofCase("shadow")
	if len(calls) != 10 {
		t.Fatalf("%d RPCs reached the handler, want 10", len(calls))
	}
	for i, call := range calls {
		tagged := len(call.md.Get("x-would-be-limited")) > 0
		if want := i >= 2; tagged != want {
			t.Errorf("RPC %d tagged x-would-be-limited: %v, want %v (2 tokens)", i+1, tagged, want)
		}
	}
	lis := attribute.String("grpc.xds_server.listener", addr.String())
	filter := attribute.String("grpc.xds_server.local_rate_limit.filter", name)
	mr.WaitForValue(ctx, t, "grpc.xds_server.local_rate_limit.limited", 8, lis, filter, attribute.String("grpc.xds_server.local_rate_limit.mode", "shadow"))
	if v, _ := mr.Value(t, "grpc.xds_server.local_rate_limit.limited", lis, filter, attribute.String("grpc.xds_server.local_rate_limit.mode", "enforced")); v != 0 {
		t.Errorf("enforced count %d in shadow mode, want 0", v)
	}
}

// TestRateLimitPerRoute: a per-route config (on a route, and on a virtual
// host) is a bucket of its own, apart from the filter's.
func TestRateLimitPerRoute(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	name := "ratelimit"
	rc := caseRoutes("routes",
		caseRoute("a", map[string]*anypb.Any{name: anyOf(t, rateLimit("route-a", 2))}),
		caseRoute("b", map[string]*anypb.Any{name: anyOf(t, rateLimit("route-b", 3))}),
	)
	// A second virtual host, for authority "vh.example", limits its routes
	// together.
	rc.VirtualHosts = append([]*routepb.VirtualHost{{
		Name:                 "vh",
		Domains:              []string{"vh.example"},
		Routes:               []*routepb.Route{nonForwarding(prefixMatch("/"))},
		TypedPerFilterConfig: map[string]*anypb.Any{name: anyOf(t, rateLimit("vh", 1))},
	}}, rc.VirtualHosts...)
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, rateLimit("filter", 4))}, rc, "")
	}, nil)
	c := connected(ctx, t, addr)
	count := func(caseName string, n int, opts ...grpc.CallOption) int {
		ok := 0
		for range n {
			if c.emptyCall(withCase(ctx, caseName), opts...) == codes.OK {
				ok++
			}
		}
		return ok
	}
	if got := count("a", 5); got != 2 {
		t.Errorf("route a (2 tokens): %d OK of 5", got)
	}
	if got := count("b", 5); got != 3 {
		t.Errorf("route b (3 tokens): %d OK of 5", got)
	}
	if got := count("", 6); got != 4 {
		t.Errorf("other routes (the filter's 4 tokens): %d OK of 6", got)
	}
	vh := newClient(t, addr, "127.0.0.1", 0, grpc.WithAuthority("vh.example"))
	ok := 0
	for range 3 {
		if vh.emptyCall(ctx) == codes.OK {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("virtual host vh (1 token): %d OK of 3", ok)
	}
}

// TestRateLimitPerConnection: with local_rate_limit_per_downstream_connection
// each connection has a bucket of its own, also a connection that comes
// after one closed (whose server, were it reused, would hand over its
// spent bucket).
func TestRateLimitPerConnection(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	cfg := rateLimit("conn", 2)
	cfg.LocalRateLimitPerDownstreamConnection = true
	name := "ratelimit"
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, cfg)}, allRoutes("routes"), "")
	}, nil)
	c1, c2 := connected(ctx, t, addr), connected(ctx, t, addr)
	if got, _ := burst(ctx, c1, 5); tally(got)[codes.OK] != 2 {
		t.Errorf("connection 1, 5 RPCs: %v, want 2 OK", tally(got))
	}
	if got, _ := burst(ctx, c2, 5); tally(got)[codes.OK] != 2 {
		t.Errorf("connection 2, 5 RPCs: %v, want 2 OK (a bucket of its own)", tally(got))
	}
	if got := c1.emptyCall(ctx); got != codes.Unavailable {
		t.Errorf("connection 1 again: %v, want UNAVAILABLE", got)
	}
	c1.Close()
	waitForChainConns(ctx, t, s, "filters-chain", false, chainConns{live: 1})
	c3 := connected(ctx, t, addr)
	if got, _ := burst(ctx, c3, 5); tally(got)[codes.OK] != 2 {
		t.Errorf("connection 3, after connection 1 closed, 5 RPCs: %v, want 2 OK (a bucket of its own)", tally(got))
	}
}

// TestRateLimitStateAcrossUpdates: a spent bucket stays spent across an RDS
// update that leaves its config unchanged, and across a Listener update
// that changes the filter chain (its connections are drained and
// reconnect) but not the bucket; a changed bucket starts full. Not parallel:
// it uses fault injection, whose max_active_faults count is process-wide.
func TestRateLimitStateAcrossUpdates(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	name := "ratelimit"
	rl := httpFilter(t, name, rateLimit("kept", 3))
	const rds = "kept-routes"
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{rl}, nil, rds)
	}, []*routepb.RouteConfiguration{allRoutes(rds)})
	c := connected(ctx, t, addr)
	if got, _ := burst(ctx, c, 4); tally(got)[codes.OK] != 3 {
		t.Fatalf("4 RPCs on a 3-token bucket: %v, want 3 OK", tally(got))
	}

	// RDS: a new route for UnaryCall, where the filter is disabled. Once
	// UnaryCall succeeds, the new routes are applied: EmptyCall finds the
	// bucket still spent.
	disabled := anyOf(t, &routepb.FilterConfig{Disabled: true})
	rc := allRoutes(rds)
	rc.VirtualHosts[0].Routes = append([]*routepb.Route{{
		Match:                pathMatch(methodUnary),
		Action:               &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
		TypedPerFilterConfig: map[string]*anypb.Any{name: disabled},
	}}, rc.VirtualHosts[0].Routes...)
	listener := filtersListener(addr, []*hcmpb.HttpFilter{rl}, nil, rds)
	env.update(ctx, t, []*listenerpb.Listener{listener}, []*routepb.RouteConfiguration{rc})
	waitForCode(ctx, t, "UnaryCall with the filter disabled on its route", codes.OK, c.unaryCallNoOpts)
	if got := c.emptyCall(ctx); got != codes.Unavailable {
		t.Errorf("after the RDS update: %v, want UNAVAILABLE (the bucket kept its state)", got)
	}

	// LDS: a fault filter before it (which fails RPCs asking for it by
	// header) changes the chain; the connection is drained. The bucket
	// config is the same: still spent.
	faultName := "fault"
	headerAbort := &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HeaderAbort_{HeaderAbort: &faultpb.FaultAbort_HeaderAbort{}}, Percentage: percent(100)}
	fault := httpFilter(t, faultName, &faultpb.HTTPFault{Abort: headerAbort})
	askAbort := func(ctx context.Context) codes.Code {
		return c.emptyCall(metadata.AppendToOutgoingContext(ctx, "x-envoy-fault-abort-grpc-request", "5"))
	}
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{fault, rl}, nil, rds)}, []*routepb.RouteConfiguration{rc})
	waitForCode(ctx, t, "RPC asking the new fault filter for NOT_FOUND", codes.NotFound, askAbort)
	if got := c.emptyCall(ctx); got != codes.Unavailable {
		t.Errorf("after the Listener update: %v, want UNAVAILABLE (the bucket kept its state)", got)
	}

	// LDS: the bucket grows to 5 tokens, and the fault filter goes: a new,
	// full bucket. The first RPC asking for the abort that succeeds took
	// the first of its tokens.
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, name, rateLimit("kept", 5))}, nil, rds)}, []*routepb.RouteConfiguration{rc})
	waitForCode(ctx, t, "RPC once the fault filter is gone", codes.OK, askAbort)
	if got, _ := burst(ctx, c, 6); tally(got)[codes.OK] != 4 {
		t.Errorf("6 more RPCs on the new 5-token bucket: %v, want 4 OK", tally(got))
	}
	s.modes.expectNone(t, addr, 10*time.Millisecond)
}

// TestRateLimitNACK: invalid configs, in a Listener and in a
// RouteConfiguration, are NACKed naming the field, and the last good
// config, its spent bucket included, keeps serving.
func TestRateLimitNACK(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	name := "ratelimit"
	good := rateLimit("nack", 1)
	const rds = "nack-routes"
	goodListener := func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, good)}, nil, rds)
	}
	_, addr := startServing(ctx, t, env, goodListener, []*routepb.RouteConfiguration{allRoutes(rds)})
	c := connected(ctx, t, addr)
	if got, _ := burst(ctx, c, 2); tally(got)[codes.OK] != 1 {
		t.Fatalf("2 RPCs on a 1-token bucket: %v, want 1 OK", tally(got))
	}
	bad := func(mutate func(m *localratelimitpb.LocalRateLimit)) *localratelimitpb.LocalRateLimit {
		m := proto.Clone(good).(*localratelimitpb.LocalRateLimit)
		mutate(m)
		return m
	}
	for _, tc := range []struct {
		desc     string
		cfg      *localratelimitpb.LocalRateLimit
		perRoute bool
		want     string
	}{
		{desc: "fill_interval under 50ms", cfg: bad(func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.FillInterval = durationpb.New(10e6) }), want: "token_bucket.fill_interval"},
		{desc: "fill_interval missing", cfg: bad(func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.FillInterval = nil }), want: "token_bucket.fill_interval"},
		{desc: "tokens_per_fill 0", cfg: bad(func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.TokensPerFill = wrapperspb.UInt32(0) }), want: "token_bucket.tokens_per_fill"},
		{desc: "empty stat_prefix", cfg: bad(func(m *localratelimitpb.LocalRateLimit) { m.StatPrefix = "" }), want: "stat_prefix"},
		{desc: "descriptors", cfg: bad(func(m *localratelimitpb.LocalRateLimit) {
			m.Descriptors = []*ratelimitpb.LocalRateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}
		}), want: "descriptors"},
		{desc: "per-route without bucket", cfg: bad(func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket = nil }), perRoute: true, want: "token_bucket"},
		{desc: "per-route rate_limits", cfg: bad(func(m *localratelimitpb.LocalRateLimit) { m.RateLimits = []*routepb.RateLimit{{}} }), perRoute: true, want: "rate_limits"},
	} {
		t.Run(strings.ReplaceAll(tc.desc, " ", "_"), func(t *testing.T) {
			seen := len(env.ms.Requests())
			typeURL := listenerTypeURL
			if tc.perRoute {
				typeURL = routeTypeURL
				rc := allRoutes(rds)
				rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{name: anyOf(t, tc.cfg)}
				env.update(ctx, t, []*listenerpb.Listener{goodListener(addr)}, []*routepb.RouteConfiguration{rc})
			} else {
				env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, name, tc.cfg)}, nil, rds)}, []*routepb.RouteConfiguration{allRoutes(rds)})
			}
			nack, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(typeURL)))
			if err != nil {
				t.Fatalf("no NACK: %v", err)
			}
			if d := nack.GetErrorDetail().GetMessage(); !strings.Contains(d, "localratelimit") || !strings.Contains(d, tc.want) {
				t.Errorf("NACK %q does not name localratelimit and %q", d, tc.want)
			}
			if got := c.emptyCall(ctx); got != codes.Unavailable {
				t.Errorf("after the NACK: %v, want UNAVAILABLE (the last good config, its bucket spent)", got)
			}
		})
	}
}

// startXDSServerFilters starts an xDS server for the benchmarks whose one
// filter chain runs filters before the router, over one route.
func startXDSServerFilters(b *testing.B, filters []*hcmpb.HttpFilter) benchServer {
	return startBenchServer(b, thisLibrary, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, filters, allRoutes("bench"), "")
	})
}

// BenchmarkServerUnaryLocalFilters: server CPU per unary RPC (one
// connection, 8 concurrent callers, the load in a child process) of plain
// gRPC, the xDS server without filters, with a local rate limit filter that
// lets every RPC through (a bucket with more tokens than the run needs,
// enabled and enforced for every RPC: the whole allowed path), shared or
// per connection, and with a fault filter that reads its headers on every
// RPC and faults none. The servers run side by side and take the load in
// turns, in 10 rounds, so that a change in the machine's load during the
// run weighs on all of them alike; the ratios to plain are reported.
// Target: rate limit within 3% of plain.
//
//	go test -run '^$' -bench 'BenchmarkServerUnaryLocalFilters' -benchtime 50000x ./e2e
func BenchmarkServerUnaryLocalFilters(b *testing.B) {
	rl := func(perConn bool) *localratelimitpb.LocalRateLimit {
		m := rateLimit("bench", 1<<31)
		m.LocalRateLimitPerDownstreamConnection = perConn
		return m
	}
	headerFault := &faultpb.HTTPFault{
		Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HeaderAbort_{HeaderAbort: &faultpb.FaultAbort_HeaderAbort{}}, Percentage: percent(100)},
		Delay: &faultcommonpb.FaultDelay{FaultDelaySecifier: &faultcommonpb.FaultDelay_HeaderDelay_{HeaderDelay: &faultcommonpb.FaultDelay_HeaderDelay{}}, Percentage: percent(100)},
	}
	variants := []struct {
		name    string
		filters []*hcmpb.HttpFilter // nil: plain gRPC
	}{
		{name: "plain"},
		{name: "xds", filters: []*hcmpb.HttpFilter{}},
		{name: "ratelimit", filters: []*hcmpb.HttpFilter{httpFilter(b, "rl", rl(false))}},
		{name: "ratelimit-perconn", filters: []*hcmpb.HttpFilter{httpFilter(b, "rl", rl(true))}},
		{name: "fault", filters: []*hcmpb.HttpFilter{httpFilter(b, "fault", headerFault)}},
	}
	sv := make([]benchVariant, len(variants))
	for i, v := range variants {
		sv[i] = benchVariant{name: v.name, start: startPlainServer}
		if v.filters != nil {
			filters := v.filters
			sv[i].start = func(b *testing.B) benchServer { return startXDSServerFilters(b, filters) }
		}
	}
	sideBySide(b, "unary", sv)
}
