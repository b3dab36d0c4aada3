package rpcpath_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// routerOnly is the HttpConnectionManager of a chain with the router alone.
var routerOnly = &filterchain.HTTPConnectionManager{Filters: []httpfilter.Instance{{Name: "router", Filter: httpfilter.Router{}, Config: httpfilter.RouterConfig{}}}}

// tapOf returns the tap handle of a chain routing with rc (or failing with
// rdsErr when rc is nil) through hcm.
func tapOf(t testing.TB, hcm *filterchain.HTTPConnectionManager, rc *routepb.RouteConfiguration, p *httpfilter.Parser, rdsErr error) tap.ServerInHandle {
	t.Helper()
	if rc == nil {
		return rpcpath.Tap("fc", rpcpath.NewSource(rpcpath.Unavailable(rdsErr)))
	}
	r, err := routing.Compile(rc, p)
	if err != nil {
		t.Fatal(err)
	}
	return rpcpath.Tap("fc", rpcpath.NewSource(rpcpath.NewRoutes(r, hcm, nil)))
}

// allowedAllocs returns the allocations of one call of h for an RPC it
// lets through, failing t if it refuses it.
func allowedAllocs(t *testing.T, h tap.ServerInHandle, ctx context.Context) float64 {
	t.Helper()
	info := tapInfo("svc", "/pkg.S/M")
	return testing.AllocsPerRun(100, func() {
		if _, err := h(ctx, info); err != nil {
			t.Fatal(err)
		}
	})
}

func tapInfo(authority, method string) *tap.Info {
	return &tap.Info{FullMethodName: method, Header: metadata.MD{":authority": {authority}, "content-type": {"application/grpc"}}}
}

func TestTap(t *testing.T) {
	rc := e2e.DefaultRouteConfig("rc")
	rc.VirtualHosts[0].Domains = []string{"svc.example.com"}
	rc.VirtualHosts[0].Routes = append([]*routepb.Route{{
		Name:   "client-side",
		Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/bad."}},
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}},
	}}, rc.VirtualHosts[0].Routes...)
	ok := tapOf(t, routerOnly, rc, nil, nil)
	tests := []struct {
		desc     string
		tap      tap.ServerInHandle
		info     *tap.Info
		wantCode codes.Code
		wantMsg  string
	}{
		{desc: "routed", tap: ok, info: tapInfo("svc.example.com", "/pkg.S/M"), wantCode: codes.OK},
		{desc: "no virtual host", tap: ok, info: tapInfo("other", "/pkg.S/M"), wantCode: codes.Unavailable, wantMsg: "no virtual host and route"},
		{desc: "not non_forwarding", tap: ok, info: tapInfo("svc.example.com", "/bad.S/M"), wantCode: codes.Unavailable, wantMsg: "not non_forwarding_action"},
		{desc: "rds error", tap: tapOf(t, routerOnly, nil, nil, errors.New(`RouteConfiguration "x" does not exist`)), info: tapInfo("a", "/p.S/M"), wantCode: codes.Unavailable, wantMsg: `"x" does not exist`},
		{desc: "no leading slash", tap: ok, info: tapInfo("svc.example.com", "pkg.S/M"), wantCode: codes.Unimplemented, wantMsg: "malformed method name"},
		{desc: "no method", tap: ok, info: tapInfo("svc.example.com", "/pkg.S"), wantCode: codes.Unimplemented, wantMsg: "malformed method name"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := tc.tap(context.Background(), tc.info)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("tap: code %v (%v), want %v", got, err, tc.wantCode)
			}
			if err != nil && !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Errorf("tap message %q does not mention %q", status.Convert(err).Message(), tc.wantMsg)
			}
		})
	}
}

// TestSourceSwap: an RPC uses the routes the source holds when it arrives.
func TestSourceSwap(t *testing.T) {
	r, err := routing.Compile(e2e.DefaultRouteConfig("rc"), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := rpcpath.NewSource(rpcpath.Unavailable(errors.New("not yet")))
	h := rpcpath.Tap("fc", src)
	if _, err := h(context.Background(), tapInfo("a", "/p.S/M")); status.Code(err) != codes.Unavailable {
		t.Errorf("before the swap: %v, want UNAVAILABLE", err)
	}
	src.Store(rpcpath.NewRoutes(r, routerOnly, nil))
	if _, err := h(context.Background(), tapInfo("a", "/p.S/M")); err != nil {
		t.Errorf("after the swap: %v, want OK", err)
	}
}

// TestTapAllocs: an RPC that is let through costs the tap no allocation.
func TestTapAllocs(t *testing.T) {
	h := tapOf(t, routerOnly, e2e.DefaultRouteConfig("rc"), nil, nil)
	if n := allowedAllocs(t, h, context.Background()); n != 0 {
		t.Errorf("tap allocates %v times per RPC, want 0", n)
	}
}

func BenchmarkTap(b *testing.B) {
	h := tapOf(b, routerOnly, e2e.DefaultRouteConfig("rc"), nil, nil)
	info := tapInfo("svc", "/pkg.S/M")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h(ctx, info)
	}
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
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

// rbacTap returns the tap of a chain that runs cfg then the router over rc,
// its steps precomputed as when a Listener is applied.
func rbacTap(t testing.TB, cfg *rbacpb.RBAC, rc *routepb.RouteConfiguration) tap.ServerInHandle {
	t.Helper()
	hcm, p := hcmWith(t, "rbac", cfg)
	return tapOf(t, hcm, rc, p, nil)
}

func peerContext() context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{
		Addr:      &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000},
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443},
	})
}

// TestTapRBAC: the tap runs the RBAC step after the route match and the
// action check; a route override disables it; an RPC on a route that does
// not serve RPCs is UNAVAILABLE before RBAC decides anything (gRFC A36, as
// grpc-go: the action is checked first).
func TestTapRBAC(t *testing.T) {
	rc := e2e.DefaultRouteConfig("rc")
	rc.VirtualHosts[0].Routes = []*routepb.Route{
		{
			Match:                &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/open."}},
			Action:               &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
			TypedPerFilterConfig: map[string]*anypb.Any{"rbac": mustAny(t, &rbacpb.RBACPerRoute{})},
		},
		{
			Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/client."}},
			Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}},
		},
		rc.VirtualHosts[0].Routes[0],
	}
	h := rbacTap(t, rbacN(3), rc)
	ctx := peerContext()
	for _, tc := range []struct {
		method string
		want   codes.Code
	}{
		{"/pkg.S/M", codes.OK},
		{"/pkg.S/Other", codes.PermissionDenied},
		{"/open.S/M", codes.OK},
		{"/client.S/M", codes.Unavailable},
	} {
		_, err := h(ctx, tapInfo("svc", tc.method))
		if got := status.Code(err); got != tc.want {
			t.Errorf("tap(%s): %v (%v), want %v", tc.method, got, err, tc.want)
		}
	}
}

// TestTapRBACAllocs: an RPC the RBAC filter allows costs the tap no
// allocation.
func TestTapRBACAllocs(t *testing.T) {
	h := rbacTap(t, rbacN(10), e2e.DefaultRouteConfig("rc"))
	if n := allowedAllocs(t, h, peerContext()); n != 0 {
		t.Errorf("tap with a 10-policy RBAC filter allocates %v times per RPC, want 0", n)
	}
}

func BenchmarkTapRBAC(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			h := rbacTap(b, rbacN(n), e2e.DefaultRouteConfig("rc"))
			ctx := peerContext()
			info := tapInfo("svc", "/pkg.S/M")
			b.ReportAllocs()
			for b.Loop() {
				h(ctx, info)
			}
		})
	}
}
