package xds

import (
	"context"
	"errors"
	"strings"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// tapTestServer returns a chainServer routing with rc (or failing with
// rdsErr when rc is nil), enough to call its tap.
func tapTestServer(t testing.TB, rc *routepb.RouteConfiguration, rdsErr error) *chainServer {
	t.Helper()
	hcm := &filterchain.HTTPConnectionManager{Filters: []httpfilter.Instance{{Name: "router", Filter: httpfilter.Router{}, Config: httpfilter.RouterConfig{}}}}
	rt := &routeTable{err: rdsErr}
	if rc != nil {
		r, err := routing.Compile(rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		rt = newRouteTable(r, []*filterchain.HTTPConnectionManager{hcm}, nil)
	}
	return &chainServer{
		chain:  &filterchain.FilterChain{Name: "fc", HCM: hcm},
		routes: routeSource{fixed: rt},
	}
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
	ok := tapTestServer(t, rc, nil)
	tests := []struct {
		desc     string
		cs       *chainServer
		info     *tap.Info
		wantCode codes.Code
		wantMsg  string
	}{
		{desc: "routed", cs: ok, info: tapInfo("svc.example.com", "/pkg.S/M"), wantCode: codes.OK},
		{desc: "no virtual host", cs: ok, info: tapInfo("other", "/pkg.S/M"), wantCode: codes.Unavailable, wantMsg: "no virtual host and route"},
		{desc: "not non_forwarding", cs: ok, info: tapInfo("svc.example.com", "/bad.S/M"), wantCode: codes.Unavailable, wantMsg: "not non_forwarding_action"},
		{desc: "rds error", cs: tapTestServer(t, nil, errors.New(`RouteConfiguration "x" does not exist`)), info: tapInfo("a", "/p.S/M"), wantCode: codes.Unavailable, wantMsg: `"x" does not exist`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := tc.cs.tap(context.Background(), tc.info)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("tap: code %v (%v), want %v", got, err, tc.wantCode)
			}
			if err != nil && !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Errorf("tap message %q does not mention %q", status.Convert(err).Message(), tc.wantMsg)
			}
		})
	}
}

// TestTapAllocs: an RPC that is let through costs the tap no allocation.
func TestTapAllocs(t *testing.T) {
	cs := tapTestServer(t, e2e.DefaultRouteConfig("rc"), nil)
	info := tapInfo("svc", "/pkg.S/M")
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if _, err := cs.tap(ctx, info); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("tap allocates %v times per RPC, want 0", n)
	}
}

func BenchmarkTap(b *testing.B) {
	cs := tapTestServer(b, e2e.DefaultRouteConfig("rc"), nil)
	info := tapInfo("svc", "/pkg.S/M")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cs.tap(ctx, info)
	}
}
