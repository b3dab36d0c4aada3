package builtin_test

import (
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestRegistry: the server's registry knows the router and RBAC, with no
// other package having to register them first.
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
		{Name: "router", ConfigType: cfg(&routerpb.Router{})},
	})
	if err != nil || len(filters) != 2 {
		t.Fatalf("HTTPFilters(rbac, router) = %v, %v; want both", filters, err)
	}
	overrides, err := httpfilter.NewParser(builtin.Registry).Overrides(map[string]*anypb.Any{"rbac": cfg(&rbacpb.RBACPerRoute{}).TypedConfig})
	if err != nil || len(overrides) != 1 {
		t.Errorf("Overrides(RBACPerRoute) = %v, %v; want it parsed", overrides, err)
	}
}
