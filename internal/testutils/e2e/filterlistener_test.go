package e2e

import (
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestServerListenerWithFilters: the default Listener, with the filters
// before the router and the given routes (the default ones without).
func TestServerListenerWithFilters(t *testing.T) {
	first, second := &hcmpb.HttpFilter{Name: "first"}, &hcmpb.HttpFilter{Name: "second"}
	rc := DefaultRouteConfig("given")
	for _, tc := range []struct {
		rc   *routepb.RouteConfiguration
		want *routepb.RouteConfiguration
	}{{rc: rc, want: rc}, {want: DefaultRouteConfig("inline-route")}} {
		l := ServerListenerWithFilters("127.0.0.1", 8080, tc.rc, first, second)
		if got, want := l.GetName(), ServerListenerName("127.0.0.1", 8080); got != want {
			t.Errorf("Listener name = %q, want %q", got, want)
		}
		hcm := &hcmpb.HttpConnectionManager{}
		if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		fs := hcm.GetHttpFilters()
		if len(fs) != 3 || fs[0].GetName() != "first" || fs[1].GetName() != "second" || !fs[2].GetTypedConfig().MessageIs(&routerpb.Router{}) {
			t.Errorf("HTTP filters = %v, want first, second, router", fs)
		}
		if diff := cmp.Diff(tc.want, hcm.GetRouteConfig(), protocmp.Transform()); diff != "" {
			t.Errorf("routes (-want +got):\n%s", diff)
		}
	}
}
