package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// listenerNameTemplate is the bootstrap's server_listener_resource_name_template:
// the server asks for the Listener named after its listening address.
const listenerNameTemplate = "grpc/server?xds.resource.listening_address=%s"

// controlPlane is a minimal xDS management server: go-control-plane's ADS
// server over one LinearCache per resource type. A LinearCache answers a
// client that asks for resources by name, as an xDS server does: with the
// resource as soon as it exists, and with its absence when it is deleted.
type controlPlane struct {
	addr      string
	listeners *cachev3.LinearCache
	routes    *cachev3.LinearCache
	srv       *grpc.Server
	served    chan error
}

// startControlPlane serves the ADS service on a new loopback port.
func startControlPlane(ctx context.Context) (*controlPlane, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	cp := &controlPlane{
		addr:      lis.Addr().String(),
		listeners: cachev3.NewLinearCache(resourcev3.ListenerType),
		routes:    cachev3.NewLinearCache(resourcev3.RouteType),
		// WaitForHandlers: Stop returns once every ADS stream has ended.
		srv:    grpc.NewServer(grpc.WaitForHandlers(true)),
		served: make(chan error, 1),
	}
	// The server asks for its Listener, then for the RouteConfiguration the
	// Listener names (RDS over the same ADS stream).
	mux := &cachev3.MuxCache{
		Classify: func(r *cachev3.Request) string { return r.GetTypeUrl() },
		Caches: map[string]cachev3.Cache{
			resourcev3.ListenerType: cp.listeners,
			resourcev3.RouteType:    cp.routes,
		},
	}
	discoverypb.RegisterAggregatedDiscoveryServiceServer(cp.srv, serverv3.NewServer(ctx, mux, nil))
	go func() { cp.served <- cp.srv.Serve(lis) }()
	return cp, nil
}

// setListeners replaces every Listener of the control plane with ls (none:
// delete them all) and pushes the change to the subscribed servers.
func (cp *controlPlane) setListeners(ls ...*listenerpb.Listener) {
	m := make(map[string]cachetypes.Resource, len(ls))
	for _, l := range ls {
		m[l.GetName()] = l
	}
	cp.listeners.SetResources(m)
}

// setRoutes publishes rc (a new version of it if it exists) and pushes it to
// the servers that use it.
func (cp *controlPlane) setRoutes(rc *routepb.RouteConfiguration) {
	// UpdateResource fails only on a nil resource.
	if err := cp.routes.UpdateResource(rc.GetName(), rc); err != nil {
		panic(err)
	}
}

// stop ends every ADS stream and closes the control plane's port.
func (cp *controlPlane) stop() error {
	cp.srv.Stop()
	return <-cp.served
}

// certProvider is the name of the bootstrap's certificate provider
// instance, which Listeners name for their TLS (gRFC A29).
const certProvider = "quickstart"

// bootstrapJSON is the xDS bootstrap (gRFC A27) of a server managed by the
// control plane at cpAddr, whose certificate provider reads pki's files.
func bootstrapJSON(cpAddr string, pki *demoPKI) ([]byte, error) {
	type xdsServer struct {
		URI            string              `json:"server_uri"`
		ChannelCreds   []map[string]string `json:"channel_creds"`
		ServerFeatures []string            `json:"server_features"`
	}
	type provider struct {
		Plugin string            `json:"plugin_name"`
		Config map[string]string `json:"config"`
	}
	return json.MarshalIndent(struct {
		XDSServers       []xdsServer         `json:"xds_servers"`
		Node             map[string]string   `json:"node"`
		CertProviders    map[string]provider `json:"certificate_providers"`
		ListenerTemplate string              `json:"server_listener_resource_name_template"`
	}{
		XDSServers: []xdsServer{{
			URI:            cpAddr,
			ChannelCreds:   []map[string]string{{"type": "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node: map[string]string{"id": "quickstart-server"},
		// The server's certificate and the roots that verify clients, from
		// files, re-read every refresh_interval (as istio-agent writes them).
		CertProviders: map[string]provider{certProvider: {Plugin: "file_watcher", Config: map[string]string{
			"certificate_file":    pki.file("cert.pem"),
			"private_key_file":    pki.file("key.pem"),
			"ca_certificate_file": pki.file("ca.pem"),
			"refresh_interval":    "60s",
		}}},
		ListenerTemplate: listenerNameTemplate,
	}, "", "  ")
}

// serverListener is the Listener for the xDS server listening on addr: one
// filter chain, whose HttpConnectionManager gets its routes from the
// RouteConfiguration named routes (RDS, over the ADS stream) and runs
// filters, then the router.
func serverListener(addr *net.TCPAddr, routes string, filters ...*hcmpb.HttpFilter) *listenerpb.Listener {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix: "quickstart",
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			RouteConfigName: routes,
			ConfigSource: &corepb.ConfigSource{
				ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
				ResourceApiVersion:    corepb.ApiVersion_V3,
			},
		}},
		HttpFilters: append(filters, &hcmpb.HttpFilter{
			Name:       "router",
			ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerpb.Router{})},
		}),
	}
	return &listenerpb.Listener{
		Name: fmt.Sprintf(listenerNameTemplate, addr),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Address:       addr.IP.String(),
			PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: uint32(addr.Port)},
		}}},
		FilterChains: []*listenerpb.FilterChain{{
			Name: "default",
			Filters: []*listenerpb.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
			}},
		}},
	}
}

// requireMTLS sets l's filter chain to TLS with the server's certificate
// from the bootstrap's certificate provider, and client certificates
// required and verified with the same provider's roots (gRFC A29).
func requireMTLS(l *listenerpb.Listener) *listenerpb.Listener {
	instance := &tlspb.CertificateProviderPluginInstance{InstanceName: certProvider}
	tlsCtx := &tlspb.DownstreamTlsContext{
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: instance,
			ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
				CaCertificateProviderInstance: instance,
			}},
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	}
	l.FilterChains[0].TransportSocket = &corepb.TransportSocket{
		Name:       "envoy.transport_sockets.tls",
		ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: mustAny(tlsCtx)},
	}
	return l
}

// denyHeader is an RBAC HTTP filter (gRFC A41) that denies every RPC whose
// metadata has header = value, and allows the others.
func denyHeader(header, value string) *hcmpb.HttpFilter {
	policy := &rbacconfigpb.Policy{
		Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_Any{Any: true}}},
		Principals: []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Header{Header: &routepb.HeaderMatcher{
			Name: header,
			HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{
				MatchPattern: &matcherpb.StringMatcher_Exact{Exact: value},
			}},
		}}}},
	}
	rbac := &rbacpb.RBAC{Rules: &rbacconfigpb.RBAC{
		Action:   rbacconfigpb.RBAC_DENY,
		Policies: map[string]*rbacconfigpb.Policy{"deny-" + value: policy},
	}}
	return &hcmpb.HttpFilter{
		Name:       "rbac",
		ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(rbac)},
	}
}

// forwardMethod sends the RPCs of one method to a cluster, which is a proxy's
// job: an xDS server fails them with UNAVAILABLE.
func forwardMethod(name, method, cluster string) *routepb.Route {
	return &routepb.Route{
		Name:  name,
		Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: method}},
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{
			ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: cluster},
		}},
	}
}

// routeConfig returns a RouteConfiguration with one virtual host for every
// authority and the given routes, tried in order.
func routeConfig(name string, routes ...*routepb.Route) *routepb.RouteConfiguration {
	return &routepb.RouteConfiguration{
		Name:         name,
		VirtualHosts: []*routepb.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: routes}},
	}
}

// serveRoute lets the RPCs whose method starts with prefix through to the
// server's services: on an xDS server that is what non_forwarding_action means.
func serveRoute(name, prefix string) *routepb.Route {
	return &routepb.Route{
		Name:   name,
		Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only invalid UTF-8 in a string field fails, and there is none
	}
	return a
}
