package e2e_test

// Helpers of the end-to-end tests of the local rate limit and fault
// injection filters (ratelimit_test.go, fault_test.go): Listeners whose
// filter chain runs given HTTP filters before the router, routes picked by
// an "x-case" header (each can carry its own per-route config), filter
// configs, and a server interceptor that records which RPCs reached the
// user's code.

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// caseHeader picks the route of an RPC in caseRoutes.
const caseHeader = "x-case"

// httpFilter is an http_filters entry named name with config cfg.
func httpFilter(t testing.TB, name string, cfg proto.Message) *hcmpb.HttpFilter {
	t.Helper()
	return &hcmpb.HttpFilter{Name: name, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, cfg)}}
}

// filtersListener returns a Listener for addr with one filter chain whose
// HttpConnectionManager runs filters, then the router; routes come from rc
// inline, or from RDS resource rds when rc is nil.
func filtersListener(addr net.Addr, filters []*hcmpb.HttpFilter, rc *routepb.RouteConfiguration, rds string) *listenerpb.Listener {
	return hcmListener(addr, "filters", filters, rc, rds)
}

// hcmListener returns a Listener for addr with one filter chain, name+"-chain",
// whose HttpConnectionManager (stat prefix name) runs filters, then the
// router; routes come from rc inline, or from RDS resource rds when rc is nil.
func hcmListener(addr net.Addr, name string, filters []*hcmpb.HttpFilter, rc *routepb.RouteConfiguration, rds string) *listenerpb.Listener {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix:  name,
		HttpFilters: append(append([]*hcmpb.HttpFilter{}, filters...), e2e.RouterHTTPFilter()),
	}
	if rc != nil {
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: rc}
	} else {
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			RouteConfigName: rds,
			ConfigSource: &corepb.ConfigSource{
				ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
				ResourceApiVersion:    corepb.ApiVersion_V3,
			},
		}}
	}
	host, port := hostPort(addr)
	return &listenerpb.Listener{
		Name: e2e.ServerListenerName(host, port),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Protocol:      corepb.SocketAddress_TCP,
			Address:       host,
			PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains: []*listenerpb.FilterChain{{
			Name: name + "-chain",
			Filters: []*listenerpb.Filter{{
				Name:       e2e.HCMFilterName,
				ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)},
			}},
		}},
	}
}

// caseRoute is a non_forwarding_action route for the RPCs with "x-case:
// name", with typed_per_filter_config perFilter.
func caseRoute(name string, perFilter map[string]*anypb.Any) *routepb.Route {
	m := prefixMatch("/")
	m.Headers = []*routepb.HeaderMatcher{{Name: caseHeader, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: exactString(name)}}}
	r := nonForwarding(m)
	r.Name = name
	r.TypedPerFilterConfig = perFilter
	return r
}

// caseRoutes is a RouteConfiguration named name of routes, then a route
// for every other RPC.
func caseRoutes(name string, routes ...*routepb.Route) *routepb.RouteConfiguration {
	return routeConfig(name, append(append([]*routepb.Route{}, routes...), nonForwarding(prefixMatch("/"))))
}

// withCase returns ctx with the x-case header (and more pairs, if any).
func withCase(ctx context.Context, name string, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, append([]string{caseHeader, name}, kv...)...)
}

func percent(n uint32) *typepb.FractionalPercent { return &typepb.FractionalPercent{Numerator: n} }

func runtimePercent(n uint32) *corepb.RuntimeFractionalPercent {
	return &corepb.RuntimeFractionalPercent{DefaultValue: percent(n)}
}

// rateLimit is a local rate limit config of maxTokens tokens refilled one
// an hour, so that none comes back during a test, enabled and enforced for
// every RPC.
func rateLimit(prefix string, maxTokens uint32) *localratelimitpb.LocalRateLimit {
	return &localratelimitpb.LocalRateLimit{
		StatPrefix:     prefix,
		TokenBucket:    &typepb.TokenBucket{MaxTokens: maxTokens, FillInterval: durationpb.New(time.Hour)},
		FilterEnabled:  runtimePercent(100),
		FilterEnforced: runtimePercent(100),
	}
}

func grpcAbort(code codes.Code, pct uint32) *faultpb.FaultAbort {
	return &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_GrpcStatus{GrpcStatus: uint32(code)}, Percentage: percent(pct)}
}

func fixedDelay(d time.Duration, pct uint32) *faultcommonpb.FaultDelay {
	return &faultcommonpb.FaultDelay{FaultDelaySecifier: &faultcommonpb.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d)}, Percentage: percent(pct)}
}

// handlerRecorder is a server interceptor, given with
// grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor, that records
// the RPCs that reach the user's code: their x-case and metadata, and when.
type handlerRecorder struct {
	mu    sync.Mutex
	calls []handlerCall // guarded by mu
}

type handlerCall struct {
	method string
	md     metadata.MD
	at     time.Time
}

func (r *handlerRecorder) options() []grpc.ServerOption {
	record := func(ctx context.Context, method string) {
		md, _ := metadata.FromIncomingContext(ctx)
		r.mu.Lock()
		r.calls = append(r.calls, handlerCall{method: method, md: md, at: time.Now()})
		r.mu.Unlock()
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record(ctx, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			record(ss.Context(), info.FullMethod)
			return h(srv, ss)
		}),
	}
}

// ofCase returns the recorded calls whose x-case is name.
func (r *handlerRecorder) ofCase(name string) []handlerCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []handlerCall
	for _, c := range r.calls {
		if v := c.md.Get(caseHeader); len(v) > 0 && v[0] == name {
			out = append(out, c)
		}
	}
	return out
}

// burst makes n EmptyCalls at once (n goroutines) and returns their codes
// and messages.
func burst(ctx context.Context, c *testClient, n int) ([]codes.Code, []string) {
	codesOut, msgs := make([]codes.Code, n), make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rpcResult(ctx, c, "EmptyCall")
			codesOut[i], msgs[i] = statusOf(err)
		}()
	}
	wg.Wait()
	return codesOut, msgs
}

// statusOf returns the code and message of an RPC's error.
func statusOf(err error) (codes.Code, string) {
	s := status.Convert(err)
	return s.Code(), s.Message()
}

// tally counts codes.
func tally(cs []codes.Code) map[codes.Code]int {
	m := map[codes.Code]int{}
	for _, c := range cs {
		m[c]++
	}
	return m
}

// onlyMessages reports whether every message of a non-OK code is want.
func onlyMessages(cs []codes.Code, msgs []string, want string) bool {
	for i, c := range cs {
		if c != codes.OK && !strings.Contains(msgs[i], want) {
			return false
		}
	}
	return true
}
