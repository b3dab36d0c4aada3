package builtin_test

import (
	"strings"
	"testing"

	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/httpfilter/extauthz"
	"github.com/proxyless-grpc/xds/internal/httpfilter/extproc"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestRegistry: the server's registry knows the router, RBAC, local rate
// limit and fault injection, with no other package having to register them
// first.
func TestRegistry(t *testing.T) {
	cfg := func(m proto.Message) *hcmpb.HttpFilter_TypedConfig {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return &hcmpb.HttpFilter_TypedConfig{TypedConfig: a}
	}
	filters, err := httpfilter.NewParser(builtin.Registry).HTTPFilters([]*hcmpb.HttpFilter{
		{Name: "rbac", ConfigType: cfg(&rbacpb.RBAC{})},
		{Name: "ratelimit", ConfigType: cfg(&localratelimitpb.LocalRateLimit{StatPrefix: "rl"})},
		{Name: "fault", ConfigType: cfg(&faultpb.HTTPFault{})},
		{Name: "router", ConfigType: cfg(&routerpb.Router{})},
	})
	if err != nil || len(filters) != 4 {
		t.Fatalf("HTTPFilters(rbac, ratelimit, fault, router) = %v, %v; want all", filters, err)
	}
	if got, want := httpfilter.NeedsOf(filters), (httpfilter.Needs{After: true, ConnState: true}); got != want {
		t.Errorf("NeedsOf = %+v, want %+v", got, want)
	}
	overrides, err := httpfilter.NewParser(builtin.Registry).Overrides(map[string]*anypb.Any{
		"rbac":  cfg(&rbacpb.RBACPerRoute{}).TypedConfig,
		"fault": cfg(&faultpb.HTTPFault{}).TypedConfig,
	})
	if err != nil || len(overrides) != 2 {
		t.Errorf("Overrides(RBACPerRoute, HTTPFault) = %v, %v; want both parsed", overrides, err)
	}
}

// TestTurnedOff: a filter its environment variable turns off (gRFC A92's,
// A93's) is an unknown type: an optional entry is skipped, any other is
// NACKed as a type the server does not know, as in a gRPC without it.
func TestTurnedOff(t *testing.T) {
	for _, tc := range []struct {
		env string
		cfg proto.Message
	}{
		{extproc.EnvDisable, &extprocpb.ExternalProcessor{}},
		{extauthz.EnvDisable, &extauthzpb.ExtAuthz{}},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "false")
			a, err := anypb.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			router, _ := anypb.New(&routerpb.Router{})
			filters, err := httpfilter.NewParser(builtin.Registry).HTTPFilters([]*hcmpb.HttpFilter{
				{Name: "off", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: a}, IsOptional: true},
				{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: router}},
			})
			if err != nil || len(filters) != 1 {
				t.Fatalf("optional filter turned off: %v, %v; want it skipped", filters, err)
			}
			_, err = httpfilter.NewParser(builtin.Registry).HTTPFilters([]*hcmpb.HttpFilter{
				{Name: "off", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: a}},
				{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: router}},
			})
			if err == nil || !strings.Contains(err.Error(), "unsupported") {
				t.Fatalf("required filter turned off: %v, want an unsupported type", err)
			}
		})
	}
}
