package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
// server over a LinearCache of Listeners. The Listener carries its routes
// inline, so the server asks for nothing else.
type controlPlane struct {
	addr      string
	listeners *cachev3.LinearCache
	srv       *grpc.Server
	served    chan error
}

// startControlPlane serves ADS on a new loopback port.
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
	discoverypb.RegisterAggregatedDiscoveryServiceServer(cp.srv, serverv3.NewServer(ctx, cp.listeners, nil))
	go func() { cp.served <- cp.srv.Serve(lis) }()
	return cp, nil
}

// setListener publishes l (a new version of it if it exists).
func (cp *controlPlane) setListener(l *listenerpb.Listener) {
	// UpdateResource fails only on a nil resource.
	if err := cp.listeners.UpdateResource(l.GetName(), l); err != nil {
		panic(err)
	}
}

// stop ends every ADS stream and closes the control plane's port.
func (cp *controlPlane) stop() error {
	cp.srv.Stop()
	return <-cp.served
}

// bootstrapJSON is the xDS bootstrap (gRFC A27) of a server managed by the
// control plane at cpAddr. allowed_grpc_services (gRFC A102) lets the
// control plane point the ext_proc filter at processorTarget, with the
// credentials given here: a control plane without the trusted_xds_server
// server feature cannot send a side channel to any other target, nor
// choose its credentials (such a Listener is NACKed).
func bootstrapJSON(cpAddr, processorTarget string) []byte {
	return fmt.Appendf(nil, `{
  "xds_servers": [{
    "server_uri": %s,
    "channel_creds": [{"type": "insecure"}],
    "server_features": ["xds_v3"]
  }],
  "node": {"id": "extproc-example"},
  "server_listener_resource_name_template": %s,
  "allowed_grpc_services": {
    %s: {"channel_creds": [{"type": "insecure"}]}
  }
}`, jsonString(cpAddr), jsonString(listenerNameTemplate), jsonString(processorTarget))
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// extProcConfig is the ext_proc filter's config: call the processor at
// target with every response message of each RPC, and the RPC's method
// with each response event.
func extProcConfig(target string) *extprocpb.ExternalProcessor {
	return &extprocpb.ExternalProcessor{
		GrpcService: &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{
			GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target, StatPrefix: "redactor"},
		}},
		ProcessingMode: &extprocpb.ProcessingMode{
			RequestHeaderMode: extprocpb.ProcessingMode_SKIP, // the processor has nothing to do with them
			ResponseBodyMode:  extprocpb.ProcessingMode_GRPC, // each response message, serialized
			// The others keep their defaults: the response headers are
			// sent (response_header_mode DEFAULT = SEND), the trailers are
			// not, nor are the request's messages.
		},
		ResponseAttributes: []string{"request.path"},
		// failure_mode_allow stays false: if the processor fails or cannot
		// be reached, the RPC fails (UNAVAILABLE) rather than going on
		// unredacted.
	}
}

// greeterListener is the Listener of the xDS server listening on addr: one
// filter chain whose HttpConnectionManager runs the ext_proc filter, then
// the router, over inline routes that let every RPC through to the
// server's services.
func greeterListener(addr *net.TCPAddr, processorTarget string) *listenerpb.Listener {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix: "greeter",
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
			Name: "greeter-routes",
			VirtualHosts: []*routepb.VirtualHost{{
				Name:    "all",
				Domains: []string{"*"},
				Routes: []*routepb.Route{{
					Name:   "everything",
					Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: []*hcmpb.HttpFilter{
			{Name: "redactor", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(extProcConfig(processorTarget))}},
			{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerpb.Router{})}},
		},
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

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only invalid UTF-8 in a string field fails, and there is none
	}
	return a
}
