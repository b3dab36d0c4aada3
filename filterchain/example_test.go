package filterchain_test

import (
	"fmt"
	"net/netip"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/filterchain"
)

// chain is a filter chain whose HttpConnectionManager takes its routes
// from the RouteConfiguration rds, for connections matched by m.
func chain(name, rds string, m *listenerpb.FilterChainMatch) *listenerpb.FilterChain {
	router, _ := anypb.New(&routerpb.Router{})
	hcm, _ := anypb.New(&hcmpb.HttpConnectionManager{
		HttpFilters: []*hcmpb.HttpFilter{{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: router}}},
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			RouteConfigName: rds,
			ConfigSource:    &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}},
		}},
	})
	return &listenerpb.FilterChain{
		Name:             name,
		FilterChainMatch: m,
		Filters:          []*listenerpb.Filter{{Name: "hcm", ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: hcm}}},
	}
}

// listener is a Listener on 10.0.0.1:8080: connections from 10.1.0.0/16
// get chain "internal", every other one the default chain.
func listener() *listenerpb.Listener {
	return &listenerpb.Listener{
		Name: "grpc/server?xds.resource.listening_address=10.0.0.1:8080",
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Address: "10.0.0.1", PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: 8080},
		}}},
		FilterChains: []*listenerpb.FilterChain{chain("internal", "internal-routes", &listenerpb.FilterChainMatch{
			SourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: "10.1.0.0", PrefixLen: wrapperspb.UInt32(16)}},
		})},
		DefaultFilterChain: chain("others", "public-routes", nil),
	}
}

// Check a Listener offline, and ask which chain serves a connection.
func ExampleCompile() {
	table, err := filterchain.Compile(listener(), filterchain.Options{})
	if err != nil {
		fmt.Println("the server would NACK it:", err)
		return
	}
	dst := netip.MustParseAddrPort("10.0.0.1:8080")
	for _, src := range []string{"10.1.2.3:40000", "192.0.2.7:40000"} {
		fc := table.Lookup(netip.MustParseAddrPort(src), dst)
		fmt.Printf("%s: chain %q, routes from %q, filters %v\n", src, fc.Name, fc.RouteConfigName, fc.HTTPFilters)
	}
	fmt.Println(table.CheckAddress(netip.MustParseAddrPort("10.0.0.2:8080")))
	// Output:
	// 10.1.2.3:40000: chain "internal", routes from "internal-routes", filters [router]
	// 192.0.2.7:40000: chain "others", routes from "public-routes", filters [router]
	// filterchain: Listener address 10.0.0.1:8080 does not match the listening address 10.0.0.2:8080
}
