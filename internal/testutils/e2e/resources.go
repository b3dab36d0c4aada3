package e2e

import (
	"fmt"
	"net"
	"strconv"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ServerListenerNameTemplate is the server_listener_resource_name_template
// gRPC's xDS servers commonly use; ServerListenerName fills it.
const ServerListenerNameTemplate = "grpc/server?xds.resource.listening_address=%s"

// HCMFilterName is the name of the HttpConnectionManager network filter.
const HCMFilterName = "envoy.filters.network.http_connection_manager"

// ServerListenerName returns the Listener name a server bound to host:port
// watches with ServerListenerNameTemplate (IPv6 hosts are bracketed).
func ServerListenerName(host string, port uint32) string {
	return fmt.Sprintf(ServerListenerNameTemplate, net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10)))
}

// DefaultServerListener returns a Listener for an xDS server on host:port,
// named ServerListenerName(host, port): a TCP socket address and one filter
// chain (no match criteria) holding an HttpConnectionManager with the router
// filter. If routeName is not empty, the HttpConnectionManager gets its routes
// over RDS (config_source ads) from the RouteConfiguration routeName;
// otherwise it carries DefaultRouteConfig("inline-route") inline.
func DefaultServerListener(host string, port uint32, routeName string) *listenerpb.Listener {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix:  "e2e",
		HttpFilters: []*hcmpb.HttpFilter{RouterHTTPFilter()},
	}
	if routeName != "" {
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			RouteConfigName: routeName,
			ConfigSource: &corepb.ConfigSource{
				ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
				ResourceApiVersion:    corepb.ApiVersion_V3,
			},
		}}
	} else {
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: DefaultRouteConfig("inline-route")}
	}
	return &listenerpb.Listener{
		Name: ServerListenerName(host, port),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Protocol:      corepb.SocketAddress_TCP,
			Address:       host,
			PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains: []*listenerpb.FilterChain{{
			Name: "filter-chain-1",
			Filters: []*listenerpb.Filter{{
				Name:       HCMFilterName,
				ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: HCMAny(hcm)},
			}},
		}},
	}
}

// DefaultRouteConfig returns a RouteConfiguration named name with one
// virtual host matching every authority ("*") and one route matching every
// path (prefix "/") with a non_forwarding_action, which is what an xDS server
// needs to accept RPCs.
func DefaultRouteConfig(name string) *routepb.RouteConfiguration {
	return &routepb.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routepb.VirtualHost{{
			Name:    "vhost-all",
			Domains: []string{"*"},
			Routes: []*routepb.Route{{
				Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
			}},
		}},
	}
}

// RouterHTTPFilter returns the router HTTP filter, which must be the last
// filter of an HttpConnectionManager (gRFC A39).
func RouterHTTPFilter() *hcmpb.HttpFilter {
	return &hcmpb.HttpFilter{
		Name:       "router",
		ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerpb.Router{})},
	}
}

// HCMAny returns hcm packed in an Any, for a network filter's typed_config.
// It panics if hcm cannot be marshaled, which only invalid UTF-8 in a
// string field causes.
func HCMAny(hcm *hcmpb.HttpConnectionManager) *anypb.Any {
	return mustAny(hcm)
}

// mustAny packs m, panicking on failure; for test fixtures only.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("e2e: packing %T: %v", m, err))
	}
	return a
}
