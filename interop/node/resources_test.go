package node

// The xDS resources of the tests: the server's Listener (filter chains with
// an HttpConnectionManager, inline routes, optionally RBAC and TLS) and the
// Node client's Listener, Cluster and ClusterLoadAssignment.

import (
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// Names of the Node client's resources.
const (
	targetName     = "interop.test" // its Listener (api_listener) and the xds:/// target
	clusterName    = "interop-cluster"
	edsServiceName = "interop-eds"
)

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatalf("anypb.New(%T): %v", m, err)
	}
	return a
}

// serverListener is the server's Listener for host:port with chains.
func serverListener(host string, port uint32, chains ...*listenerpb.FilterChain) *listenerpb.Listener {
	return &listenerpb.Listener{
		Name:         e2e.ServerListenerName(host, port),
		Address:      socketAddress(host, port),
		FilterChains: chains,
	}
}

func socketAddress(host string, port uint32) *corepb.Address {
	return &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
		Protocol:      corepb.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
	}}}
}

// filterChain is a chain that matches every connection and runs an
// HttpConnectionManager with routes inline and filters, then the router.
// tls, if not nil, is its DownstreamTlsContext.
func filterChain(t *testing.T, name string, routes *routepb.RouteConfiguration, tls *tlspb.DownstreamTlsContext, filters ...*hcmpb.HttpFilter) *listenerpb.FilterChain {
	t.Helper()
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix:     "interop",
		HttpFilters:    append(filters, e2e.RouterHTTPFilter()),
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: routes},
	}
	fc := &listenerpb.FilterChain{
		Name: name,
		Filters: []*listenerpb.Filter{{
			Name:       e2e.HCMFilterName,
			ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)},
		}},
	}
	if tls != nil {
		fc.TransportSocket = &corepb.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: anyOf(t, tls)},
		}
	}
	return fc
}

// allRoutes lets every RPC through (a non_forwarding_action for prefix "/").
func allRoutes(name string) *routepb.RouteConfiguration { return e2e.DefaultRouteConfig(name) }

// routesForwarding lets every RPC through except method, whose route has a
// `route` action (to a cluster), which an xDS server must refuse.
func routesForwarding(name, method string) *routepb.RouteConfiguration {
	rc := allRoutes(name)
	vh := rc.VirtualHosts[0]
	forward := &routepb.Route{
		Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: method}},
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{
			ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "somewhere-else"},
		}},
	}
	vh.Routes = append([]*routepb.Route{forward}, vh.Routes...)
	return rc
}

// rbacDenying is an RBAC HTTP filter that denies method to everyone.
func rbacDenying(t *testing.T, method string) *hcmpb.HttpFilter {
	t.Helper()
	cfg := &rbacpb.RBAC{Rules: &rbacconfigpb.RBAC{
		Action: rbacconfigpb.RBAC_DENY,
		Policies: map[string]*rbacconfigpb.Policy{"deny-method": {
			Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{
				Rule: &matcherpb.PathMatcher_Path{Path: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: method}}},
			}}}},
			Principals: []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Any{Any: true}}},
		}},
	}}
	return &hcmpb.HttpFilter{Name: "rbac", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, cfg)}}
}

// downstreamMTLS is the server's side of mTLS: its certificate from
// instServerIdentity, client certificates required and verified with the CA
// of instServerRoots.
func downstreamMTLS() *tlspb.DownstreamTlsContext {
	return &tlspb.DownstreamTlsContext{
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instServerIdentity},
			ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
				CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instServerRoots},
			}},
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	}
}

// clientListener is the Node client's Listener: an api_listener whose
// inline routes send every RPC to clusterName.
func clientListener() *listenerpb.Listener {
	hcm := &hcmpb.HttpConnectionManager{
		HttpFilters: []*hcmpb.HttpFilter{e2e.RouterHTTPFilter()},
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
			Name: "interop-client-routes",
			VirtualHosts: []*routepb.VirtualHost{{
				Name:    "all",
				Domains: []string{"*"},
				Routes: []*routepb.Route{{
					Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routepb.Route_Route{Route: &routepb.RouteAction{
						ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: clusterName},
					}},
				}},
			}},
		}},
	}
	return &listenerpb.Listener{
		Name:        targetName,
		ApiListener: &listenerpb.ApiListener{ApiListener: e2e.HCMAny(hcm)},
	}
}

// clientCluster is the Node client's EDS cluster. With tls, its connections
// use mTLS (an UpstreamTlsContext, gRFC A29): the client's certificate from
// instClientIdentity, the server's verified with instClientRoots.
func clientCluster(t *testing.T, tls bool) *clusterpb.Cluster {
	t.Helper()
	c := &clusterpb.Cluster{
		Name:                 clusterName,
		ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS},
		EdsClusterConfig: &clusterpb.Cluster_EdsClusterConfig{
			ServiceName: edsServiceName,
			EdsConfig:   &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}},
		},
		LbPolicy: clusterpb.Cluster_ROUND_ROBIN,
	}
	if tls {
		utc := &tlspb.UpstreamTlsContext{CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instClientIdentity},
			ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
				CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instClientRoots},
			}},
		}}
		c.TransportSocket = &corepb.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: anyOf(t, utc)},
		}
	}
	return c
}

// clientEndpoints is the ClusterLoadAssignment of edsServiceName: the server.
func clientEndpoints(host string, port uint32) *endpointpb.ClusterLoadAssignment {
	return &endpointpb.ClusterLoadAssignment{
		ClusterName: edsServiceName,
		Endpoints: []*endpointpb.LocalityLbEndpoints{{
			Locality:            &corepb.Locality{Region: "r", Zone: "z"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointpb.LbEndpoint{{
				HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{
					Address: socketAddress(host, port),
				}},
			}},
		}},
	}
}
