package routing_test

import (
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/proxyless-grpc/xds/internal/routing"
)

func TestSmoke(t *testing.T) {
	rc := &routepb.RouteConfiguration{
		Name: "rc",
		VirtualHosts: []*routepb.VirtualHost{{
			Name:    "vh",
			Domains: []string{"*"},
			Routes: []*routepb.Route{{
				Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
			}},
		}},
	}
	r, err := routing.Compile(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := r.Match("foo.com", "/a/b", nil)
	if !ok || rt.Action != routing.ActionNonForwarding || rt.VirtualHost != "vh" {
		t.Fatalf("Match() = %+v, %v", rt, ok)
	}
}
