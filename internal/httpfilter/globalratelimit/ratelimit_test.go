package globalratelimit_test

import (
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlconfpb "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	globalratelimit "github.com/proxyless-grpc/xds/internal/httpfilter/globalratelimit"
	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func raw(t *testing.T, m proto.Message) httpfilter.RawConfig {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := typedconfig.Unwrap(a)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func minimal() *rlpb.RateLimit {
	return &rlpb.RateLimit{Domain: "d", RateLimitService: &rlconfpb.RateLimitServiceConfig{
		TransportApiVersion: corepb.ApiVersion_V3,
		GrpcService:         &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: "127.0.0.1:9"}}},
	}}
}

// TestDefaults: Envoy's defaults: a 20 ms timeout, failures allowed, over
// the limit answered with 429 (UNAVAILABLE).
func TestDefaults(t *testing.T) {
	f := globalratelimit.Filter{}
	c, err := f.ParseConfig(raw(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	d := f.Describe(c)
	for _, want := range []string{`"127.0.0.1:9"`, `domain "d"`, "timeout 20ms", "over limit: Unavailable", "failure allows"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe = %q, want %q in it", d, want)
		}
	}
}

// TestNoStep: the filter has no step where no rate limit applies: no
// rate_limits anywhere, the virtual host's of another stage, a route that
// ignores the virtual host's, or request_type internal (no RPC is).
func TestNoStep(t *testing.T) {
	f := globalratelimit.Filter{}
	c, err := f.ParseConfig(raw(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	generic := &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_GenericKey_{GenericKey: &routepb.RateLimit_Action_GenericKey{DescriptorValue: "v"}}}
	stage3 := &routepb.RateLimit{Stage: wrapperspb.UInt32(3), Actions: []*routepb.RateLimit_Action{generic}}
	vh3, err := ratelimitdesc.Compile([]*routepb.RateLimit{stage3})
	if err != nil {
		t.Fatal(err)
	}
	vh0, err := ratelimitdesc.Compile([]*routepb.RateLimit{{Actions: []*routepb.RateLimit_Action{generic}}})
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := f.ParseOverride(raw(t, &rlpb.RateLimitPerRoute{VhRateLimits: rlpb.RateLimitPerRoute_IGNORE}))
	if err != nil {
		t.Fatal(err)
	}
	internal := minimal()
	internal.RequestType = "internal"
	ci, err := f.ParseConfig(raw(t, internal))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		config, override httpfilter.Config
		route            httpfilter.RouteInfo
	}{
		"nothing":               {config: c},
		"other stage":           {config: c, route: httpfilter.RouteInfo{VirtualHostRateLimits: vh3}},
		"ignored":               {config: c, override: ignore, route: httpfilter.RouteInfo{VirtualHostRateLimits: vh0}},
		"request_type internal": {config: ci, route: httpfilter.RouteInfo{VirtualHostRateLimits: vh0}},
	} {
		s, err := f.BuildRouteStep("rl", tc.config, tc.override, tc.route)
		if err != nil || s != nil {
			t.Errorf("%s: step %v, %v; want none", name, s, err)
		}
	}
	if s, err := f.BuildRouteStep("rl", c, nil, httpfilter.RouteInfo{VirtualHostRateLimits: vh0}); err != nil || s == nil {
		t.Errorf("the virtual host's rate limits of stage 0: step %v, %v; want one", s, err)
	}
}
