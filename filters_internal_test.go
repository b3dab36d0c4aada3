package xds

import (
	"context"
	"fmt"
	"net"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

func mustAnyT(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rbacN is an RBAC filter config with n ALLOW policies; only the last one
// allows /pkg.S/M.
func rbacN(n int) *rbacpb.RBAC {
	rules := &rbacconfigpb.RBAC{Action: rbacconfigpb.RBAC_ALLOW, Policies: map[string]*rbacconfigpb.Policy{}}
	for i := range n {
		path := fmt.Sprintf("/pkg.S/M%d", i)
		if i == n-1 {
			path = "/pkg.S/M"
		}
		rules.Policies[fmt.Sprintf("p%03d", i)] = &rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: path}}}}}}},
			Principals:  []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_SourceIp{SourceIp: &corepb.CidrRange{AddressPrefix: "127.0.0.0", PrefixLen: wrapperspb.UInt32(8)}}}},
		}
	}
	return &rbacpb.RBAC{Rules: rules}
}

// rbacTapServer returns a chainServer whose chain runs cfg then the router
// over rc, its steps precomputed as at Listener apply.
func rbacTapServer(t testing.TB, cfg *rbacpb.RBAC, rc *routepb.RouteConfiguration) *chainServer {
	t.Helper()
	p := httpfilter.NewParser(builtin.Registry)
	filters, err := p.HTTPFilters([]*hcmpb.HttpFilter{
		{Name: "rbac", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAnyT(t, cfg)}},
		{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAnyT(t, &routerpb.Router{})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := routing.Compile(rc, p)
	if err != nil {
		t.Fatal(err)
	}
	hcm := &filterchain.HTTPConnectionManager{Routes: r, Filters: filters}
	fc := &filterchain.FilterChain{Name: "fc", HCM: hcm}
	return &chainServer{chain: fc, routes: routeSource{fixed: inlineRoutes(fc, nil)}}
}

func peerContext() context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{
		Addr:      &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000},
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443},
	})
}

// TestTapRBAC: the tap runs the RBAC step after the route match and before
// the action check; a route override disables it; an RPC the filter denies
// is PERMISSION_DENIED even on a route that would fail as UNAVAILABLE.
func TestTapRBAC(t *testing.T) {
	rc := e2e.DefaultRouteConfig("rc")
	rc.VirtualHosts[0].Routes = []*routepb.Route{
		{
			Match:                &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/open."}},
			Action:               &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
			TypedPerFilterConfig: map[string]*anypb.Any{"rbac": mustAnyT(t, &rbacpb.RBACPerRoute{})},
		},
		{
			Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/client."}},
			Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}},
		},
		rc.VirtualHosts[0].Routes[0],
	}
	cs := rbacTapServer(t, rbacN(3), rc)
	ctx := peerContext()
	for _, tc := range []struct {
		method string
		want   codes.Code
	}{
		{"/pkg.S/M", codes.OK},
		{"/pkg.S/Other", codes.PermissionDenied},
		{"/open.S/M", codes.OK},
		{"/client.S/M", codes.PermissionDenied},
	} {
		_, err := cs.tap(ctx, tapInfo("svc", tc.method))
		if got := status.Code(err); got != tc.want {
			t.Errorf("tap(%s): %v (%v), want %v", tc.method, got, err, tc.want)
		}
	}
	// A chain whose filters have no steps in the table fails closed.
	other := &chainServer{chain: &filterchain.FilterChain{Name: "x", HCM: &filterchain.HTTPConnectionManager{}}, routes: cs.routes}
	if _, err := other.tap(ctx, tapInfo("svc", "/pkg.S/M")); status.Code(err) != codes.Unavailable {
		t.Errorf("tap on a chain without steps: %v, want UNAVAILABLE", err)
	}
}

// TestTapRBACAllocs: an RPC the RBAC filter allows costs the tap no
// allocation.
func TestTapRBACAllocs(t *testing.T) {
	cs := rbacTapServer(t, rbacN(10), e2e.DefaultRouteConfig("rc"))
	ctx := peerContext()
	info := tapInfo("svc", "/pkg.S/M")
	if n := testing.AllocsPerRun(100, func() {
		if _, err := cs.tap(ctx, info); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("tap with a 10-policy RBAC filter allocates %v times per RPC, want 0", n)
	}
}

func BenchmarkTapRBAC(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			cs := rbacTapServer(b, rbacN(n), e2e.DefaultRouteConfig("rc"))
			ctx := peerContext()
			info := tapInfo("svc", "/pkg.S/M")
			b.ReportAllocs()
			for b.Loop() {
				cs.tap(ctx, info)
			}
		})
	}
}
