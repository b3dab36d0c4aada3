package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
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
		// WaitForHandlers: Stop returns once every ADS stream has ended.
		srv:    grpc.NewServer(grpc.WaitForHandlers(true)),
		served: make(chan error, 1),
	}
	// The demo's Listeners carry their routes inline, so only Listeners are
	// asked for; a RouteConfiguration cache is there for servers using RDS.
	mux := &cachev3.MuxCache{
		Classify: func(r *cachev3.Request) string { return r.GetTypeUrl() },
		Caches: map[string]cachev3.Cache{
			resourcev3.ListenerType: cp.listeners,
			resourcev3.RouteType:    cachev3.NewLinearCache(resourcev3.RouteType),
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

// stop ends every ADS stream and closes the control plane's port.
func (cp *controlPlane) stop() error {
	cp.srv.Stop()
	return <-cp.served
}

// bootstrapJSON is the xDS bootstrap (gRFC A27) of a server managed by the
// control plane at cpAddr.
func bootstrapJSON(cpAddr string) ([]byte, error) {
	type xdsServer struct {
		URI            string              `json:"server_uri"`
		ChannelCreds   []map[string]string `json:"channel_creds"`
		ServerFeatures []string            `json:"server_features"`
	}
	return json.MarshalIndent(struct {
		XDSServers       []xdsServer       `json:"xds_servers"`
		Node             map[string]string `json:"node"`
		ListenerTemplate string            `json:"server_listener_resource_name_template"`
	}{
		XDSServers: []xdsServer{{
			URI:            cpAddr,
			ChannelCreds:   []map[string]string{{"type": "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node:             map[string]string{"id": "quickstart-server"},
		ListenerTemplate: listenerNameTemplate,
	}, "", "  ")
}

// serverListener is the Listener for the xDS server listening on addr: one
// filter chain, whose HttpConnectionManager routes RPCs with routes (inline)
// and the router filter.
func serverListener(addr *net.TCPAddr, routes *routepb.RouteConfiguration) *listenerpb.Listener {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix:     "quickstart",
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: routes},
		HttpFilters: []*hcmpb.HttpFilter{{
			Name:       "router",
			ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerpb.Router{})},
		}},
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

// forwardRoute sends the RPCs whose method starts with prefix to a cluster,
// which is a proxy's job: an xDS server fails them with UNAVAILABLE.
func forwardRoute(name, prefix, cluster string) *routepb.Route {
	return &routepb.Route{
		Name:  name,
		Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{
			ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: cluster},
		}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only invalid UTF-8 in a string field fails, and there is none
	}
	return a
}
