package e2e

import (
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestServerListenerName(t *testing.T) {
	tests := []struct {
		host string
		port uint32
		want string
	}{
		{host: "127.0.0.1", port: 8080, want: "grpc/server?xds.resource.listening_address=127.0.0.1:8080"},
		{host: "::1", port: 0, want: "grpc/server?xds.resource.listening_address=[::1]:0"},
	}
	for _, test := range tests {
		if got := ServerListenerName(test.host, test.port); got != test.want {
			t.Errorf("ServerListenerName(%q, %d) = %q, want %q", test.host, test.port, got, test.want)
		}
	}
}

// hcmOf returns the HttpConnectionManager of the Listener's only filter chain.
func hcmOf(t *testing.T, host string, port uint32, route string) *hcmpb.HttpConnectionManager {
	t.Helper()
	l := DefaultServerListener(host, port, route)
	if got, want := l.GetName(), ServerListenerName(host, port); got != want {
		t.Errorf("Listener name = %q, want %q", got, want)
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || sa.GetPortValue() != port || sa.GetProtocol() != corepb.SocketAddress_TCP {
		t.Errorf("Listener address = %v, want TCP %s port %d", sa, host, port)
	}
	if n := len(l.GetFilterChains()); n != 1 {
		t.Fatalf("Listener has %d filter chains, want 1", n)
	}
	fc := l.GetFilterChains()[0]
	if fc.GetFilterChainMatch() != nil {
		t.Errorf("filter chain has match %v, want none", fc.GetFilterChainMatch())
	}
	if n := len(fc.GetFilters()); n != 1 || fc.GetFilters()[0].GetName() != HCMFilterName {
		t.Fatalf("filter chain filters = %v, want one %s", fc.GetFilters(), HCMFilterName)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("decoding the HttpConnectionManager: %v", err)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 1 || !filters[0].GetTypedConfig().MessageIs(&routerpb.Router{}) {
		t.Errorf("HTTP filters = %v, want the router only", filters)
	}
	return hcm
}

func TestDefaultServerListener_RDS(t *testing.T) {
	hcm := hcmOf(t, "127.0.0.1", 443, "route-1")
	rds := hcm.GetRds()
	if rds.GetRouteConfigName() != "route-1" {
		t.Errorf("RDS route name = %q, want route-1", rds.GetRouteConfigName())
	}
	if rds.GetConfigSource().GetAds() == nil {
		t.Errorf("RDS config source = %v, want ads", rds.GetConfigSource())
	}
	if hcm.GetRouteConfig() != nil {
		t.Error("HttpConnectionManager has both rds and route_config")
	}
}

func TestDefaultServerListener_InlineRoute(t *testing.T) {
	hcm := hcmOf(t, "::1", 0, "")
	if hcm.GetRds() != nil {
		t.Error("HttpConnectionManager has rds, want an inline route_config")
	}
	if diff := cmp.Diff(hcm.GetRouteConfig(), DefaultRouteConfig("inline-route"), protocmp.Transform()); diff != "" {
		t.Errorf("inline route config (-got, +want):\n%s", diff)
	}
}

func TestDefaultRouteConfig(t *testing.T) {
	rc := DefaultRouteConfig("r")
	want := &routepb.RouteConfiguration{
		Name: "r",
		VirtualHosts: []*routepb.VirtualHost{{
			Name:    "vhost-all",
			Domains: []string{"*"},
			Routes: []*routepb.Route{{
				Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
			}},
		}},
	}
	if diff := cmp.Diff(rc, want, protocmp.Transform()); diff != "" {
		t.Errorf("DefaultRouteConfig (-got, +want):\n%s", diff)
	}
}
